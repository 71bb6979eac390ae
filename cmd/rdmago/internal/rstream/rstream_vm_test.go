package rstream

// The device tests of "rdmago rstream": on the soft-RoCE VM of hack/vm,
// rdmago runs against librdmacm's rstream in both roles, in rstream's
// blocking, non-blocking and asynchronous modes, with every byte verified
// (-T v) on both sides, and against itself.

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const cTool = "/usr/bin/rstream"

type side func(args ...string) []string

func goSide(args ...string) []string { return append([]string{"rdmago", "rstream"}, args...) }
func cSide(args ...string) []string  { return append([]string{cTool}, args...) }

// runPair runs a server and a client with the options both get, plus
// each side's own, and checks that both report the same transfer.
func runPair(t *testing.T, server, client side, common, srvOpts, cliOpts []string) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	port := tooltest.FreePort(t)
	common = append(common, "-p", strconv.Itoa(port))
	srv := tooltest.Start(t, ctx, "server", server(append(common, srvOpts...)...))
	defer func() {
		cancel()
		srv.Wait()
	}()
	tooltest.WaitCMListening(t, srv, port)
	cli := tooltest.Start(t, ctx, "client", client(append(append(common, "-s", tooltest.VMAddr), cliOpts...)...))
	cliStatus, srvStatus := cli.Wait(), srv.Wait()
	if ctx.Err() != nil || srvStatus != 0 || cliStatus != 0 {
		t.Fatalf("exit statuses: server %d, client %d; want 0 and 0 (timeout %v: %v)\nserver:\n%s%s\nclient:\n%s%s",
			srvStatus, cliStatus, tooltest.CMTimeout, ctx.Err(), srv.Stdout.String(), srv.Stderr.String(), cli.Stdout.String(), cli.Stderr.String())
	}
	s, c := tooltest.Lines(srv.Stdout.String()), tooltest.Lines(cli.Stdout.String())
	if len(s) < 2 || len(c) != len(s) {
		t.Fatalf("server printed %q, client %q", s, c)
	}
	for i := range s {
		// name, bytes, xfers, iters and total agree; the times differ.
		if sf, cf := strings.Fields(s[i]), strings.Fields(c[i]); len(sf) < 5 || len(cf) < 5 || strings.Join(sf[:5], " ") != strings.Join(cf[:5], " ") {
			t.Errorf("line %d: server %q, client %q", i, s[i], c[i])
		}
	}
	t.Logf("server:\n%s\nclient:\n%s", srv.Stdout.String(), cli.Stdout.String())
}

// The transfers of the matrix: small enough to go inline, a page, and
// larger than either side's buffer.
var sizes = []struct {
	size, count int
}{{64, 1000}, {4096, 500}, {1 << 20, 20}}

// The modes of the C program: its default (non-blocking calls, spinning),
// blocking calls, and poll (rpoll).
var cModes = [][]string{nil, {"-T", "b"}, {"-T", "a"}}

func cModeName(m []string) string {
	if m == nil {
		return "nonblocking"
	}
	return map[string]string{"b": "blocking", "a": "async"}[m[1]]
}

func TestDeviceRstreamInterop(t *testing.T) {
	for _, sz := range sizes {
		for _, mode := range cModes {
			common := []string{"-S", strconv.Itoa(sz.size), "-C", strconv.Itoa(sz.count), "-T", "v"}
			name := strconv.Itoa(sz.size) + "/" + cModeName(mode)
			t.Run("GoServerCClient/"+name, func(t *testing.T) { runPair(t, goSide, cSide, common, nil, mode) })
			t.Run("CServerGoClient/"+name, func(t *testing.T) { runPair(t, cSide, goSide, common, mode, nil) })
		}
	}
}

func TestDeviceRstreamGoGo(t *testing.T) {
	for _, sz := range sizes {
		common := []string{"-S", strconv.Itoa(sz.size), "-C", strconv.Itoa(sz.count), "-T", "v"}
		t.Run(strconv.Itoa(sz.size), func(t *testing.T) { runPair(t, goSide, goSide, common, nil, nil) })
	}
	// Latency shape: one transfer each way, many times.
	t.Run("iterations", func(t *testing.T) {
		runPair(t, goSide, cSide, []string{"-S", "64", "-I", "2000", "-C", "1", "-T", "v"}, nil, nil)
	})
}
