// Command testlog reads `go test -json` from stdin and prints it as the
// make targets want it read: the tests' own output, without the lines of
// tests starting, pausing, resuming and passing; a list of the skipped
// tests with their reasons; and, last, each failed test again with the
// end of its output.
//
// The repetition at the end is the point. A device test's subtests can
// print a good deal (the commands they ran, relayed program output), and a
// failure's message then sits far above the final FAIL, out of sight of
// anyone who reads only the end of a CI log. The summary puts it there.
//
// A test binary that hits -test.timeout panics from inside the test that
// was running: test2json gives that test the panic's output and never a
// fail event, only the package fails. testlog reports such a test as one
// that did not finish, with its last messages, the panic's list of running
// tests and, from the goroutine dump, the stacks that pass through this
// module's code: where the hang is, in the few lines a CI summary keeps.
//
// Usage:
//
//	go test -json ./... 2>&1 | testlog [-log FILE] [-lines N]
//
// testlog exits 1 when a test or package failed, 0 otherwise; lines that
// are not JSON (build errors, go's own messages) are copied unchanged.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is the part of test2json's TestEvent that testlog reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// noise are the lines make's output leaves out; they stay in -log's file.
var noise = regexp.MustCompile(`^(=== RUN|=== PAUSE|=== CONT|\s*--- PASS)`)

// maxLine bounds each line that the summary repeats.
const maxLine = 240

// keep is how many lines of each running test's output are kept.
const keep = 200

type key struct{ pkg, test string }

// maxDump bounds the panic output kept per test (a goroutine dump of a
// stuck device test is a few hundred lines).
const maxDump = 20000

// module is the prefix of the functions whose frames the summary of a
// goroutine dump keeps.
const module = "github.com/rdmago/"

type summary struct {
	lines      int              // output lines repeated per failed test
	output     map[key][]string // the last lines of each test's output
	dumps      map[key][]string // a test's output from a "panic: " line on
	running    map[key]bool     // tests started and not yet ended
	unfinished map[key]bool     // tests still running when their package failed
	failed     []key            // in the order they failed
	skips      []string         // "pkg Test: reason"
	bad        bool
}

func newSummary(lines int) *summary {
	return &summary{
		lines:      lines,
		output:     map[key][]string{},
		dumps:      map[key][]string{},
		running:    map[key]bool{},
		unfinished: map[key]bool{},
	}
}

func (s *summary) add(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "run":
		if e.Test != "" {
			s.running[k] = true
		}
	case "output", "build-output":
		line := strings.TrimRight(e.Output, "\n")
		if d, ok := s.dumps[k]; ok || (e.Test != "" && strings.HasPrefix(line, "panic: ")) {
			if len(d) < maxDump {
				s.dumps[k] = append(d, line)
			}
			return
		}
		if strings.HasPrefix(strings.TrimSpace(line), "=== ") {
			return
		}
		o := append(s.output[k], line)
		if len(o) > keep {
			o = o[len(o)-keep:]
		}
		s.output[k] = o
	case "skip":
		if e.Test == "" {
			return
		}
		reason := ""
		for _, l := range s.output[k] {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--- SKIP") {
				reason = t
			}
		}
		s.skips = append(s.skips, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason))
		delete(s.output, k)
		delete(s.running, k)
	case "fail", "build-fail":
		s.bad = true
		delete(s.running, k)
		if e.Test == "" {
			// The tests of this package that never ended: the binary
			// panicked (a timeout) or died inside them.
			var left []key
			for r := range s.running {
				if r.pkg == e.Package {
					left = append(left, r)
				}
			}
			slices.SortFunc(left, func(a, b key) int { return strings.Compare(a.test, b.test) })
			for _, r := range left {
				delete(s.running, r)
				s.unfinished[r] = true
				s.failed = append(s.failed, r)
			}
		}
		s.failed = append(s.failed, k)
	case "pass":
		// Passing tests' output is no longer needed (nor, once the reason
		// is taken, skipped tests').
		delete(s.output, k)
		delete(s.running, k)
	}
}

// leaves are the failures to show: a test whose subtest failed is left
// out (its subtest says why), and so is a package whose test failed.
func (s *summary) leaves() []key {
	var out []key
	for _, k := range s.failed {
		leaf := true
		for _, o := range s.failed {
			if o.pkg != k.pkg || o == k {
				continue
			}
			if k.test == "" || strings.HasPrefix(o.test, k.test+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			out = append(out, k)
		}
	}
	return out
}

func (s *summary) print(w io.Writer) {
	if len(s.skips) > 0 {
		fmt.Fprintln(w, "== skipped (each must name a feature the kernel or provider lacks, or another VM mode):")
		for _, l := range s.skips {
			fmt.Fprintln(w, "   "+cut(l))
		}
	}
	leaves := s.leaves()
	if len(leaves) == 0 {
		return
	}
	fmt.Fprintf(w, "== failed: %d; the end of each one's output:\n", len(leaves))
	for _, k := range leaves {
		name := k.pkg
		if k.test != "" {
			name += " " + k.test
		}
		if s.unfinished[k] {
			fmt.Fprintf(w, "--- FAIL: %s (did not finish)\n", name)
		} else {
			fmt.Fprintf(w, "--- FAIL: %s\n", name)
		}
		for _, l := range s.brief(k) {
			fmt.Fprintln(w, "    "+l)
		}
		for _, l := range stacks(s.dumps[k]) {
			fmt.Fprintln(w, "    "+cut(l))
		}
	}
}

// Bounds on the part of a goroutine dump that the summary repeats: the
// lines before the first goroutine (the panic, the running tests), the
// goroutines and each one's frames.
const (
	maxHead       = 20
	maxGoroutines = 12
	maxFrames     = 8
)

// stacks condenses a panic's output: the panic line and its list of
// running tests, then each goroutine whose stack passes through this
// module, as its header, the frame it is blocked in and this module's
// frames, one line each ("pkg.Func file.go:123"). The rest (the runtime's,
// the testing package's) is in the log.
func stacks(dump []string) []string {
	var out []string
	i := 0
	for ; i < len(dump) && !strings.HasPrefix(dump[i], "goroutine "); i++ {
		if l := strings.TrimSpace(dump[i]); l != "" && len(out) < maxHead {
			out = append(out, l)
		}
	}
	shown, left := 0, 0
	for i < len(dump) {
		header := dump[i]
		i++
		var frames []string // "func file:line"
		for ; i < len(dump) && !strings.HasPrefix(dump[i], "goroutine "); i++ {
			fn := strings.TrimSpace(dump[i])
			if fn == "" || strings.HasPrefix(dump[i], "\t") {
				continue
			}
			loc := ""
			if i+1 < len(dump) && strings.HasPrefix(dump[i+1], "\t") {
				loc = strings.TrimSpace(dump[i+1])
				if sp := strings.LastIndex(loc, " +0x"); sp >= 0 {
					loc = loc[:sp]
				}
				if sl := strings.LastIndex(loc, "/"); sl >= 0 {
					loc = loc[sl+1:]
				}
				i++
			}
			if p := strings.LastIndex(fn, "("); p > 0 && strings.HasSuffix(fn, ")") {
				fn = fn[:p]
			}
			frames = append(frames, fn+" "+loc)
		}
		ours := false
		for _, f := range frames {
			ours = ours || strings.HasPrefix(f, module)
		}
		if !ours {
			continue
		}
		if shown == maxGoroutines {
			left++
			continue
		}
		shown++
		out = append(out, strings.TrimSuffix(header, ":"))
		n := 0
		for j, f := range frames {
			if (j == 0 || strings.HasPrefix(f, module)) && n < maxFrames {
				out = append(out, "  "+strings.TrimPrefix(f, module))
				n++
			}
		}
	}
	if left > 0 {
		out = append(out, fmt.Sprintf("(and %d more goroutines in this module's code; the whole dump is in the log)", left))
	}
	return out
}

// logStart matches the first line of a t.Log or t.Error message.
var logStart = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

// brief is the end of k's output, each message cut to its first
// maxHead and last maxTail continuation lines (a relayed program's output
// can be long; the message that says what failed must not be pushed out
// by it, and a program's last lines, its stderr's, are often the ones that
// say why it failed). When that is still more than s.lines, the messages
// that were cut (relayed output) keep only their first and last lines,
// oldest first, before any first line is dropped: a test that relays
// several programs' output after its failure must still show the failure.
func (s *summary) brief(k key) []string {
	const maxHead, maxTail = 2, 3
	type message struct {
		first string
		cont  []string // continuation lines
	}
	var msgs []*message
	for _, l := range s.output[k] {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "--- "):
			continue
		case logStart.MatchString(l) || len(msgs) == 0:
			msgs = append(msgs, &message{first: cut(l)})
		default:
			m := msgs[len(msgs)-1]
			m.cont = append(m.cont, cut("  "+l))
		}
	}
	shown := make([][]string, len(msgs))
	total := 0
	for i, m := range msgs {
		lines := []string{m.first}
		if len(m.cont) > maxHead+maxTail {
			lines = append(lines, m.cont[:maxHead]...)
			lines = append(lines, "  …")
			lines = append(lines, m.cont[len(m.cont)-maxTail:]...)
		} else {
			lines = append(lines, m.cont...)
		}
		shown[i] = lines
		total += len(lines)
	}
	for i, m := range msgs {
		if total <= s.lines {
			break
		}
		if len(m.cont) > maxHead+maxTail {
			total -= len(shown[i]) - 3
			shown[i] = []string{m.first, "  …", m.cont[len(m.cont)-1]}
		}
	}
	var out []string
	for _, l := range shown {
		out = append(out, l...)
	}
	if len(out) > s.lines {
		out = out[len(out)-s.lines:]
	}
	return out
}

func cut(s string) string {
	if len(s) > maxLine {
		return s[:maxLine] + " …"
	}
	return s
}

func run(in io.Reader, out io.Writer, logw io.Writer, lines int) bool {
	s := newSummary(lines)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		raw := sc.Bytes()
		var e event
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &e) != nil {
			fmt.Fprintf(out, "%s\n", raw)
			fmt.Fprintf(logw, "%s\n", raw)
			continue
		}
		if e.Output != "" {
			io.WriteString(logw, e.Output)
			if !noise.MatchString(e.Output) {
				io.WriteString(out, e.Output)
			}
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testlog: reading the test output: %v\n", err)
		s.bad = true
	}
	s.print(out)
	return !s.bad
}

func main() {
	logFile := flag.String("log", "", "also write the whole plain-text output to `file`")
	lines := flag.Int("lines", 25, "output lines to repeat for each failed test")
	flag.Parse()
	logw := io.Discard
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
			os.Exit(2)
		}
		logw = f
		defer f.Close()
	}
	if !run(os.Stdin, os.Stdout, logw, *lines) {
		// Exit skips the deferred Close; the file is written unbuffered.
		os.Exit(1)
	}
}
