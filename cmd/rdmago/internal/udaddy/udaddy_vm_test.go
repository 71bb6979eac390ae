package udaddy

// The device tests of "rdmago udaddy": on the soft-RoCE VM, against
// rdma-core's udaddy and against itself, on 10.0.2.15 and udaddy's fixed
// port 7174 (so one run at a time), each process a child with a timeout.
// Every line both sides print is checked, and where both must fail the
// same way alone, rdmago's output and status are the C program's. The C
// program is run as /usr/bin/udaddy, its argv[0]: in its output that name
// is read as "udaddy", rdmago's.

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	cTool = "/usr/bin/udaddy"
	port  = 7174
)

var (
	goSide = tooltest.CMSide{Name: "rdmago", Tool: "udaddy"}
	cSide  = tooltest.CMSide{Name: "C", Tool: "udaddy", Path: cTool}
)

var (
	serverOK = []string{"udaddy: starting server", "receiving data transfers", "sending replies",
		"data transfers complete", "test complete", "return status 0"}
	clientOK = []string{"udaddy: starting client", "udaddy: connecting", "initiating data transfers",
		"receiving data transfers", "data transfers complete", "test complete", "return status 0"}
)

// runPair runs a server bound to the VM's address with srvArgs and a
// client of it with cliArgs.
func runPair(t *testing.T, server, client tooltest.CMSide, srvArgs, cliArgs []string) tooltest.CMPair {
	t.Helper()
	return tooltest.RunCMPair(t, port, server, client, append([]string{"-b", tooltest.VMAddr}, srvArgs...),
		append([]string{"-s", tooltest.VMAddr}, cliArgs...))
}

var check = tooltest.CheckProc

func runGood(t *testing.T, server, client tooltest.CMSide, srvArgs, cliArgs []string) {
	r := runPair(t, server, client, srvArgs, cliArgs)
	check(t, r.Srv, r.SrvStatus, 0, serverOK, "")
	check(t, r.Cli, r.CliStatus, 0, clientOK, "")
}

func TestDeviceUdaddy(t *testing.T) {
	for _, c := range []struct {
		name             string
		server, client   tooltest.CMSide
		srvArgs, cliArgs []string
	}{
		{"GoServerCClient", goSide, cSide, nil, nil},
		{"CServerGoClient", cSide, goSide, nil, nil},
		{"GoGo", goSide, goSide, nil, nil},
		// Two connections, other counts and sizes (the server's
		// counts must match the client's: it waits for -C datagrams per
		// connection), and a type of service.
		{"GoServerCClient2", goSide, cSide, []string{"-c", "2", "-C", "3", "-S", "500"}, []string{"-c", "2", "-C", "3", "-S", "500", "-t", "32"}},
		{"CServerGoClient2", cSide, goSide, []string{"-c", "2", "-C", "25", "-S", "1000", "-t", "32"}, []string{"-c2", "-C25", "-S1000"}},
		{"GoGo2", goSide, goSide, []string{"-c", "2", "-S", "1024", "-P", "udp", "-f", "ip"}, []string{"-c", "2", "-S", "1024", "-f", "name"}},
	} {
		t.Run(c.name, func(t *testing.T) { runGood(t, c.server, c.client, c.srvArgs, c.cliArgs) })
	}
}

// TestDeviceUdaddyReject: a server whose messages exceed the path MTU
// refuses the request (udaddy: "failing connection request") and still
// ends well; the client reports the SIDR reply's status as C's does. The
// C pair is the reference for the other two.
func TestDeviceUdaddyReject(t *testing.T) {
	srvArgs := []string{"-S", "2000"}
	ref := runPair(t, cSide, cSide, srvArgs, nil)
	if ref.SrvStatus != 0 || ref.CliStatus == 0 {
		t.Fatalf("C server %d, C client %d: want 0 and a failure", ref.SrvStatus, ref.CliStatus)
	}
	for _, c := range []struct {
		name           string
		server, client tooltest.CMSide
	}{{"GoServerCClient", goSide, cSide}, {"CServerGoClient", cSide, goSide}} {
		t.Run(c.name, func(t *testing.T) {
			tooltest.CheckLike(t, runPair(t, c.server, c.client, srvArgs, nil), ref)
		})
	}
}

// compareAlone runs udaddy and rdmago's with args, each alone, and
// compares their statuses and output.
func compareAlone(t *testing.T, args []string, wantFail bool) {
	t.Helper()
	tooltest.CompareAlone(t, cSide, goSide, args, wantFail)
}

// TestDeviceUdaddyAlone: where udaddy fails alone (no server, a bad
// address, port space or size, bad options) or has nothing to do (a
// server for no connections), rdmago prints and exits as it does.
func TestDeviceUdaddyAlone(t *testing.T) {
	testenv.RequireDevice(t)
	a := tooltest.VMAddr
	for _, args := range [][]string{
		{"-s", a},                        // nobody listens: UNREACHABLE, status 1
		{"-s", a, "-C", "0", "-t", "16"}, // the same, with nothing to send
		{"-s", a, "-S", "2000"},          // larger than the active MTU
		{"-s", a, "-p", "5"},             // rdma_create_id refuses the port space: exit 1 without a word
		{"-p", "5"},                      // the server's "listen request failed"
		{"-s", a, "-p", "0x2"},           // IPoIB on RoCE: ADDR_ERROR
		{"-s", a, "-P", "ipoib"},
		{"-b", "10.0.3.99"},              // not a local address
		{"-s", a, "-b", "10.0.3.99"},     // the same, for the client
		{"-f", "ip", "-s", "nosuchhost"}, // a name where a number must be
		// No name server answers in the VM: EAI_AGAIN. (Go's resolver,
		// unlike glibc's, refuses a name whose last label is all digits,
		// "1.2.3.4.5", as not found without asking: EAI_NONAME.)
		{"-s", "nosuchhost"},
		{"-b", "nosuchhost"},
		{"-c", "-1"},
		{"-x"},
		{"-h"},
		{"--foo"},
		{"-s"},
	} {
		compareAlone(t, args, true)
	}
	// A server for no connections has nothing to wait for.
	compareAlone(t, []string{"-b", a, "-f", "bogus", "-P", "bogus", "-c", "0"}, false)
}

// TestDeviceUdaddyGID: -f gid asks for AF_IB addresses, which rdmago
// does not have. udaddy on RoCE fails with them too (binding, or resolving
// the route: ENODEV), and rdmago's refusal ends with the same status.
func TestDeviceUdaddyGID(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	for _, c := range []struct {
		args []string
		role string
	}{
		{[]string{"-f", "gid", "-s", "::ffff:" + tooltest.VMAddr}, "client"},
		{[]string{"-f", "gid", "-b", "::ffff:" + tooltest.VMAddr}, "server"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
		cp := tooltest.Start(t, ctx, "C", cSide.Argv(c.args...))
		cStatus := cp.Wait()
		gp := tooltest.Start(t, ctx, "rdmago", goSide.Argv(c.args...))
		gStatus := gp.Wait()
		cancel()
		t.Logf("udaddy %q: status %d, stdout %q, stderr %q", c.args, cStatus, cp.Stdout.String(), cp.Stderr.String())
		if cStatus != 255 {
			t.Errorf("udaddy %q: status %d, want 255 (-1): does it work on this device now?", c.args, cStatus)
		}
		check(t, gp, gStatus, cStatus, []string{"udaddy: starting " + c.role, "test complete", "return status -1"},
			"udaddy: address format gid (AF_IB) is not supported by rdmago\n")
	}
}

// TestDeviceUdaddyIPv6: -f ipv6 with dummy0's link-local address, the C
// pair the reference for rdmago's.
func TestDeviceUdaddyIPv6(t *testing.T) {
	testenv.RequireDevice(t)
	ifi, err := net.InterfaceByName("dummy0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var ll string
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			ll = p.Addr().WithZone(ifi.Name).String()
		}
	}
	if ll == "" {
		t.Fatalf("dummy0 has no IPv6 link-local address: %v", addrs)
	}
	run := func(server, client tooltest.CMSide) tooltest.CMPair {
		return tooltest.RunCMPair(t, port, server, client, []string{"-f", "ipv6", "-b", ll}, []string{"-f", "ipv6", "-s", ll})
	}
	ref := run(cSide, cSide)
	t.Logf("C pair on %s: server %d %q %q, client %d %q %q", ll, ref.SrvStatus, ref.Srv.Stdout.String(), ref.Srv.Stderr.String(),
		ref.CliStatus, ref.Cli.Stdout.String(), ref.Cli.Stderr.String())
	for _, p := range [][2]tooltest.CMSide{{goSide, cSide}, {cSide, goSide}, {goSide, goSide}} {
		tooltest.CheckLike(t, run(p[0], p[1]), ref)
	}
}

// TestNoDeviceUdaddy runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as udaddy does.
func TestNoDeviceUdaddy(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareAlone(t, []string{"-s", tooltest.VMAddr}, true)
	compareAlone(t, []string{"-b", tooltest.VMAddr}, true)
}
