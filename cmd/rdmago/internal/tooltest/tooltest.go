// Package tooltest holds what the tests of rdmago's tools share: running a
// tool's commands in process, the test binary as rdmago in a child process
// (Main, Start), and the fixtures of the device tests that run a Go tool
// and a C tool side by side.
package tooltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/internal/perftable"
	"github.com/rdmago/rdma/internal/testenv"
)

// ChildEnv, when set, makes the test binary run rdmago with its
// arguments instead of the tests.
const ChildEnv = "RDMAGO_TEST_RUN_RDMAGO"

// RunTimeout bounds each process of a run: under TCG a 50-iteration
// exchange takes well under a second, the start of a process a few.
const RunTimeout = 90 * time.Second

// Proc is one side of a run.
type Proc struct {
	Label          string
	goSide         bool // the test binary as rdmago
	cmd            *exec.Cmd
	Stdout, Stderr bytes.Buffer
	done           chan struct{}
	err            error
}

// Ours reports whether the process is rdmago's tool (the test binary
// run as rdmago), not a C program.
func (p *Proc) Ours() bool { return p.goSide }

// LogOnFailure logs what a process printed once the test has ended, and
// only if it failed: a passing run's output would bury a failing one's in
// the log (the tools print pages each), and CI shows only an excerpt.
func LogOnFailure(t *testing.T, p *Proc, status int) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (status %d):\n%s%s", p.Label, status, p.Stdout.String(), p.Stderr.String())
		}
	})
}

// Start starts argv (rdmago when argv[0] is "rdmago": the test binary,
// which Main makes rdmago) with ctx's timeout.
func Start(t *testing.T, ctx context.Context, label string, argv []string) *Proc {
	t.Helper()
	p := &Proc{Label: label, goSide: argv[0] == "rdmago", done: make(chan struct{})}
	if p.goSide {
		p.cmd = exec.CommandContext(ctx, os.Args[0], argv[1:]...)
		// Every goroutine in the dump a Watchdog asks for.
		p.cmd.Env = append(os.Environ(), ChildEnv+"=1", "GOTRACEBACK=all")
	} else {
		p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.Stdout, &p.Stderr
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

// Signal sends sig to the process, for tools that run until interrupted.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// WaitFor waits up to d for the process; exited is false if it still runs.
func (p *Proc) WaitFor(d time.Duration) (status int, exited bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Wait(), true
	case <-t.C:
		return 0, false
	}
}

// Wait waits for the process and returns its exit status (-1 if killed).
func (p *Proc) Wait() int {
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

// Watchdog ends a run that hangs, after recording what a reader of the
// failure needs: the kernel's rdma_cm IDs and QPs as rdma(8) shows them,
// the goroutines of each rdmago process, which SIGQUIT makes the Go
// runtime print on its stderr (logged with the rest by LogOnFailure), and
// where each C process's threads wait in the kernel. Only then does it
// cancel the processes' context.
type Watchdog struct {
	t      *testing.T
	cancel context.CancelFunc
	timer  *time.Timer
	done   chan struct{}

	mu      sync.Mutex
	procs   []*Proc
	fired   bool // fire ran, or runs
	stopped bool // Stop was called first: fire does nothing
}

// NewWatchdog starts a Watchdog that fires after d, cancelling with cancel.
func NewWatchdog(t *testing.T, d time.Duration, cancel context.CancelFunc) *Watchdog {
	w := &Watchdog{t: t, cancel: cancel, done: make(chan struct{})}
	w.timer = time.AfterFunc(d, w.fire)
	return w
}

// Watch adds p to the processes w dumps.
func (w *Watchdog) Watch(p *Proc) {
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
}

// Stop stops w, or waits for it to finish firing, and reports whether it
// fired. It may be called more than once.
func (w *Watchdog) Stop() bool {
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	fired := w.fired
	w.mu.Unlock()
	if fired {
		<-w.done
	}
	return fired
}

// hangDumpWait bounds the wait for a process's goroutine dump.
const hangDumpWait = 5 * time.Second

func (w *Watchdog) fire() {
	defer close(w.done)
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.fired = true
	procs := w.procs
	w.mu.Unlock()
	defer w.cancel()
	for _, what := range []string{"cm_id", "qp"} {
		out, err := exec.Command("/usr/bin/rdma", "res", "show", what).CombinedOutput()
		w.t.Logf("hung: rdma res show %s (%v):\n%s", what, err, out)
	}
	for _, p := range procs {
		if p.goSide {
			p.Signal(syscall.SIGQUIT)
		} else {
			w.t.Logf("hung: %s: %s", p.Label, kernelState(p.cmd.Process.Pid))
		}
	}
	deadline := time.After(hangDumpWait)
	for _, p := range procs {
		if !p.goSide {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
			return
		}
	}
}

// kernelState describes where each thread of a C process waits: its
// state, wait channel, run time and kernel stack from /proc (the stack
// where the kernel shows it). A C program cannot be asked for its own
// stacks the way SIGQUIT asks a Go one; this tells an event wait from a
// busy poll or a wait in the kernel's teardown.
func kernelState(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, tid := range tids {
		read := func(name string) string {
			data, err := os.ReadFile(dir + "/" + tid.Name() + "/" + name)
			if err != nil {
				return "(" + err.Error() + ")"
			}
			return strings.TrimSpace(string(data))
		}
		stat := read("stat")
		// Field 3, the state, follows the command's closing parenthesis.
		if i := strings.LastIndexByte(stat, ')'); i >= 0 && i+3 < len(stat) {
			stat = stat[i+2 : i+3]
		}
		fmt.Fprintf(&b, "\n  thread %s: state %s, wchan %s, schedstat %s", tid.Name(), stat, read("wchan"), read("schedstat"))
		if stack := read("stack"); stack != "" {
			b.WriteString("\n    " + strings.ReplaceAll(stack, "\n", "\n    "))
		}
	}
	return b.String()
}

// LineBuffered runs a C tool with its stdout line-buffered (coreutils'
// stdbuf, where the VM has it), so that what it printed before a
// watchdog killed it is not lost in its stdio buffer.
func LineBuffered(argv []string) []string {
	const stdbuf = "/usr/bin/stdbuf"
	if _, err := os.Stat(stdbuf); err != nil {
		return argv
	}
	return append([]string{stdbuf, "-oL"}, argv...)
}

// FreePort returns a TCP port nothing listens on.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitListening waits until the server listens on port, or exits.
func WaitListening(t *testing.T, srv *Proc, port int) {
	t.Helper()
	waitUntil(t, srv, port, perftable.Listening, 20*time.Millisecond, RunTimeout)
}

// waitUntil polls listening every poll until it reports port, and fails
// the test when srv exits first or timeout passes.
func waitUntil(t *testing.T, srv *Proc, port int, listening func(port int) bool, poll, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !listening(port) {
		select {
		case <-srv.done:
			t.Fatalf("%s exited (%v) before listening on port %d:\n%s%s", srv.Label, srv.err, port, srv.Stdout.String(), srv.Stderr.String())
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on port %d after %v", srv.Label, port, timeout)
		}
	}
}

// RequireCTool fails the test when the C tool at path is missing in the VM,
// and skips it outside.
func RequireCTool(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if testenv.InVM() {
			t.Fatalf("rdma-core's %s is missing (install ibverbs-utils): %v", path, err)
		}
		t.Skipf("no %s: %v", path, err)
	}
}

const (
	// VMAddr is the VM's address, where the rdma_cm tools listen.
	VMAddr = "10.0.2.15"
	// CMTimeout bounds each process of an rdma_cm run.
	CMTimeout = 90 * time.Second
)

// CMListening reports whether an rdma_cm ID listens on port.
func CMListening(port int) bool { return perftable.CMListening(port) }

// CMIDs counts the rdma_cm IDs on local port port: a listener and the
// connections it accepted.
func CMIDs(port int) int {
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), ":"+strconv.Itoa(port)+" ")
}

// WaitCMListening waits until the server listens on port through
// rdma_cm, or exits.
func WaitCMListening(t *testing.T, srv *Proc, port int) {
	t.Helper()
	waitUntil(t, srv, port, CMListening, 50*time.Millisecond, CMTimeout)
}

// Lines splits s into its lines, without the last newline.
func Lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// RoCEGID is ::ffff:10.0.2.15, the VM's RoCE v2 GID.
var RoCEGID = [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 2, 15: 15}

// FuzzPeer is a connection whose peer's bytes are the fuzzer's; what
// rdmago writes is thrown away.
type FuzzPeer struct{ R io.Reader }

func (p FuzzPeer) Read(b []byte) (int, error) { return p.R.Read(b) }

func (p FuzzPeer) Write(b []byte) (int, error) { return len(b), nil }

// DecodedFixed checks how a fixed-size wire message of size bytes decoded
// from the fuzzer's msg: a shorter one must fail, any other must not. It
// returns whether the message is whole, for the caller's further checks.
func DecodedFixed(t *testing.T, msg []byte, size int, err error) bool {
	t.Helper()
	if len(msg) < size {
		if err == nil {
			t.Fatalf("a %d-byte message decoded", len(msg))
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// Run runs the command line args among cmds (and help), in
// process, as rdmago would.
func Run(cmds []*command.Command, args ...string) (stdout, stderr string, status int) {
	var o, e bytes.Buffer
	status = command.NewSet(cmds).Run(args, &o, &e)
	return o.String(), e.String(), status
}

// Main is the TestMain of a tool's tests: with ChildEnv set, the
// test binary is rdmago with cmds, for Start; else it runs the tests.
func Main(m *testing.M, cmds []*command.Command) {
	if os.Getenv(ChildEnv) == "1" {
		os.Exit(command.NewSet(cmds).Run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
