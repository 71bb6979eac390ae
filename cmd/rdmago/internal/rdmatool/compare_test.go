package rdmatool

import (
	"bytes"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// The comparison of rdmago rdma with the C tool: both run on the same
// state, and their outputs are compared line by line and field by field.

const cRdma = "/usr/bin/rdma"

type result struct {
	stdout, stderr string
	status         int
}

func runC(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(cRdma, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	st := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		st = ee.ExitCode()
	case err != nil:
		t.Fatalf("rdma %q: %v", args, err)
	}
	return result{o.String(), e.String(), st}
}

func runGo(args ...string) result {
	o, e, st := tooltest.Run(Commands(), append([]string{"rdma"}, args...)...)
	return result{o, e, st}
}

// fieldDiff describes the first difference of two outputs: the line and,
// within it, the whitespace-separated field; "" if they are equal.
func fieldDiff(want, got string) string {
	if want == got {
		return ""
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w == g {
			continue
		}
		wf, gf := strings.Fields(w), strings.Fields(g)
		for k := 0; k < max(len(wf), len(gf)); k++ {
			var a, b string
			if k < len(wf) {
				a = wf[k]
			}
			if k < len(gf) {
				b = gf[k]
			}
			if a != b {
				return "line " + itoa(i+1) + " field " + itoa(k+1) + ": C " + quote(a) + ", rdmago " + quote(b) +
					"\n  C:      " + quote(w) + "\n  rdmago: " + quote(g)
			}
		}
		return "line " + itoa(i+1) + " differs in spacing:\n  C:      " + quote(w) + "\n  rdmago: " + quote(g)
	}
	return "outputs differ"
}

func itoa(i int) string { return strconv.Itoa(i) }

func quote(s string) string { return strconv.Quote(s) }

// compare runs args with both tools and fails the test where stdout,
// stderr or the exit status differ. The state may move between the runs
// (a counter, a connection's state): the C tool runs before and after
// rdmago, and rdmago must match one of its runs; when the two C runs
// differ the three runs are retried.
func compare(t *testing.T, args ...string) result {
	t.Helper()
	var c1, c2, g result
	for try := 0; try < 5; try++ {
		c1 = runC(t, args...)
		g = runGo(args...)
		c2 = runC(t, args...)
		if g == c1 || g == c2 {
			return g
		}
		if c1 == c2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := fieldDiff(c1.stdout, g.stdout); d != "" {
		t.Errorf("rdma %s: stdout: %s\nC stdout:\n%s\nrdmago stdout:\n%s", strings.Join(args, " "), d, c1.stdout, g.stdout)
	}
	if c1.stderr != g.stderr {
		t.Errorf("rdma %s: stderr: C %q, rdmago %q", strings.Join(args, " "), c1.stderr, g.stderr)
	}
	if c1.status != g.status {
		t.Errorf("rdma %s: exit status: C %d, rdmago %d", strings.Join(args, " "), c1.status, g.status)
	}
	return g
}
