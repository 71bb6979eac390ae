package rdmaserver

// The device tests of "rdmago server" and "rdmago client": on the
// soft-RoCE VM, each against librdmacm's rdma_server and rdma_client
// examples and against each other, on 10.0.2.15, each process a child
// with a timeout. rdmago's -v shows the 16 bytes it received, which must
// be the zeros the C programs (and rdmago) send, overwriting what the
// buffer held.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	rsCServer = "/usr/bin/rdma_server"
	rsCClient = "/usr/bin/rdma_client"
	// rsZeros is -v's line for the message the peer sends.
	rsZeros = ": received 16 bytes: 00000000000000000000000000000000"
)

type rsSide struct {
	argv   func(args ...string) []string
	goSide bool
}

var (
	rsGoServer = rsSide{func(a ...string) []string { return append([]string{"rdmago", "server", "-v"}, a...) }, true}
	rsGoClient = rsSide{func(a ...string) []string { return append([]string{"rdmago", "client", "-v"}, a...) }, true}
	rsCSrv     = rsSide{func(a ...string) []string { return append([]string{rsCServer}, a...) }, false}
	rsCCli     = rsSide{func(a ...string) []string { return append([]string{rsCClient}, a...) }, false}
)

// rsWant is what a side prints in a good run.
func rsWant(name string, goSide bool) []string {
	w := []string{name + ": start"}
	if goSide {
		w = append(w, name+rsZeros)
	}
	return append(w, name+": end 0")
}

func runServerClient(t *testing.T, server, client rsSide) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, rsCServer)
	tooltest.RequireCTool(t, rsCClient)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	port := tooltest.FreePort(t)
	args := []string{"-s", tooltest.VMAddr, "-p", strconv.Itoa(port)}
	srv := tooltest.Start(t, ctx, "server", server.argv(args...))
	defer func() {
		cancel()
		srv.Wait()
	}()
	tooltest.WaitCMListening(t, srv, port)
	cli := tooltest.Start(t, ctx, "client", client.argv(args...))
	cliStatus, srvStatus := cli.Wait(), srv.Wait()
	if ctx.Err() != nil || srvStatus != 0 || cliStatus != 0 {
		t.Fatalf("exit statuses: server %d, client %d; want 0 and 0 (timeout %v: %v)\nserver:\n%s%s\nclient:\n%s%s",
			srvStatus, cliStatus, tooltest.CMTimeout, ctx.Err(), srv.Stdout.String(), srv.Stderr.String(), cli.Stdout.String(), cli.Stderr.String())
	}
	for _, s := range []struct {
		p      *tooltest.Proc
		name   string
		goSide bool
	}{{srv, "rdma_server", server.goSide}, {cli, "rdma_client", client.goSide}} {
		if got, want := tooltest.Lines(s.p.Stdout.String()), rsWant(s.name, s.goSide); !slices.Equal(got, want) {
			t.Errorf("%s stdout %q, want %q", s.p.Label, got, want)
		}
		if s.p.Stderr.Len() != 0 {
			t.Errorf("%s stderr %q", s.p.Label, s.p.Stderr.String())
		}
	}
}

func TestDeviceServerClient(t *testing.T) {
	t.Run("GoServerCClient", func(t *testing.T) { runServerClient(t, rsGoServer, rsCCli) })
	t.Run("CServerGoClient", func(t *testing.T) { runServerClient(t, rsCSrv, rsGoClient) })
	t.Run("GoGo", func(t *testing.T) { runServerClient(t, rsGoServer, rsGoClient) })
}

// TestDeviceServerClientFailures runs rdmago and the C program where both
// must fail alone, and compares their statuses and output (with the
// program's name, which the C programs print as their argv[0]).
func TestDeviceServerClientFailures(t *testing.T) {
	testenv.RequireDevice(t)
	port := strconv.Itoa(tooltest.FreePort(t)) // nothing listens there
	for _, tc := range []struct {
		server bool
		args   []string
	}{
		{false, []string{"-s", tooltest.VMAddr, "-p", port}},    // rejected: rdma_connect: Connection refused
		{false, []string{"-s", tooltest.VMAddr, "-p", "99999"}}, // glibc's port 34463, where nothing listens either
		{false, []string{"-s", tooltest.VMAddr, "-p", "no-such-service"}},
		{true, []string{"-s", "10.0.3.99", "-p", port}}, // not a local address: rdma_create_ep fails
		{false, []string{"-x"}},
		{true, []string{"-h"}},
		{true, []string{"-p"}},
	} {
		compareRsFailure(t, tc.server, tc.args)
	}
}

func compareRsFailure(t *testing.T, server bool, args []string) {
	t.Helper()
	cTool, argv0 := rsCClient, "rdmago client"
	if server {
		cTool, argv0 = rsCServer, "rdmago server"
	}
	tooltest.RequireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	want := tooltest.Start(t, ctx, "C", append([]string{cTool}, args...))
	wantStatus := want.Wait()
	got := tooltest.Start(t, ctx, "rdmago", append(strings.Fields(argv0), args...))
	gotStatus := got.Wait()
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "\t[-v]\t(rdmago only: print the message received)\n", "")
		return strings.ReplaceAll(s, argv0, cTool)
	}
	t.Logf("%s %q: status %d, stdout %q, stderr %q", cTool, args, wantStatus, want.Stdout.String(), want.Stderr.String())
	if wantStatus == 0 || gotStatus != wantStatus || norm(got.Stdout.String()) != want.Stdout.String() || norm(got.Stderr.String()) != want.Stderr.String() {
		t.Errorf("%s %q: status %d, stdout %q, stderr %q; %s: status %d, stdout %q, stderr %q",
			argv0, args, gotStatus, got.Stdout.String(), got.Stderr.String(), cTool, wantStatus, want.Stdout.String(), want.Stderr.String())
	}
}

// TestNoDeviceServerClient runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as the C programs do.
func TestNoDeviceServerClient(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareRsFailure(t, true, []string{"-s", tooltest.VMAddr})
	compareRsFailure(t, false, []string{"-s", tooltest.VMAddr})
}
