package main

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
	requireCTool(t, rsCServer)
	requireCTool(t, rsCClient)
	ctx, cancel := context.WithTimeout(context.Background(), rpTimeout)
	defer cancel()
	port := freePort(t)
	args := []string{"-s", rpVMAddr, "-p", strconv.Itoa(port)}
	srv := startPP(t, ctx, "server", server.argv(args...))
	defer func() {
		cancel()
		srv.wait()
	}()
	waitCMListening(t, srv, port)
	cli := startPP(t, ctx, "client", client.argv(args...))
	cliStatus, srvStatus := cli.wait(), srv.wait()
	if ctx.Err() != nil || srvStatus != 0 || cliStatus != 0 {
		t.Fatalf("exit statuses: server %d, client %d; want 0 and 0 (timeout %v: %v)\nserver:\n%s%s\nclient:\n%s%s",
			srvStatus, cliStatus, rpTimeout, ctx.Err(), srv.stdout.String(), srv.stderr.String(), cli.stdout.String(), cli.stderr.String())
	}
	for _, s := range []struct {
		p      *ppProc
		name   string
		goSide bool
	}{{srv, "rdma_server", server.goSide}, {cli, "rdma_client", client.goSide}} {
		if got, want := lines(s.p.stdout.String()), rsWant(s.name, s.goSide); !slices.Equal(got, want) {
			t.Errorf("%s stdout %q, want %q", s.p.label, got, want)
		}
		if s.p.stderr.Len() != 0 {
			t.Errorf("%s stderr %q", s.p.label, s.p.stderr.String())
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
	port := strconv.Itoa(freePort(t)) // nothing listens there
	for _, tc := range []struct {
		server bool
		args   []string
	}{
		{false, []string{"-s", rpVMAddr, "-p", port}},    // rejected: rdma_connect: Connection refused
		{false, []string{"-s", rpVMAddr, "-p", "99999"}}, // glibc's port 34463, where nothing listens either
		{false, []string{"-s", rpVMAddr, "-p", "no-such-service"}},
		{true, []string{"-s", "10.0.3.99", "-p", port}}, // not a local address: rdma_create_ep fails
		{false, []string{"-x"}},
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
	requireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), rpTimeout)
	defer cancel()
	want := startPP(t, ctx, "C", append([]string{cTool}, args...))
	wantStatus := want.wait()
	got := startPP(t, ctx, "rdmago", append(strings.Fields(argv0), args...))
	gotStatus := got.wait()
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "\t[-v]\t(rdmago only: print the message received)\n", "")
		return strings.ReplaceAll(s, argv0, cTool)
	}
	t.Logf("%s %q: status %d, stdout %q, stderr %q", cTool, args, wantStatus, want.stdout.String(), want.stderr.String())
	if wantStatus == 0 || gotStatus != wantStatus || norm(got.stdout.String()) != want.stdout.String() || norm(got.stderr.String()) != want.stderr.String() {
		t.Errorf("%s %q: status %d, stdout %q, stderr %q; %s: status %d, stdout %q, stderr %q",
			argv0, args, gotStatus, got.stdout.String(), got.stderr.String(), cTool, wantStatus, want.stdout.String(), want.stderr.String())
	}
}

// TestNoDeviceServerClient runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as the C programs do.
func TestNoDeviceServerClient(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareRsFailure(t, true, []string{"-s", rpVMAddr})
	compareRsFailure(t, false, []string{"-s", rpVMAddr})
}
