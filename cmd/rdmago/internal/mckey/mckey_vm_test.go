//go:build linux

package mckey

// The device tests of "rdmago mckey": on the soft-RoCE VM, against
// rdma-core's mckey and against itself, a receiver and a sender of the
// group 239.1.2.3 bound to 10.0.2.15 (mckey finds no route to a group
// without -b), each process a child with a timeout. Whether mckey's
// receiver gets mckey's datagrams is the kernel's: the C sender posts them
// unsignaled and leaves at once, and on some kernels rxe drops what it has
// not sent yet (the receiver then waits forever, as mckey does). So each
// test of a pair first runs the C pair, and where it does not deliver,
// the runs that need the C sender are skipped with what it saw. The C
// program is run as /usr/bin/mckey, its argv[0]: in its output that name
// is read as "mckey", rdmago's.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
)

const (
	cTool = "/usr/bin/mckey"
	group = "239.1.2.3"
	// recvGrace is how long a receiver has, once the sender has exited,
	// to report its datagrams: they were on the wire when the sender
	// left, or never will be.
	recvGrace = 20 * time.Second
)

var (
	goSide = tooltest.CMSide{Name: "rdmago", Tool: "mckey"}
	cSide  = tooltest.CMSide{Name: "C", Tool: "mckey", Path: cTool}
)

// pair is what a receiver and a sender printed.
type pair struct {
	rx, tx             *tooltest.Proc
	rxStatus, txStatus int
	rxKilled           bool // the receiver was still waiting for datagrams
	sent               string
}

func (p pair) String() string {
	return fmt.Sprintf("receiver %s: status %d (killed %v), stdout %q, stderr %q; sender %s: status %d, stdout %q, stderr %q; rxe sent_pkts %s",
		p.rx.Label, p.rxStatus, p.rxKilled, p.rx.Stdout.String(), p.rx.Stderr.String(),
		p.tx.Label, p.txStatus, p.tx.Stdout.String(), p.tx.Stderr.String(), p.sent)
}

// delivered reports whether the receiver got all its datagrams and both
// ended well.
func (p pair) delivered() bool {
	return !p.rxKilled && p.rxStatus == 0 && p.txStatus == 0 && strings.Contains(p.rx.Stdout.String(), "data transfers complete\n")
}

// cSenderRuns is how many times a pair with mckey's sender is run at
// most, for one in which the sender sent all its datagrams.
const cSenderRuns = 3

// sentAll reports whether rxe sent at least n packets during the run:
// the sender's n datagrams (nothing else in the VM sends meanwhile).
func (p pair) sentAll(n int) bool {
	var before, after int
	if _, err := fmt.Sscanf(p.sent, "%d -> %d", &before, &after); err != nil {
		return false
	}
	return after-before >= n
}

// msgCount is the number of datagrams a sender with args sends: -C's, or
// mckey's default of 10.
func msgCount(args []string) int {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-C" {
			var n int
			fmt.Sscanf(args[i+1], "%d", &n)
			return n
		}
	}
	return 10
}

// readSent is the count of packets the device sent, for the log.
func readSent() string {
	n, err := rdmatest.HWCounter(testenv.DeviceName(), "sent_pkts")
	if err != nil {
		return "?"
	}
	return strconv.FormatUint(n, 10)
}

// waitJoined waits until the receiver's ID has the group as its
// destination (it then joins at once; the sender waits 3 s after its own
// join before sending), or fails when the receiver exits first.
func waitJoined(t *testing.T, rx *tooltest.Proc, exited <-chan int) {
	t.Helper()
	deadline := time.Now().Add(tooltest.CMTimeout)
	var out []byte
	for {
		out, _ = exec.Command("/usr/bin/rdma", "res", "show", "cm_id").Output()
		if strings.Contains(string(out), group+":") {
			return
		}
		select {
		case st := <-exited:
			t.Fatalf("%s exited (status %d) before joining: %q %q", rx.Label, st, rx.Stdout.String(), rx.Stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no rdma_cm ID for %s after %v: %s", rx.Label, group, tooltest.CMTimeout, out)
		}
	}
}

// runPair runs a receiver with rxArgs and, once it joined, a sender with
// txArgs, both of the group and bound to the VM's address; the receiver
// is killed if it still waits recvGrace after the sender ended.
func runPair(t *testing.T, recv, send tooltest.CMSide, rxArgs, txArgs []string) pair {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	ctx, cancel := context.WithTimeout(context.Background(), 2*tooltest.CMTimeout)
	defer cancel()
	base := []string{"-m", group, "-b", tooltest.VMAddr}
	before := readSent()
	p := pair{}
	p.rx = tooltest.Start(t, ctx, recv.Name+" receiver", recv.Argv(append(base, rxArgs...)...))
	exited := make(chan int, 1)
	go func() { exited <- p.rx.Wait() }()
	waitJoined(t, p.rx, exited)
	p.tx = tooltest.Start(t, ctx, send.Name+" sender", send.Argv(append(append(base, "-s"), txArgs...)...))
	p.txStatus = p.tx.Wait()
	select {
	case p.rxStatus = <-exited:
	case <-time.After(recvGrace):
		p.rxKilled = true
		p.rx.Signal(os.Kill)
		p.rxStatus = <-exited
	}
	p.sent = before + " -> " + readSent()
	if ctx.Err() != nil {
		t.Errorf("timeout: %v", ctx.Err())
	}
	return p
}

// probe runs the C pair with the same arguments: the reference, whether
// it delivered or not.
func probe(t *testing.T, rxArgs, txArgs []string) pair {
	t.Helper()
	ref := runPair(t, cSide, cSide, rxArgs, txArgs)
	t.Logf("kernel %s, C pair: delivered %v: %v", uname(), ref.delivered(), ref)
	return ref
}

func uname() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// receiverLines is what a receiver that got its datagrams prints, with
// the "joined" line the sender printed (the same group's).
func receiverLines(t *testing.T, tx *tooltest.Proc) []string {
	t.Helper()
	var joined string
	for _, l := range tooltest.Lines(tx.Stdout.String()) {
		if strings.HasPrefix(l, "mckey: joined dgid: ::ffff:"+group+" ") {
			joined = l
		}
	}
	if joined == "" {
		t.Fatalf("%s did not join %s: %q %q", tx.Label, group, tx.Stdout.String(), tx.Stderr.String())
	}
	return []string{"mckey: starting server", "mckey: joining", joined, "receiving data transfers",
		"data transfers complete", "test complete", "return status 0"}
}

// TestDeviceMckey: rdmago's receiver and sender against mckey's and
// against each other, every line both print compared with the C pair's.
// mckey's sender leaves without waiting for its datagrams to be sent, and
// on some kernels rxe then drops most of them: where the C pair does not
// deliver, rdmago's receiver (which needs a C sender here) is skipped,
// saying what the C pair did. rdmago's sender waits for its datagrams:
// with it, the C receiver and rdmago's must deliver on every kernel.
// Where the C pair delivered, a run with mckey's sender judges rdmago's
// receiver only if rxe's sent_pkts shows that the sender's datagrams all
// left (a kernel that loses them now and then): up to cSenderRuns runs
// for one that did, and a skip, saying so, when none did.
func TestDeviceMckey(t *testing.T) {
	for _, c := range []struct {
		name           string
		rxArgs, txArgs []string
	}{
		{"Default", nil, nil},
		{"Sized", []string{"-C", "5", "-S", "1000"}, []string{"-C", "5", "-S", "1000", "-o"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := probe(t, c.rxArgs, c.txArgs)
			wantRx, wantTx := receiverLines(t, ref.tx), tooltest.Lines(ref.tx.Stdout.String())
			if ref.txStatus != 0 {
				t.Fatalf("C sender failed: %v", ref)
			}
			if ref.delivered() {
				check(t, ref.rx, ref.rxStatus, 0, wantRx)
			}
			for _, s := range [][2]tooltest.CMSide{{goSide, cSide}, {cSide, goSide}, {goSide, goSide}} {
				t.Run(s[0].Name+"Receiver"+s[1].Name+"Sender", func(t *testing.T) {
					cSender := s[1].Path != ""
					if cSender && !ref.delivered() {
						t.Skipf("kernel %s: the C mckey pair delivers nothing here (mckey's sender leaves before rxe sent its datagrams): %v", uname(), ref)
					}
					r := runPair(t, s[0], s[1], c.rxArgs, c.txArgs)
					if cSender {
						// Judge the receiver only by a run in which
						// mckey's sender put all its datagrams on the
						// wire: whether it does is the kernel's.
						n := msgCount(c.txArgs)
						for i := 1; i < cSenderRuns && !r.sentAll(n); i++ {
							t.Logf("run %d: mckey's sender did not send its %d datagrams: %v", i, n, r)
							r = runPair(t, s[0], s[1], c.rxArgs, c.txArgs)
						}
						if !r.sentAll(n) {
							t.Skipf("kernel %s: in %d runs mckey's sender never put its %d datagrams on the wire (rxe's sent_pkts): %v", uname(), cSenderRuns, n, r)
						}
					}
					if !r.delivered() {
						t.Errorf("not delivered: %v", r)
					}
					check(t, r.rx, r.rxStatus, 0, wantRx)
					check(t, r.tx, r.txStatus, 0, wantTx)
				})
			}
		})
	}
}

func check(t *testing.T, p *tooltest.Proc, status, wantStatus int, want []string) {
	t.Helper()
	tooltest.CheckProc(t, p, status, wantStatus, want, "")
}

func compareAlone(t *testing.T, args []string, wantFail bool) {
	t.Helper()
	tooltest.CompareAlone(t, cSide, goSide, args, wantFail)
}

// TestDeviceMckeyAlone: mckey alone, where it fails (bad options, no or a
// bad group or source, no route, a port space or size the device refuses,
// -l, which rxe cannot do) or needs no peer (a sender, a send-only
// member, a unicast "group", no IDs), and rdmago prints and exits as it
// does.
func TestDeviceMckeyAlone(t *testing.T) {
	testenv.RequireDevice(t)
	a := tooltest.VMAddr
	for _, args := range [][]string{
		{"-x"},
		{"--foo"},
		{"-m"},
		{"-h"},
		{"-M", "ff0e::1"},
		{"-c", "-1"},
		{},                                   // getaddrinfo(NULL): EAI_NONAME
		{"-m", "nosuchhost"},                 // no name server: EAI_AGAIN
		{"-m", group, "-b", "nosuchhost"},    // the same for -b
		{"-m", group},                        // no route to the group: ENETUNREACH
		{"-m", group, "-b", "10.0.3.99"},     // not a local address
		{"-m", group, "-b", a, "-p", "5"},    // rdma_create_id refuses the port space
		{"-m", group, "-b", a, "-s", "-l"},   // rxe has no BLOCK_SELF_MCAST_LB
		{"-m", group, "-b", a, "-S", "5000"}, // larger than the active MTU
		{"-m", group, "-b", a, "-p", "0x2"},  // IPoIB on RoCE
		{"-m", "ff0e::1", "-b", a, "-s"},     // an IPv6 group from an IPv4 address
	} {
		compareAlone(t, args, true)
	}
	for _, args := range [][]string{
		{"-m", group, "-b", a, "-s"},
		{"-m", group, "-b", a, "-s", "-o", "-c", "2", "-C", "3"},
		{"-m", a, "-b", a, "-s"}, // a unicast address: MULTICAST_ERROR, and the leave ends well
		{"-m", group, "-b", a, "-c", "0"},
		{"-m", group, "-b", a, "-S", "0"},
	} {
		compareAlone(t, args, false)
	}
}

// TestDeviceMckeyUnmapped: -M gives the group as an AF_IB address, which
// rdmago does not have. mckey on RoCE fails with it too (the kernel
// refuses the join), and rdmago prints the same on stdout and ends with
// the same status.
func TestDeviceMckeyUnmapped(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cTool)
	args := []string{"-M", "ff0e::1", "-b", tooltest.VMAddr, "-s"}
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.CMTimeout)
	defer cancel()
	cp := tooltest.Start(t, ctx, "C", cSide.Argv(args...))
	cStatus := cp.Wait()
	gp := tooltest.Start(t, ctx, "rdmago", goSide.Argv(args...))
	gStatus := gp.Wait()
	t.Logf("mckey %q: status %d, stdout %q, stderr %q", args, cStatus, cp.Stdout.String(), cp.Stderr.String())
	if cStatus != 255 {
		t.Errorf("mckey %q: status %d, want 255 (-1): does it work on this device now?", args, cStatus)
	}
	tooltest.CheckProc(t, gp, gStatus, cStatus, tooltest.Lines(cp.Stdout.String()),
		"mckey: unmapped (AF_IB) multicast addresses are not supported by rdmago\n")
}

// TestNoDeviceMckey runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as mckey does.
func TestNoDeviceMckey(t *testing.T) {
	testenv.RequireNoDevice(t)
	compareAlone(t, []string{"-m", group, "-b", tooltest.VMAddr}, true)
	compareAlone(t, []string{"-m", group, "-s"}, true)
}
