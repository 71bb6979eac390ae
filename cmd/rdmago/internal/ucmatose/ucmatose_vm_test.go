package ucmatose

// The device tests of "rdmago ucmatose": on the soft-RoCE VM, against
// rdma-core's ucmatose and against itself, on 10.0.2.15 and cmatose's
// fixed port 7471 (so one run at a time), each process a child with a
// timeout. Every line both sides print is checked, and where both must
// fail the same way alone, rdmago's output and status are the C
// program's. The C program is run as /usr/bin/ucmatose, its argv[0]: in
// its output (the usage and getopt's messages) that name is read as
// "ucmatose", rdmago's.

import (
	"context"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	cTool = "/usr/bin/ucmatose"
	port  = 7471
)

var (
	goSide = tooltest.CMSide{Name: "rdmago", Tool: "ucmatose"}
	cSide  = tooltest.CMSide{Name: "C", Tool: "ucmatose", Path: cTool}
)

// serverOK and clientOK are what a good run prints: with messages or
// without (-C 0, -S 0), migrating to a new event channel (-m) or not.
func serverOK(msgs, migrate bool) []string {
	l := []string{"cmatose: starting server"}
	if msgs {
		l = append(l, "initiating data transfers", "completing sends", "receiving data transfers", "data transfers complete")
	}
	if migrate {
		l = append(l, "migrating to new event channel")
	}
	return append(l, "cmatose: disconnecting", "disconnected", "test complete", "return status 0")
}

func clientOK(msgs, migrate bool) []string {
	l := []string{"cmatose: starting client", "cmatose: connecting"}
	if msgs {
		l = append(l, "receiving data transfers", "sending replies", "data transfers complete")
	}
	if migrate {
		l = append(l, "migrating to new event channel")
	}
	return append(l, "test complete", "return status 0")
}

// runPair runs a server bound to the VM's address with srvArgs and a
// client of it with cliArgs.
func runPair(t *testing.T, server, client tooltest.CMSide, srvArgs, cliArgs []string) tooltest.CMPair {
	t.Helper()
	return tooltest.RunCMPair(t, port, server, client, append([]string{"-b", tooltest.VMAddr}, srvArgs...),
		append([]string{"-s", tooltest.VMAddr}, cliArgs...))
}

var check = tooltest.CheckProc

func TestDeviceUcmatose(t *testing.T) {
	pairs := []struct {
		name           string
		server, client tooltest.CMSide
	}{{"GoServerCClient", goSide, cSide}, {"CServerGoClient", cSide, goSide}, {"GoGo", goSide, goSide}}
	for _, c := range []struct {
		name             string
		srvArgs, cliArgs []string
		msgs, migrate    bool
	}{
		{"", nil, nil, true, false},
		// Two connections, other counts and sizes (each side waits for
		// -C messages per connection, so both must have the same),
		// a type of service and an ACK timeout.
		{"2", []string{"-c", "2"}, []string{"-c2"}, true, false},
		{"2Sizes", []string{"-c", "2", "-C", "3", "-S", "5000", "-a", "16"}, []string{"-c", "2", "-C", "3", "-S", "5000", "-t", "32", "-a", "18"}, true, false},
		{"Count", []string{"-C", "40", "-S", "1", "-P", "tcp", "-f", "ip"}, []string{"-C40", "-S1", "-f", "name"}, true, false},
		// Nothing to exchange: no messages, or empty ones.
		{"NoMessages", []string{"-C", "0"}, []string{"-C", "0"}, false, false},
		{"EmptyMessages", []string{"-S", "0", "-c", "2"}, []string{"-S", "0", "-c", "2"}, false, false},
		// Both sides move their IDs to a new event channel before
		// disconnecting.
		{"Migrate", []string{"-m", "-c", "2"}, []string{"-m", "-c", "2"}, true, true},
	} {
		for _, p := range pairs {
			t.Run(p.name+c.name, func(t *testing.T) {
				r := runPair(t, p.server, p.client, c.srvArgs, c.cliArgs)
				check(t, r.Srv, r.SrvStatus, 0, serverOK(c.msgs, c.migrate), "")
				check(t, r.Cli, r.CliStatus, 0, clientOK(c.msgs, c.migrate), "")
			})
		}
	}
}

// TestDeviceUcmatosePort: -p, another port than cmatose's 7471, on both
// sides.
func TestDeviceUcmatosePort(t *testing.T) {
	const other = 7472
	a := tooltest.VMAddr
	for _, p := range [][2]tooltest.CMSide{{goSide, cSide}, {cSide, goSide}} {
		r := tooltest.RunCMPair(t, other, p[0], p[1], []string{"-b", a, "-p", "7472", "-c", "2"}, []string{"-s", a, "-p", "7472", "-c", "2"})
		check(t, r.Srv, r.SrvStatus, 0, serverOK(true, false), "")
		check(t, r.Cli, r.CliStatus, 0, clientOK(true, false), "")
	}
}

// TestDeviceUcmatoseReject: a server that cannot make a connection's
// resources (a CQ larger than the device's) refuses the request and
// fails; the client reports the REJECTED event. The C pair is the
// reference for the other two.
func TestDeviceUcmatoseReject(t *testing.T) {
	srvArgs := []string{"-C", "10000000"}
	ref := runPair(t, cSide, cSide, srvArgs, nil)
	if ref.SrvStatus == 0 || ref.CliStatus == 0 {
		t.Fatalf("C server %d, C client %d: want both to fail", ref.SrvStatus, ref.CliStatus)
	}
	t.Logf("C pair: server %d %q %q, client %d %q %q", ref.SrvStatus, ref.Srv.Stdout.String(), ref.Srv.Stderr.String(),
		ref.CliStatus, ref.Cli.Stdout.String(), ref.Cli.Stderr.String())
	for _, c := range []struct {
		name           string
		server, client tooltest.CMSide
	}{{"GoServerCClient", goSide, cSide}, {"CServerGoClient", cSide, goSide}, {"GoGo", goSide, goSide}} {
		t.Run(c.name, func(t *testing.T) {
			tooltest.CheckLike(t, runPair(t, c.server, c.client, srvArgs, nil), ref)
		})
	}
}

// compareAlone runs ucmatose and rdmago's with args, each alone, and
// compares their statuses and output.
func compareAlone(t *testing.T, args []string, wantFail bool) {
	t.Helper()
	tooltest.CompareAlone(t, cSide, goSide, args, wantFail)
}

// TestDeviceUcmatoseAlone: where cmatose fails alone (no server, a bad
// address, port, count or size, bad options) or has nothing to do (no
// connections), rdmago prints and exits as it does.
func TestDeviceUcmatoseAlone(t *testing.T) {
	testenv.RequireDevice(t)
	a := tooltest.VMAddr
	for _, args := range [][]string{
		{"-s", a}, // nobody listens: REJECTED
		{"-s", a, "-C", "0", "-t", "16", "-a", "14"}, // the same, with nothing to send and options set
		{"-s", a, "-c", "2", "-m"},
		{"-s", a, "-C", "-1"},           // a CQ of a negative size
		{"-s", a, "-S", "-1"},           // a buffer of a negative size
		{"-s", a, "-P", "ib"},           // the IB port space on RoCE
		{"-b", "10.0.3.99", "-P", "ib"}, // not a local address
		{"-b", "10.0.3.99"},
		{"-s", a, "-b", "10.0.3.99"}, // the same, for the client
		{"-s", a, "-p", "nosuchport"},
		{"-b", a, "-p", "nosuchport"},
		{"-f", "ip", "-s", "nosuchhost"}, // a name where a number must be
		// No name server answers in the VM: EAI_AGAIN.
		{"-s", "nosuchhost"},
		{"-b", "nosuchhost"},
		{"-c", "-1"},
		{"-x"},
		{"-h"},
		{"-r"},
		{"--foo"},
		{"-s"},
	} {
		compareAlone(t, args, true)
	}
	// No connections: nothing to wait for, on either side.
	compareAlone(t, []string{"-b", a, "-f", "bogus", "-P", "bogus", "-c", "0"}, false)
	compareAlone(t, []string{"-b", a, "-c", "0", "-m"}, false)
	compareAlone(t, []string{"-s", a, "-c", "0", "-m"}, false)
}

// TestDeviceUcmatoseGID: -f gid asks for AF_IB addresses, which rdmago
// does not have. ucmatose on RoCE fails with them too, and rdmago's
// refusal ends with the same status.
func TestDeviceUcmatoseGID(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-f", "gid", "-s", "::ffff:" + tooltest.VMAddr}, []string{"cmatose: starting client", "test complete", "return status -1"}},
		{[]string{"-f", "gid", "-b", "::ffff:" + tooltest.VMAddr}, []string{"cmatose: starting server", "test complete", "return status -1"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
		cp := tooltest.Start(t, ctx, "C", cSide.Argv(c.args...))
		cStatus := cp.Wait()
		gp := tooltest.Start(t, ctx, "rdmago", goSide.Argv(c.args...))
		gStatus := gp.Wait()
		cancel()
		t.Logf("ucmatose %q: status %d, stdout %q, stderr %q", c.args, cStatus, cp.Stdout.String(), cp.Stderr.String())
		if cStatus != 255 {
			t.Errorf("ucmatose %q: status %d, want 255 (-1): does it work on this device now?", c.args, cStatus)
		}
		check(t, gp, gStatus, cStatus, c.want, "cmatose: address format gid (AF_IB) is not supported by rdmago\n")
	}
}

// TestNoDeviceUcmatose runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as ucmatose does.
func TestNoDeviceUcmatose(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareAlone(t, []string{"-s", tooltest.VMAddr}, true)
	compareAlone(t, []string{"-b", tooltest.VMAddr}, true)
}
