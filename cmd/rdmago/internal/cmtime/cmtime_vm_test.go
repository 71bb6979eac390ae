package cmtime

// The device tests of "rdmago cmtime": on the soft-RoCE VM, against
// rdma-core's cmtime and against itself, on 10.0.2.15 and cmtime's port
// 7471 (so one run at a time), each process a child with a timeout. The
// server runs until it is killed, as cmtime's does: a run starts it,
// runs the client to its end, checks that the server tore every
// connection down, and then kills it. The client's lines are checked,
// its timings for their format; where both must fail the same way
// alone, rdmago's output and status are the C program's, timings aside.
// The C program is run as /usr/bin/cmtime, its argv[0]: in its output
// that name is read as "cmtime", rdmago's.

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	cTool = "/usr/bin/cmtime"
	port  = 7471
)

var (
	goSide = tooltest.CMSide{Name: "rdmago", Tool: "cmtime"}
	cSide  = tooltest.CMSide{Name: "C", Tool: "cmtime", Path: cTool}
)

// clientOK is what a good client run prints, timings as N (see norm):
// with -b, the bind step too.
func clientOK(bind bool) []string {
	l := []string{"creating id"}
	if bind {
		l = append(l, "binding source address")
	}
	l = append(l, "resolving address", "resolving route", "creating qp", "connecting", "disconnecting", "destroying id",
		"step              total ms     max ms     min us  us / conn")
	for i, s := range stepNames {
		if i == stepBind && !bind {
			continue
		}
		l = append(l, fmt.Sprintf("%-13s: N N N N", s))
	}
	return l
}

// timing is one figure of the table, "%11.2f"; norm writes each as N.
// With no connections the last column divides a step's time by 0: "inf"
// when the clock moved during the step, "-nan" when it did not, which
// either program can meet (rdmago's "create qp" once read 0 ns where
// cmtime's read 0.02 ms).
var timing = regexp.MustCompile(` *(?:-?[0-9]+\.[0-9][0-9]|-?(?:inf|nan)\b)`)

func norm(s string) string { return timing.ReplaceAllString(s, " N") }

// serve starts a server with args, waits until it listens on p, runs
// client with cliArgs to its end, waits until the server has destroyed
// every connection, and kills the server. It returns the client's
// process and status, and the server's process.
func serve(t *testing.T, p int, server, client tooltest.CMSide, srvArgs, cliArgs []string) (*tooltest.Proc, int, *tooltest.Proc) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), 3*tooltest.CMTimeout)
	defer cancel()
	srv := tooltest.Start(t, ctx, server.Name+" server", server.Argv(srvArgs...))
	defer func() {
		srv.Signal(os.Interrupt)
		srv.Wait()
	}()
	tooltest.WaitCMListening(t, srv, p)
	cli := tooltest.Start(t, ctx, client.Name+" client", client.Argv(cliArgs...))
	st := cli.Wait()
	tooltest.LogOnFailure(t, cli, st)
	tooltest.LogOnFailure(t, srv, -2)
	// The server disconnects and destroys each connection once the
	// client's DREQ comes, off its event loop: only the listener stays.
	deadline := time.Now().Add(tooltest.CMTimeout)
	for n := tooltest.CMIDs(p); n != 1; n = tooltest.CMIDs(p) {
		if time.Now().After(deadline) {
			t.Errorf("%s server: %d rdma_cm IDs on port %d a while after the client ended, want the listener only", server.Name, n, p)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Errorf("timeout: %v", ctx.Err())
	}
	return cli, st, srv
}

// checkClient: a client exits 0 and prints want (timings as N), and
// nothing on stderr.
func checkClient(t *testing.T, cli *tooltest.Proc, st int, want []string) {
	t.Helper()
	got := tooltest.Lines(norm(cli.Stdout.String()))
	stderr := cli.Stderr.String()
	if !cli.Ours() {
		// cmtime's own exit race (see eventThreadRace), in CI once in
		// a C client that had done all its work.
		stderr = strings.ReplaceAll(stderr, eventThreadRace, "")
	}
	if st != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") || stderr != "" {
		t.Errorf("%s: status %d, stdout (timings as N):\n%s\nstderr %q; want status 0, stdout:\n%s",
			cli.Label, st, strings.Join(got, "\n"), cli.Stderr.String(), strings.Join(want, "\n"))
	}
}

// checkServer: a server prints nothing while it serves.
func checkServer(t *testing.T, srv *tooltest.Proc) {
	t.Helper()
	if srv.Stdout.Len() != 0 || srv.Stderr.Len() != 0 {
		t.Errorf("%s: stdout %q, stderr %q; want nothing", srv.Label, srv.Stdout.String(), srv.Stderr.String())
	}
}

func TestDeviceCmtime(t *testing.T) {
	a := tooltest.VMAddr
	pairs := []struct {
		name           string
		server, client tooltest.CMSide
	}{{"GoServerCClient", goSide, cSide}, {"CServerGoClient", cSide, goSide}, {"GoGo", goSide, goSide}}
	for _, c := range []struct {
		name    string
		cliArgs []string
		bind    bool
	}{
		{"10", []string{"-c", "10"}, false},
		{"100", []string{"-c100"}, false},
		// The bind step, and other retries and timeouts.
		{"Bind", []string{"-c", "5", "-b", a, "-r", "1", "-t", "3000"}, true},
	} {
		for _, p := range pairs {
			t.Run(p.name+c.name, func(t *testing.T) {
				cli, st, srv := serve(t, port, p.server, p.client, []string{"-b", a}, append([]string{"-s", a}, c.cliArgs...))
				checkClient(t, cli, st, clientOK(c.bind))
				checkServer(t, srv)
			})
		}
	}
}

// TestDeviceCmtimeServerHoldsConnections: rdmago's server, its garbage
// collector running all the time (GOGC=1), keeps every connection until
// the client disconnects it. A server that held its accepted IDs only
// through package cm, which holds them weakly, lost them to the collector
// mid-run; C's client then saw connections end before it had disconnected
// them, and timed those disconnects as negative (its "min us").
var figure = regexp.MustCompile(`-?[0-9]+\.[0-9]+`)

func TestDeviceCmtimeServerHoldsConnections(t *testing.T) {
	t.Setenv("GOGC", "1")
	a := tooltest.VMAddr
	cli, st, srv := serve(t, port, goSide, cSide, []string{"-b", a}, []string{"-s", a, "-c", "100"})
	checkClient(t, cli, st, clientOK(false))
	checkServer(t, srv)
	for _, line := range tooltest.Lines(cli.Stdout.String()) {
		name, figures, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != stepNames[stepDisconnect] {
			continue
		}
		// "%11.2f" each: a wide negative figure runs into the one before.
		f := figure.FindAllString(figures, -1)
		if len(f) != 4 {
			t.Fatalf("disconnect row %q: want 4 figures", line)
		}
		if strings.HasPrefix(f[2], "-") {
			t.Errorf("disconnect row %q: a connection ended before the client disconnected it (min us negative)", line)
		}
		return
	}
	t.Errorf("no disconnect row in the client's output:\n%s", cli.Stdout.String())
}

// TestDeviceCmtimePort: -p, another port than cmtime's 7471, on both
// sides; and a server bound to no address in particular.
func TestDeviceCmtimePort(t *testing.T) {
	const other = 7473
	for _, p := range [][2]tooltest.CMSide{{goSide, cSide}, {cSide, goSide}} {
		cli, st, srv := serve(t, other, p[0], p[1], []string{"-p", "7473"}, []string{"-s", tooltest.VMAddr, "-p", "7473", "-c", "3"})
		checkClient(t, cli, st, clientOK(false))
		checkServer(t, srv)
	}
}

// compareAlone runs cmtime and rdmago's with args, each alone, and
// compares their statuses and output, timings aside.
func compareAlone(t *testing.T, args []string, wantFail bool) {
	t.Helper()
	tooltest.RequireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	want := tooltest.Start(t, ctx, "C", cSide.Argv(args...))
	wantStatus := want.Wait()
	got := tooltest.Start(t, ctx, "rdmago", goSide.Argv(args...))
	gotStatus := got.Wait()
	n := func(s string) string { return norm(strings.ReplaceAll(s, cTool, "cmtime")) }
	// cmtime's client closes its event channel while its event thread
	// may be on its way to read it: the thread then fails, and says so,
	// in some runs and not others. rdmago stops its reader first.
	cStderr := strings.ReplaceAll(want.Stderr.String(), eventThreadRace, "")
	t.Logf("cmtime %q: status %d, stdout %q, stderr %q", args, wantStatus, want.Stdout.String(), want.Stderr.String())
	if ctx.Err() != nil || (wantFail && wantStatus == 0) || gotStatus != wantStatus ||
		n(got.Stdout.String()) != n(want.Stdout.String()) || got.Stderr.String() != n(cStderr) {
		t.Errorf("rdmago cmtime %q: status %d, stdout %q, stderr %q; cmtime: status %d, stdout %q, stderr %q (%v)",
			args, gotStatus, got.Stdout.String(), got.Stderr.String(), wantStatus, want.Stdout.String(), want.Stderr.String(), ctx.Err())
	}
}

// eventThreadRace is what cmtime's event thread prints when it reads the
// channel the client closed.
const eventThreadRace = "failure in rdma_get_cm_event in process_server_events: Bad file descriptor\n"

// TestDeviceCmtimeAlone: where cmtime's client fails alone (nobody
// listens, a bad address or port, bad options) or has nothing to do (no
// connections, or a negative number), rdmago prints and exits as it does.
func TestDeviceCmtimeAlone(t *testing.T) {
	testenv.RequireDevice(t)
	a := tooltest.VMAddr
	for _, c := range []struct {
		args     []string
		wantFail bool
	}{
		{[]string{"-s", a, "-c", "2"}, false}, // nobody listens: two REJECTED, status 0
		{[]string{"-s", a, "-c", "2", "-b", "10.0.3.99"}, true},
		{[]string{"-s", a, "-p", "nosuchport", "-c", "2"}, true},
		{[]string{"-s", "nosuchhost", "-c", "2"}, true}, // no name server in the VM: EAI_AGAIN
		{[]string{"-s", a, "-c", "0"}, false},
		{[]string{"-s", a, "-c", "-1"}, false},
		{[]string{"-x"}, true},
		{[]string{"-h"}, true},
		{[]string{"--foo"}, true},
		{[]string{"-s"}, true},
		{[]string{"-c", "1", "-r"}, true},
	} {
		compareAlone(t, c.args, c.wantFail)
	}
}

// TestDeviceCmtimeServerFails: a server that cannot bind or find its
// port says why as cmtime does; cmtime then crashes in its cleanup (it
// walks the client's nodes, which a server has not), losing what it had
// buffered for stdout, where rdmago exits with the status cmtime
// returns: -1 for a failed call, getaddrinfo's code (EAI_SERVICE, -8)
// for a bad port.
func TestDeviceCmtimeServerFails(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	for _, c := range []struct {
		args   []string
		status int
		stdout string
	}{
		{[]string{"-b", "10.0.3.99"}, 255, ""},
		{[]string{"-b", tooltest.VMAddr, "-p", "nosuchport"}, 248, "getrdmaaddr error: Servname not supported for ai_socktype\n"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
		cp := tooltest.Start(t, ctx, "C", cSide.Argv(c.args...))
		cStatus := cp.Wait()
		gp := tooltest.Start(t, ctx, "rdmago", goSide.Argv(c.args...))
		gStatus := gp.Wait()
		cancel()
		t.Logf("cmtime %q: status %d, stdout %q, stderr %q", c.args, cStatus, cp.Stdout.String(), cp.Stderr.String())
		if cStatus != -1 {
			t.Errorf("cmtime %q: status %d, want a crash", c.args, cStatus)
		}
		if gStatus != c.status || gp.Stdout.String() != c.stdout || gp.Stderr.String() != cp.Stderr.String() {
			t.Errorf("rdmago cmtime %q: status %d, stdout %q, stderr %q; want %d, %q, stderr %q",
				c.args, gStatus, gp.Stdout.String(), gp.Stderr.String(), c.status, c.stdout, cp.Stderr.String())
		}
	}
}

// TestNoDeviceCmtime runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as cmtime does.
func TestNoDeviceCmtime(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareAlone(t, []string{"-s", tooltest.VMAddr}, true)
	compareAlone(t, []string{"-b", tooltest.VMAddr}, true)
}
