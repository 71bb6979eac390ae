package rdmaserver

// The device tests of "rdmago xserver" and "rdmago xclient": on the
// soft-RoCE VM, each against librdmacm's rdma_xserver and rdma_xclient
// and against each other over RC (-c r), and, since rxe has no XRC, both
// programs' failures with -c x compared line for line, as are their
// failures alone and their answers to bad options. The C programs print
// their argv[0]: they run by name, as rdma_xserver and rdma_xclient.

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
)

const (
	xCServer = "rdma_xserver"
	xCClient = "rdma_xclient"
)

var (
	xGoServer = rsSide{func(a ...string) []string { return append([]string{"rdmago", "xserver", "-v"}, a...) }, true}
	xGoClient = rsSide{func(a ...string) []string { return append([]string{"rdmago", "xclient"}, a...) }, true}
	xCSrv     = rsSide{func(a ...string) []string { return append([]string{xCServer}, a...) }, false}
	xCCli     = rsSide{func(a ...string) []string { return append([]string{xCClient}, a...) }, false}
)

func requireXTools(t *testing.T) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, "/usr/bin/"+xCServer)
	tooltest.RequireCTool(t, "/usr/bin/"+xCClient)
}

func runXServerClient(t *testing.T, server, client rsSide, cType string) {
	t.Helper()
	requireXTools(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A hang is recorded before the processes are killed: the C side's
	// threads' kernel stacks, and (line-buffered) what it printed so far.
	wd := tooltest.NewWatchdog(t, tooltest.CMTimeout, cancel)
	defer wd.Stop()
	argv := func(s rsSide, a ...string) []string {
		if s.goSide {
			return s.argv(a...)
		}
		return tooltest.LineBuffered(s.argv(a...))
	}
	n := tooltest.FreePort(t)
	port := strconv.Itoa(n)
	srv := tooltest.Start(t, ctx, "server", argv(server, "-p", port, "-c", cType))
	wd.Watch(srv)
	defer func() {
		cancel()
		srv.Wait()
	}()
	tooltest.WaitCMListening(t, srv, n)
	cli := tooltest.Start(t, ctx, "client", argv(client, "-s", tooltest.VMAddr, "-p", port, "-c", cType))
	wd.Watch(cli)
	cliStatus, srvStatus := cli.Wait(), srv.Wait()
	if hung := wd.Stop(); hung || srvStatus != 0 || cliStatus != 0 {
		t.Fatalf("exit statuses: server %d, client %d; want 0 and 0 (timed out after %v: %v)\nserver:\n%s%s\nclient:\n%s%s",
			srvStatus, cliStatus, tooltest.CMTimeout, hung, srv.Stdout.String(), srv.Stderr.String(), cli.Stdout.String(), cli.Stderr.String())
	}
	wantSrv := []string{xCServer + ": start", xCServer + ": end 0"}
	if server.goSide {
		// The client's 16 zeros overwrote the 0xa5 the buffer held.
		wantSrv = slices.Insert(wantSrv, 1, xCServer+rsZeros)
	}
	for _, s := range []struct {
		p    *tooltest.Proc
		want []string
	}{{srv, wantSrv}, {cli, []string{xCClient + ": start", xCClient + ": end 0"}}} {
		if got := tooltest.Lines(s.p.Stdout.String()); !slices.Equal(got, s.want) {
			t.Errorf("%s stdout %q, want %q", s.p.Label, got, s.want)
		}
		if s.p.Stderr.Len() != 0 {
			t.Errorf("%s stderr %q", s.p.Label, s.p.Stderr.String())
		}
	}
}

// TestDeviceXServerClient runs RC, which rxe has, both ways and between
// the rdmago programs; "R" is the same type, as the C programs take the
// first letter in either case.
func TestDeviceXServerClient(t *testing.T) {
	t.Run("GoServerCClient", func(t *testing.T) { runXServerClient(t, xGoServer, xCCli, "r") })
	t.Run("CServerGoClient", func(t *testing.T) { runXServerClient(t, xCSrv, xGoClient, "r") })
	t.Run("GoGo", func(t *testing.T) { runXServerClient(t, xGoServer, xGoClient, "R") })
}

// compareX runs the C program and rdmago with args, each alone, and
// compares their statuses and output (rdmago's usage, which names the
// program "rdmago xserver" and adds -v, made the C program's first).
func compareX(t *testing.T, server bool, args []string, wantFail bool) {
	t.Helper()
	cTool, argv0 := xCClient, "rdmago xclient"
	if server {
		cTool, argv0 = xCServer, "rdmago xserver"
	}
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	want := tooltest.Start(t, ctx, "C", append([]string{cTool}, args...))
	wantStatus := want.Wait()
	got := tooltest.Start(t, ctx, "rdmago", append(strings.Fields(argv0), args...))
	gotStatus := got.Wait()
	checkLikeX(t, argv0, cTool, args, got, want, gotStatus, wantStatus, wantFail)
}

func checkLikeX(t *testing.T, argv0, cTool string, args []string, got, want *tooltest.Proc, gotStatus, wantStatus int, wantFail bool) {
	t.Helper()
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "\t[-v]\t(rdmago only: print the message received)\n", "")
		return strings.ReplaceAll(s, argv0, cTool)
	}
	t.Logf("%s %q: status %d, stdout %q, stderr %q", cTool, args, wantStatus, want.Stdout.String(), want.Stderr.String())
	if (wantFail && wantStatus == 0) || gotStatus != wantStatus || norm(got.Stdout.String()) != want.Stdout.String() || norm(got.Stderr.String()) != want.Stderr.String() {
		t.Errorf("%s %q: status %d, stdout %q, stderr %q; %s: status %d, stdout %q, stderr %q",
			argv0, args, gotStatus, got.Stdout.String(), got.Stderr.String(), cTool, wantStatus, want.Stdout.String(), want.Stderr.String())
	}
}

// TestDeviceXServerClientFailures compares rdmago's failures with the C
// programs' where both must fail alone, and their answers to bad options.
func TestDeviceXServerClientFailures(t *testing.T) {
	requireXTools(t)
	port := strconv.Itoa(tooltest.FreePort(t)) // nothing listens there
	for _, tc := range []struct {
		server bool
		args   []string
		fail   bool
	}{
		// rxe has no XRC: rdma_create_ep fails with EOPNOTSUPP.
		{false, []string{"-s", tooltest.VMAddr, "-p", port, "-c", "x"}, true},
		{false, []string{"-s", tooltest.VMAddr, "-p", port, "-c", "Xrc"}, true},
		// Rejected: rdma_connect: Connection refused.
		{false, []string{"-s", tooltest.VMAddr, "-p", port}, true},
		{false, []string{"-s", tooltest.VMAddr, "-p", port, "-c", "r"}, true},
		// rdma_xclient keeps 5 characters of -p: port 12345.
		{false, []string{"-s", tooltest.VMAddr, "-p", "1234567"}, true},
		{false, []string{"-s", tooltest.VMAddr, "-p", "no-such-service"}, true},
		// Bad options and types: the usage, status 1.
		{false, []string{"-x"}, true},
		{true, []string{"-x"}, true},
		{false, []string{"-h"}, true},
		{true, []string{"-h"}, true},
		{true, []string{"-s", tooltest.VMAddr}, true}, // the server has no -s
		{false, []string{"-p"}, true},
		{true, []string{"-p"}, true},
		{false, []string{"-c"}, true},
		{true, []string{"-c", "q"}, true},
		{false, []string{"-c", ""}, true},
		{false, []string{"-c", "q", "-x"}, true}, // getopt's loop ends at the bad type
		{true, []string{"-x", "-c", "q"}, true},
	} {
		compareX(t, tc.server, tc.args, tc.fail)
	}
}

// TestDeviceXServerXRC runs both servers with -c x, each sent an XRC
// connection request: a device without XRC fails to make the receive QP
// in rdma_get_request, in both programs alike.
func TestDeviceXServerXRC(t *testing.T) {
	requireXTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	var procs [2]*tooltest.Proc
	var statuses [2]int
	for i, argv := range [][]string{{xCServer}, {"rdmago", "xserver"}} {
		port := tooltest.FreePort(t)
		procs[i] = tooltest.Start(t, ctx, argv[0], append(argv, "-p", strconv.Itoa(port), "-c", "x"))
		tooltest.WaitCMListening(t, procs[i], port)
		xrcRequest(ctx, t, uint16(port))
		statuses[i] = procs[i].Wait()
	}
	if ctx.Err() != nil {
		t.Fatalf("timeout: %v", ctx.Err())
	}
	checkLikeX(t, "rdmago xserver", xCServer, []string{"-c", "x"}, procs[1], procs[0], statuses[1], statuses[0], true)
}

// xrcRequest sends a server on port an XRC connection request, as an
// XRC client's rdma_connect would, from an ID without a QP (rxe cannot
// make the XRC send QP). The server refuses it, or goes away.
func xrcRequest(ctx context.Context, t *testing.T, port uint16) {
	t.Helper()
	id, err := cm.CreateID(nil, nil, cm.PSIB, cm.WithQPType(qp.XRCSend))
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr(tooltest.VMAddr), port)
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, dst, 0); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(ctx, 0); err != nil {
		t.Fatal(err)
	}
	p := cm.DefaultConnParam()
	p.QPNum = 0x123
	if err := id.Connect(ctx, &p); err == nil {
		t.Errorf("the XRC request to port %d was accepted", port)
	} else {
		t.Logf("XRC request to port %d: %v", port, err)
	}
}

// TestNoDeviceXServerClient runs in a VM booted without RDMA devices:
// rdmago must fail as the C programs do.
func TestNoDeviceXServerClient(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareX(t, true, nil, true)
	compareX(t, false, []string{"-s", tooltest.VMAddr}, true)
	compareX(t, false, []string{"-s", tooltest.VMAddr, "-c", "x"}, true)
}
