package rping

// The device tests of "rdmago rping": on the soft-RoCE VM of hack/vm,
// rdmago runs against rdma-core's rping in both roles and against itself,
// over rdma_cm on 10.0.2.15, each process a child with a timeout (see
// TestMain in main_test.go). The client validates every ping (-V)
// and prints it (-v), the server prints what it read: both outputs are
// checked line by line against the data rping sends.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	rpCTool = "/usr/bin/rping"
	rpCount = 10
)

// rpSide builds one side's command line from the options both get.
type rpSide func(args ...string) []string

func rpGo(args ...string) []string { return append([]string{"rdmago", "rping"}, args...) }
func rpC(args ...string) []string  { return append([]string{rpCTool}, args...) }

// rpWant is what each side of a good run prints: the pings, and the
// server's notice that the client went.
func rpWant(size, count int) (server, client []string) {
	for i := 0; i < count; i++ {
		text := rpPingText(int32(i), size)
		server = append(server, "server ping data: "+text)
		client = append(client, "ping data: "+text)
	}
	return server, client
}

// rpServerStderr is the server's stderr after its client disconnected:
// the event, then its loop finding the state DISCONNECTED (10).
var rpServerStderr = []string{"server DISCONNECT EVENT...", "wait for RDMA_READ_ADV state 10"}

// checkRpClient checks a client's output: every ping, validated, and on
// stderr at most the DISCONNECTED event, which may or may not come before
// the program ends (for rping too).
func checkRpClient(t *testing.T, p *tooltest.Proc, size, count int) {
	t.Helper()
	_, want := rpWant(size, count)
	if got := tooltest.Lines(p.Stdout.String()); !slices.Equal(got, want) {
		t.Errorf("%s stdout:\n%s\nwant:\n%s", p.Label, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range tooltest.Lines(p.Stderr.String()) {
		if l != "client DISCONNECT EVENT..." {
			t.Errorf("%s stderr: %q", p.Label, l)
		}
	}
}

func checkRpServer(t *testing.T, p *tooltest.Proc, size, count int) {
	t.Helper()
	want, _ := rpWant(size, count)
	if got := tooltest.Lines(p.Stdout.String()); !slices.Equal(got, want) {
		t.Errorf("%s stdout:\n%s\nwant:\n%s", p.Label, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := tooltest.Lines(p.Stderr.String()); !slices.Equal(got, rpServerStderr) {
		t.Errorf("%s stderr %q, want %q", p.Label, got, rpServerStderr)
	}
}

// runRping runs a server and a client with -S size (0: the default) and
// extra options for both, and checks both.
func runRping(t *testing.T, server, client rpSide, size int, extra ...string) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, rpCTool)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	port := tooltest.FreePort(t)
	common := append([]string{"-a", tooltest.VMAddr, "-p", strconv.Itoa(port)}, extra...)
	if size != 0 {
		common = append(common, "-S", strconv.Itoa(size))
	} else {
		size = rpDefaultSize
	}
	srv := tooltest.Start(t, ctx, "server", server(append([]string{"-s", "-v"}, common...)...))
	defer func() {
		cancel()
		srv.Wait()
	}()
	tooltest.WaitCMListening(t, srv, port)
	cli := tooltest.Start(t, ctx, "client", client(append([]string{"-c", "-C", strconv.Itoa(rpCount), "-V", "-v"}, common...)...))
	cliStatus, srvStatus := cli.Wait(), srv.Wait()
	if ctx.Err() != nil || srvStatus != 0 || cliStatus != 0 {
		t.Fatalf("exit statuses: server %d, client %d; want 0 and 0 (timeout %v: %v)\nserver:\n%s%s\nclient:\n%s%s",
			srvStatus, cliStatus, tooltest.CMTimeout, ctx.Err(), srv.Stdout.String(), srv.Stderr.String(), cli.Stdout.String(), cli.Stderr.String())
	}
	checkRpServer(t, srv, size, rpCount)
	checkRpClient(t, cli, size, rpCount)
}

// The sizes: rping's default, its smallest and largest, and one that
// spans pages.
var rpSizes = []int{0, rpMinSize, 5000, rpBufSize - 1}

func rpSizeName(size int) string {
	if size == 0 {
		return "default"
	}
	return "S" + strconv.Itoa(size)
}

// rdmago serves, rping is the client.
func TestDeviceRpingGoServerCClient(t *testing.T) {
	for _, size := range rpSizes {
		t.Run(rpSizeName(size), func(t *testing.T) { runRping(t, rpGo, rpC, size) })
	}
}

// rping serves, rdmago is the client.
func TestDeviceRpingCServerGoClient(t *testing.T) {
	for _, size := range rpSizes {
		t.Run(rpSizeName(size), func(t *testing.T) { runRping(t, rpC, rpGo, size) })
	}
}

// rdmago on both sides.
func TestDeviceRpingGoGo(t *testing.T) {
	for _, size := range []int{0, rpBufSize - 1} {
		t.Run(rpSizeName(size), func(t *testing.T) { runRping(t, rpGo, rpGo, size) })
	}
}

// -q: each side creates and moves its own QP, with rdma_cm's attributes
// (rdma_init_qp_attr), and the client completes the connection with
// rdma_establish.
func TestDeviceRpingSelfQP(t *testing.T) {
	t.Run("GoServerCClient", func(t *testing.T) { runRping(t, rpGo, rpC, 100, "-q") })
	t.Run("CServerGoClient", func(t *testing.T) { runRping(t, rpC, rpGo, 100, "-q") })
	t.Run("GoGo", func(t *testing.T) { runRping(t, rpGo, rpGo, 0, "-q") })
}

// -P: the server takes connection after connection, each on a goroutine of
// its own; two clients one after the other, then two at once. It never
// ends by itself.
func TestDeviceRpingPersistent(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, rpCTool)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	port := strconv.Itoa(tooltest.FreePort(t))
	srvCtx, stopSrv := context.WithCancel(ctx)
	srv := tooltest.Start(t, srvCtx, "server", rpGo("-s", "-P", "-v", "-a", tooltest.VMAddr, "-p", port))
	defer func() {
		stopSrv()
		srv.Wait()
	}()
	p, _ := strconv.Atoi(port)
	tooltest.WaitCMListening(t, srv, p)
	client := func(label string, side rpSide) *tooltest.Proc {
		return tooltest.Start(t, ctx, label, side("-c", "-C", strconv.Itoa(rpCount), "-V", "-v", "-a", tooltest.VMAddr, "-p", port))
	}
	var clients []*tooltest.Proc
	wait := func(cs ...*tooltest.Proc) {
		for _, c := range cs {
			if st := c.Wait(); st != 0 {
				t.Fatalf("%s: status %d:\n%s%s", c.Label, st, c.Stdout.String(), c.Stderr.String())
			}
			clients = append(clients, c)
		}
	}
	wait(client("C client 1", rpC))
	wait(client("Go client 2", rpGo))
	wait(client("C client 3", rpC), client("Go client 4", rpGo))
	for _, c := range clients {
		checkRpClient(t, c, rpDefaultSize, rpCount)
	}
	// The server has seen all four go, and released their IDs, before it
	// is stopped: only its listener is left. (Its output is not to be
	// read while it runs.)
	deadline := time.Now().Add(10 * time.Second)
	for tooltest.CMIDs(p) > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stopSrv()
	if st := srv.Wait(); st != -1 {
		t.Errorf("the server ended by itself (status %d) before it was stopped", st)
	}
	select {
	case <-ctx.Done():
		t.Fatal("timed out")
	default:
	}
	// Every ping of every client, each once per client (the two last
	// clients' lines interleave).
	srvWant, _ := rpWant(rpDefaultSize, rpCount)
	var want []string
	for range clients {
		want = append(want, srvWant...)
	}
	got := tooltest.Lines(srv.Stdout.String())
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("server stdout (sorted):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	errs := tooltest.Lines(srv.Stderr.String())
	if strings.Count(srv.Stderr.String(), rpServerStderr[0]+"\n") != 4 || strings.Count(srv.Stderr.String(), rpServerStderr[1]+"\n") != 4 || len(errs) != 8 {
		t.Errorf("server stderr %q, want each of %q four times", errs, rpServerStderr)
	}
}

// TestDeviceRpingFailures runs rdmago and rping where both must fail
// alone, and compares their statuses and output (rdmago's usage names it
// "rdmago rping" where rping's says "rping").
func TestDeviceRpingFailures(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, rpCTool)
	port := strconv.Itoa(tooltest.FreePort(t)) // nothing listens there
	for _, args := range [][]string{
		{"-c", "-a", tooltest.VMAddr, "-p", port, "-C", "1"}, // rejected: RDMA_CM_EVENT_REJECTED, error 8
		{"-c", "-a", "10.0.3.99", "-p", port},                // no route: rdma_resolve_addr fails
		{"-s", "-a", "10.0.3.99", "-p", port},                // not a local address: rdma_bind_addr fails
		{},                                                   // neither -s nor -c
		{"-s", "-x"},                                         // an unknown option
		{"-h"},                                               // rping has no -h
		{"-s", "-t", "1"},                                    // known to getopt, not to rping
		{"-c", "-S", "22", "-a", tooltest.VMAddr}, // -S too small, then -a: rping runs anyway ...
		{"-c", "-S", "65536"},                     // too large
		{"-s", "-C", "-3"},                        // a negative count
	} {
		if len(args) > 2 && args[1] == "-S" && args[2] == "22" {
			// ... with a 22-byte buffer, and fails to connect.
			args = append(args, "-p", port)
		}
		compareRpFailure(t, args)
	}
}

func compareRpFailure(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	want := tooltest.Start(t, ctx, "rping", rpC(args...))
	wantStatus := want.Wait()
	got := tooltest.Start(t, ctx, "rdmago", rpGo(args...))
	gotStatus := got.Wait()
	norm := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "rdmago rping ", "rping "), rpOwnUsage, "")
	}
	// rping's threads race: when an rdma_cm event makes it exit, its main
	// thread, woken by the same event, may print its own complaint first;
	// when its main thread fails and closes the event channel, the cm
	// thread may report the closed channel before the process ends.
	// rdmago's goroutines do neither.
	wantErr := want.Stderr.String()
	for _, race := range []string{"wait for CONNECTED state 4\n", "connect error -1\n", "rdma_get_cm_event: Bad file descriptor\n"} {
		wantErr = strings.ReplaceAll(wantErr, race, "")
	}
	t.Logf("rping %q: status %d, stdout %q, stderr %q", args, wantStatus, want.Stdout.String(), want.Stderr.String())
	if wantStatus == 0 || gotStatus != wantStatus || norm(got.Stdout.String()) != want.Stdout.String() || got.Stderr.String() != wantErr {
		t.Errorf("rdmago rping %q: status %d, stdout %q, stderr %q; rping: status %d, stdout %q, stderr %q",
			args, gotStatus, got.Stdout.String(), got.Stderr.String(), wantStatus, want.Stdout.String(), want.Stderr.String())
	}
}

// TestNoDeviceRping runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as rping does.
func TestNoDeviceRping(t *testing.T) {
	testenv.RequireNoDevice(t)
	tooltest.RequireCTool(t, rpCTool)
	for _, args := range [][]string{{"-s"}, {"-c", "-a", tooltest.VMAddr}} {
		compareRpFailure(t, args)
	}
}
