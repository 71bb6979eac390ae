//go:build linux && amd64

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The comparison runs when RDMAGO_MLX5CMP=1 (make test sets it, and then a
// missing prerequisite fails the test); otherwise it skips, since it needs
// root or user namespaces, gcc and rdma-core's libibverbs-dev.
func requireCompare(t *testing.T) {
	t.Helper()
	if os.Getenv("RDMAGO_MLX5CMP") != "1" {
		t.Skip("set RDMAGO_MLX5CMP=1 to compare libmlx5 with rdmago's provider (make test-mlx5cmp)")
	}
}

const profile = "testdata/cx6.json"

// tempDirs are removed when the tests end (TestMain).
var (
	tempMu   sync.Mutex
	tempDirs []string
)

func tempDir() (string, error) {
	dir, err := os.MkdirTemp("", "mlx5cmp-test-")
	if err == nil {
		tempMu.Lock()
		tempDirs = append(tempDirs, dir)
		tempMu.Unlock()
	}
	return dir, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// build compiles the scenario programs (each C one with scenario/common.c,
// each Go one with package scen; the RC scenario's and the random
// sequences' Go programs also with the mutant provider) and this command
// once per test binary (each fuzz worker is one) into a temporary
// directory.
var build = sync.OnceValues(func() (string, error) {
	if err := inheritedCloseOnExec(); err != nil {
		return "", err
	}
	dir, err := tempDir()
	if err != nil {
		return "", err
	}
	gcc := func(out, src string) []string {
		return []string{"gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, out), "scenario/" + src, "scenario/common.c", "-libverbs"}
	}
	goBuild := func(out, pkg string, tags ...string) []string {
		s := []string{"go", "build"}
		if len(tags) > 0 {
			s = append(s, "-tags", strings.Join(tags, ","))
		}
		return append(s, "-o", filepath.Join(dir, out), pkg)
	}
	steps := [][]string{
		gcc("scenario-c", "rc.c"),
		gcc("random-c", "random.c"),
		gcc("bench-c", "bench.c"),
		goBuild("scenario-go", "./scenario/goscen"),
		goBuild("scenario-go-mutant", "./scenario/goscen", "mlx5cmp_mutant"),
		goBuild("random-go", "./scenario/gorandom"),
		goBuild("random-go-mutant", "./scenario/gorandom", "mlx5cmp_mutant"),
		goBuild("bench-go", "./scenario/gobench"),
		goBuild("mlx5cmp", "."),
		goBuild("rdmago", "github.com/rdmago/rdma/cmd/rdmago"),
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return dir, nil
})

// transcriptOf runs one scenario program under the supervisor.
func transcriptOf(t *testing.T, prog string, args ...string) []string {
	t.Helper()
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(prog)+".txt")
	cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), append([]string{"run", "-profile", profile, "-o", out, "--", filepath.Join(dir, prog)}, args...)...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, b)
	}
	lines, err := readTranscript(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1] != "end" {
		t.Fatalf("%s: the transcript does not reach the scenario's end:\n%s", prog, strings.Join(lines, "\n"))
	}
	return lines
}

// loadDivergences reads testdata/divergences.txt: blocks of
//
//	side: c|go|both
//	step: REGEXP (optional)
//	match: REGEXP (optional)
//	line: REGEXP
//	replace: TEXT (optional)
//	count: N (optional)
//	why: TEXT
//
// separated by blank lines.
func loadDivergences(path string) ([]divergence, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []divergence
	var cur divergence
	flush := func() error {
		if cur.Side == "" && cur.Line == nil {
			return nil
		}
		if (cur.Side != "c" && cur.Side != "go" && cur.Side != "both") || cur.Line == nil || cur.Reason == "" {
			return fmt.Errorf("%s: a divergence needs side (c, go or both), line and why: %+v", path, cur)
		}
		out = append(out, cur)
		cur = divergence{}
		return nil
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.TrimSpace(l) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want KEY: VALUE", path, n)
		}
		switch k {
		case "side":
			cur.Side = v
		case "step", "match", "line":
			re, err := regexp.Compile(v)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			switch k {
			case "step":
				cur.Step = re
			case "match":
				cur.Match = re
			default:
				cur.Line = re
			}
		case "count":
			c, err := strconv.Atoi(v)
			if err != nil || c < 1 {
				return nil, fmt.Errorf("%s:%d: count %q", path, n, v)
			}
			cur.Count = c
		case "replace":
			r := v
			cur.Replace = &r
		case "why":
			cur.Reason = v
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q", path, n, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, flush()
}

// TestCompareRC runs the RC scenarios on libmlx5 and on rdmago's provider
// against the same fake device and requires the transcripts to be equal
// but for the divergences docs/mlx5.md documents.
func TestCompareRC(t *testing.T) {
	requireCompare(t)
	divs, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	c := transcriptOf(t, "scenario-c", "all")
	g := transcriptOf(t, "scenario-go", "all")
	used := map[int]bool{}
	if d := diffWith(c, g, divs, used); d != "" {
		t.Errorf("libmlx5 (-) and rdmago (+) differ:\n%s", d)
	}
	for i, d := range divs {
		if !used[i] {
			t.Errorf("divergence %q (%s side, line %s) no longer occurs: remove it here and in docs/mlx5.md", d.Reason, d.Side, d.Line)
		}
	}
	if n := countWQEs(c); n < 100 {
		t.Errorf("the C transcript holds %d WQEs; the scenarios post more than 200", n)
	}
}

// TestCompareCatchesMutant is the comparison's own test: a Go provider
// built with one field of its control segment wrong (the mlx5cmp_mutant
// tag drops the fence bit) must make the transcripts differ, in the step
// that fences and nowhere else.
func TestCompareCatchesMutant(t *testing.T) {
	requireCompare(t)
	divs, err := loadDivergences("testdata/divergences.txt")
	if err != nil {
		t.Fatal(err)
	}
	c := transcriptOf(t, "scenario-c", "all")
	m := transcriptOf(t, "scenario-go-mutant", "all")
	d := diffWith(c, m, divs, nil)
	if d == "" {
		t.Fatal("the mutant provider's transcript equals libmlx5's: the comparison cannot see a wrong fence bit")
	}
	var steps []string
	for _, l := range strings.Split(d, "\n") {
		if s, ok := strings.CutPrefix(l, "step "); ok && strings.HasSuffix(s, ":") {
			steps = append(steps, strings.TrimSuffix(s, ":"))
		}
	}
	if len(steps) != 1 || steps[0] != "rc.fence" {
		t.Errorf("the mutant differs in steps %q, want only rc.fence:\n%s", steps, d)
	}
}

func countWQEs(lines []string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, " wqe[") {
			n++
		}
	}
	return n
}

// TestSupervisorNoDevice: a program that opens nothing runs under the
// supervisor unchanged, and its transcript is empty.
func TestSupervisorPassThrough(t *testing.T) {
	requireCompare(t)
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "t.txt")
	cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), "run", "-profile", profile, "-o", out, "--", "/bin/sh", "-c",
		"cat /sys/class/infiniband_verbs/uverbs0/ibdev && test -c /dev/infiniband/uverbs0 && ls /sys/class/infiniband")
	b, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("exit %d:\n%s", ee.ExitCode(), b)
		}
		t.Fatal(err)
	}
	if got := string(b); got != "mlx5_0\nmlx5_0\n" {
		t.Errorf("output %q, want the fake sysfs's ibdev and class listing", got)
	}
}

// TestSupervisorSignals: a target that opens the device a few thousand
// times while every thread of the supervisor is sent SIGURG (the signal
// the Go runtime preempts with) as fast as it can be. A signal that lands
// while the supervisor installs the device's descriptor in the target
// restarts the ioctl; the answer must still come, once.
func TestSupervisorSignals(t *testing.T) {
	requireCompare(t)
	dir, err := build()
	if err != nil {
		t.Fatal(err)
	}
	const opens = 3000
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do exec 3<>/dev/infiniband/uverbs0 || exit 1; exec 3>&-; i=$((i+1)); done; echo $i`, opens)
	out := filepath.Join(t.TempDir(), "t.txt")
	cmd := exec.Command(filepath.Join(dir, "mlx5cmp"), "run", "-profile", profile, "-o", out, "--", "/bin/sh", "-c", script)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var sent atomic.Int64
	go func() {
		pid := cmd.Process.Pid
		for {
			select {
			case <-done:
				return
			default:
			}
			tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			for _, task := range tasks {
				tid, err := strconv.Atoi(task.Name())
				if err == nil && unix.Tgkill(pid, tid, unix.SIGURG) == nil {
					sent.Add(1)
				}
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	t.Logf("%d signals sent", sent.Load())
	if err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got, want := strings.TrimSpace(b.String()), strconv.Itoa(opens); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}
