package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/perftable"
	"github.com/rdmago/rdma/internal/testenv"
)

// ppChildEnv, when set, makes the test binary run rdmago with its
// arguments instead of the tests.
const ppChildEnv = "RDMAGO_TEST_RUN_RDMAGO"

// ppRunTimeout bounds each process of a run: under TCG a 50-iteration
// exchange takes well under a second, the start of a process a few.
const ppRunTimeout = 90 * time.Second

// ppProc is one side of a run.
type ppProc struct {
	label          string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

// startPP starts argv (rdmago when argv[0] is "rdmago") with a timeout.
// logOnFailure logs what a process printed once the test has ended, and
// only if it failed: a passing run's output would bury a failing one's in
// the log (the tools print pages each), and CI shows only an excerpt.
func logOnFailure(t *testing.T, p *ppProc, status int) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (status %d):\n%s%s", p.label, status, p.stdout.String(), p.stderr.String())
		}
	})
}

func startPP(t *testing.T, ctx context.Context, label string, argv []string) *ppProc {
	t.Helper()
	p := &ppProc{label: label, done: make(chan struct{})}
	if argv[0] == "rdmago" {
		p.cmd = exec.CommandContext(ctx, os.Args[0], argv[1:]...)
		p.cmd.Env = append(os.Environ(), ppChildEnv+"=1")
	} else {
		p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	t.Logf("%s: %s", label, strings.Join(argv, " "))
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// wait waits for the process and returns its exit status (-1 if killed).
func (p *ppProc) wait() int {
	<-p.done
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// freePort returns a TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until the server listens on port, or exits.
func waitListening(t *testing.T, srv *ppProc, port int) {
	t.Helper()
	deadline := time.Now().Add(ppRunTimeout)
	for !perftable.Listening(port) {
		select {
		case <-srv.done:
			t.Fatalf("%s exited (%v) before listening on port %d:\n%s%s", srv.label, srv.err, port, srv.stdout.String(), srv.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on port %d after %v", srv.label, port, ppRunTimeout)
		}
	}
}

func requireCTool(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if testenv.InVM() {
			t.Fatalf("rdma-core's %s is missing (install ibverbs-utils): %v", path, err)
		}
		t.Skipf("no %s: %v", path, err)
	}
}

const (
	rpCTool   = "/usr/bin/rping"
	rpVMAddr  = "10.0.2.15"
	rpCount   = 10
	rpTimeout = 90 * time.Second
)

// cmListening reports whether an rdma_cm ID listens on port, from the
// kernel's table of them (rdma res show cm_id).
func cmListening(port int) bool {
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
	if err != nil {
		return false
	}
	suffix := ":" + strconv.Itoa(port) + " "
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, " state LISTEN ") && strings.Contains(line+" ", suffix) {
			return true
		}
	}
	return false
}

// cmIDs counts the rdma_cm IDs on local port port: a listener and the
// connections it accepted.
func cmIDs(port int) int {
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), ":"+strconv.Itoa(port)+" ")
}

// waitCMListening waits until the server listens on port through
// rdma_cm, or exits.
func waitCMListening(t *testing.T, srv *ppProc, port int) {
	t.Helper()
	deadline := time.Now().Add(rpTimeout)
	for !cmListening(port) {
		select {
		case <-srv.done:
			t.Fatalf("%s exited (%v) before listening on port %d:\n%s%s", srv.label, srv.err, port, srv.stdout.String(), srv.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on port %d after %v", srv.label, port, rpTimeout)
		}
	}
}

func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// roceGID is ::ffff:10.0.2.15, the VM's RoCE v2 GID.
var roceGID = [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 2, 15: 15}

// fuzzPeer is a connection whose peer's bytes are the fuzzer's; what
// rdmago writes is thrown away.
type fuzzPeer struct{ r io.Reader }

func (p fuzzPeer) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p fuzzPeer) Write(b []byte) (int, error) { return len(b), nil }

// runCommands runs the command line args among cmds (and help), in
// process, as rdmago would.
func runCommands(cmds []*command, args ...string) (stdout, stderr string, status int) {
	var o, e bytes.Buffer
	status = newCommandSet(cmds).run(args, &o, &e)
	return o.String(), e.String(), status
}

// testMain is the TestMain of a tool's tests: with ppChildEnv set, the
// test binary is rdmago with cmds, for startPP; else it runs the tests.
func testMain(m *testing.M, cmds []*command) {
	if os.Getenv(ppChildEnv) == "1" {
		os.Exit(newCommandSet(cmds).run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
