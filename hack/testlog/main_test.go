package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/fail.json is `go test -json` of a package whose TestA/one logs,
// fails and relays a program's output from a cleanup, whose TestA/two and
// /three pass, and whose TestSkip skips.
func TestRun(t *testing.T) {
	out, log := runFile(t, "testdata/fail.json")
	for _, noisy := range []string{"=== RUN", "--- PASS"} {
		if strings.Contains(out.String(), noisy) {
			t.Errorf("output has %q lines", noisy)
		}
		if !strings.Contains(log.String(), noisy) {
			t.Errorf("log lacks %q lines", noisy)
		}
	}
	checkTail(t, out, "== skipped", []string{
		" (each must name a feature the kernel or provider lacks, or another VM mode):",
		"   tl/p TestSkip: p_test.go:13: no such feature",
		"== failed: 1; the end of each one's output:",
		"--- FAIL: tl/p TestA/one",
		"    p_test.go:6: one line 0",
		"    p_test.go:6: one line 1",
		"    p_test.go:6: one line 2",
		"    p_test.go:6: one line 3",
		"    p_test.go:6: one line 4",
		"    p_test.go:6: one line 5",
		"    p_test.go:6: one line 6",
		"    p_test.go:6: one line 7",
		"    p_test.go:9: the reason one failed",
		"    p_test.go:8: server output:",
		"      row of perftest",
		"      row of perftest",
		"      …",
		"      row of perftest",
		"      row of perftest",
		"      row of perftest",
	})
}

// runFile runs testlog on a file of go test -json, which failed, and
// returns its output and log.
func runFile(t *testing.T, name string) (out, log *bytes.Buffer) {
	t.Helper()
	in, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, log = new(bytes.Buffer), new(bytes.Buffer)
	if run(in, out, log, 25) {
		t.Errorf("run reported success for %s, whose package failed", name)
	}
	return out, log
}

// checkTail compares the lines of out after from with want.
func checkTail(t *testing.T, out *bytes.Buffer, from string, want []string) {
	t.Helper()
	_, tail, ok := strings.Cut(out.String(), from)
	if !ok {
		t.Fatalf("no %q in:\n%s", from, out.String())
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(tail, "\n"), "\n")); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

func TestRunPass(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestX"}
{"Action":"output","Package":"p","Test":"TestX","Output":"=== RUN   TestX\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"--- PASS: TestX (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestX"}
not json: copied
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
`
	var out bytes.Buffer
	if !run(strings.NewReader(in), &out, &bytes.Buffer{}, 25) {
		t.Error("run reported failure for a passing package")
	}
	if got, want := out.String(), "not json: copied\nok  \tp\t0.1s\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// A package that fails without a failed test (a panic outside tests, a
// build failure, a timeout in TestMain) is itself the failure to show.
func TestLeavesPackage(t *testing.T) {
	s := newSummary(25)
	s.add(event{Action: "output", Package: "p", Output: "panic: boom\n"})
	s.add(event{Action: "fail", Package: "p"})
	s.add(event{Action: "fail", Package: "q", Test: "TestA"})
	s.add(event{Action: "fail", Package: "q"})
	want := []key{{"p", ""}, {"q", "TestA"}}
	if diff := cmp.Diff(want, s.leaves(), cmp.AllowUnexported(key{})); diff != "" {
		t.Errorf("leaves (-want +got):\n%s", diff)
	}
}

// TestBriefKeepsFailure: a failure followed by more relayed program output
// than the summary's budget still shows its message; the relays give up
// their continuation lines first.
func TestBriefKeepsFailure(t *testing.T) {
	s := newSummary(16)
	k := key{"p", "TestX"}
	out := func(l string) { s.add(event{Action: "output", Package: "p", Test: "TestX", Output: l + "\n"}) }
	out("x_test.go:10: the figures differ:")
	out("    -perftest")
	out("    +rdmago")
	for _, who := range []string{"server", "client", "kernel"} {
		out("x_test.go:20: " + who + " output:")
		for i := range 9 {
			out(fmt.Sprintf("    line %d of %s", i, who))
		}
	}
	s.add(event{Action: "fail", Package: "p", Test: "TestX"})
	want := []string{
		"x_test.go:10: the figures differ:",
		"  -perftest",
		"  +rdmago",
		"x_test.go:20: server output:",
		"  …",
		"  line 8 of server",
		"x_test.go:20: client output:",
		"  …",
		"  line 8 of client",
		"x_test.go:20: kernel output:",
		"  line 0 of kernel",
		"  line 1 of kernel",
		"  …",
		"  line 6 of kernel",
		"  line 7 of kernel",
		"  line 8 of kernel",
	}
	// 24 lines before: collapsing the two oldest relays to their first
	// and last lines fits 16.
	got := s.brief(k)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("brief (-want +got):\n%s", diff)
	}
}

// testdata/timeout.json is `go test -json -timeout 2s` of a package whose
// TestHang/sub logs, starts a goroutine that blocks in wait and sleeps past
// the timeout: the binary panics inside the subtest, and no test gets a
// fail event, only the package.
func TestRunTimeout(t *testing.T) {
	out, _ := runFile(t, "testdata/timeout.json")
	checkTail(t, out, "== failed", []string{
		": 1; the end of each one's output:",
		"--- FAIL: github.com/rdmago/tl TestHang/sub (did not finish)",
		"    p_test.go:14: dialing",
		"    panic: test timed out after 2s",
		"    running tests:",
		"    TestHang (2s)",
		"    TestHang/sub (2s)",
		"    goroutine 4 [chan receive]",
		"      testing.(*T).Run testing.go:2109",
		"      tl.TestHang p_test.go:13",
		"    goroutine 5 [sleep]",
		"      time.Sleep time.go:363",
		"      tl.TestHang.func1 p_test.go:16",
		"    goroutine 6 [chan receive]",
		"      tl.wait p_test.go:8",
	})
}

func TestStacksBounded(t *testing.T) {
	var dump []string
	dump = append(dump, "panic: test timed out after 1s", "")
	for g := 0; g < maxGoroutines+3; g++ {
		dump = append(dump, fmt.Sprintf("goroutine %d [select]:", g))
		for f := 0; f < maxFrames+5; f++ {
			dump = append(dump, fmt.Sprintf("github.com/rdmago/x.f%d(...)", f), fmt.Sprintf("\t/src/x/x.go:%d +0x1f", f))
		}
		dump = append(dump, "")
	}
	for i := range maxHead + 5 {
		// Output after a line that only looks like a panic's.
		dump = append([]string{fmt.Sprintf("line %d", i)}, dump...)
	}
	dump = append([]string{"panic: a program's message"}, dump...)
	out := stacks(dump)
	if got, want := out[maxHead-1], "line 6"; got != want {
		t.Errorf("last line before the goroutines %q, want %q", got, want)
	}
	out = out[maxHead:]
	if got, want := out[len(out)-1], "(and 3 more goroutines in this module's code; the whole dump is in the log)"; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if got, want := len(out), maxGoroutines*(1+maxFrames)+1; got != want {
		t.Errorf("%d lines, want %d", got, want)
	}
	if got, want := out[1], "  x.f0 x.go:0"; got != want {
		t.Errorf("first frame %q, want %q", got, want)
	}
}
