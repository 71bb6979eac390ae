package pingpong

// The device tests of "rdmago pingpong": on the soft-RoCE VM of hack/vm,
// rdmago runs against rdma-core's own ibv_{rc,uc,ud,srq}_pingpong in both
// roles, and against itself, with and without -e, on 10.0.2.15 and GID
// index 1 (the RoCE v2 IPv4 GID). rdmago runs as a child process (the test
// binary re-executed, see TestMain), so that each side has its own exit
// status and output and either can be killed when it hangs.

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

func TestMain(m *testing.M) {
	tooltest.Main(m, Commands())
}

var (
	ppAddrRE   = regexp.MustCompile(`^  (local|remote) address: +LID 0x([0-9a-f]{4,}), QPN 0x([0-9a-f]{6,}), PSN 0x([0-9a-f]{6})([,:]) GID (\S+)$`)
	ppBytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	ppItersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
	ppVMGIDStr = "::ffff:10.0.2.15"
)

// ppOutput is what one side printed.
type ppOutput struct {
	local, remote []string // "LID:QPN:PSN:GID" of each address line
	bytes, iters  int
}

// checkOutput checks a side's output line by line and returns its parts.
// With iters 0 the side was killed before its report: only its address
// lines are checked.
func checkOutput(t *testing.T, p *tooltest.Proc, c ppCase, nqp, size, iters int) ppOutput {
	kind := c.kind
	t.Helper()
	var o ppOutput
	sc := bufio.NewScanner(bytes.NewReader(p.Stdout.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if m := ppAddrRE.FindStringSubmatch(line); m != nil {
			wantSep := ","
			if kind == ppUD && m[1] == "local" {
				wantSep = ":" // sic, as ibv_ud_pingpong prints it
			}
			if m[5] != wantSep || m[6] != ppVMGIDStr {
				t.Errorf("%s: address line %q: want %q before GID %s", p.Label, line, wantSep, ppVMGIDStr)
			}
			addr := strings.Join(m[2:5], ":") + ":" + m[6]
			if m[1] == "local" {
				o.local = append(o.local, addr)
			} else {
				o.remote = append(o.remote, addr)
			}
			continue
		}
		if m := ppBytesRE.FindStringSubmatch(line); m != nil {
			o.bytes, _ = strconv.Atoi(m[1])
			continue
		}
		if m := ppItersRE.FindStringSubmatch(line); m != nil {
			o.iters, _ = strconv.Atoi(m[1])
			continue
		}
		t.Errorf("%s: unexpected output line %q", p.Label, line)
	}
	if len(o.local) != nqp || len(o.remote) != nqp {
		t.Errorf("%s: %d local and %d remote address lines, want %d of each", p.Label, len(o.local), len(o.remote), nqp)
	}
	if iters > 0 && (o.bytes != size*iters*2 || o.iters != iters) {
		t.Errorf("%s: reports %d bytes and %d iters, want %d and %d", p.Label, o.bytes, o.iters, size*iters*2, iters)
	}
	for _, line := range strings.Split(strings.TrimSpace(p.Stderr.String()), "\n") {
		ok := line == "" || strings.HasPrefix(line, "libibverbs: ")
		for _, prefix := range c.stderrOK {
			ok = ok || strings.HasPrefix(line, prefix)
		}
		if !ok {
			t.Errorf("%s: stderr: %q", p.Label, line)
		}
	}
	return o
}

// ppCase is one kind and mode.
type ppCase struct {
	kind   ppKind
	events bool
	extra  []string // more options for both sides
	// stderrOK are the starts of the lines that may appear on stderr.
	stderrOK []string
}

func (c ppCase) name() string {
	n := c.kind.String() + "-poll"
	if c.events {
		n = c.kind.String() + "-events"
	}
	for _, e := range c.extra {
		n += e
	}
	return n
}

var ppCases = []ppCase{
	{kind: ppRC}, {kind: ppRC, events: true}, {kind: ppUC}, {kind: ppUC, events: true},
	{kind: ppUD}, {kind: ppUD, events: true}, {kind: ppSRQ}, {kind: ppSRQ, events: true},
}

const ppIters = 50

// ppArgs are the options both sides of a run get.
func (c ppCase) args(port int) []string {
	a := []string{"-d", testenv.DeviceName(), "-g", "1", "-n", strconv.Itoa(ppIters), "-c", "-p", strconv.Itoa(port)}
	if c.kind == ppSRQ {
		a = append(a, "-q", "4")
	}
	if c.events {
		a = append(a, "-e")
	}
	return append(a, c.extra...)
}

func (c ppCase) cTool() string { return "/usr/bin/ibv_" + c.kind.String() + "_pingpong" }

// runPP runs a server and a client and checks both.
func runPP(t *testing.T, c ppCase, server, client func(args []string) []string) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, c.cTool())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wd := tooltest.NewWatchdog(t, tooltest.RunTimeout, cancel)
	defer wd.Stop()
	port := tooltest.FreePort(t)
	srv := tooltest.Start(t, ctx, "server", server(c.args(port)))
	wd.Watch(srv)
	defer func() {
		cancel()
		srv.Wait()
	}()
	tooltest.WaitListening(t, srv, port)
	cli := tooltest.Start(t, ctx, "client", client(append(c.args(port), "10.0.2.15")))
	wd.Watch(cli)
	nqp, size := 1, 4096
	switch c.kind {
	case ppUD:
		size = 1024
	case ppSRQ:
		nqp = 4
	}
	cliStatus := cli.Wait()
	_, srvDone := srv.WaitFor(endRaceWait)
	var race [2]endRaceSample
	var raceErr error
	if !srvDone && cliStatus == 0 && (c.kind == ppRC || c.kind == ppSRQ) {
		// The server outlived its client: sample it before it is killed.
		race[0], raceErr = sampleEndRace(testenv.DeviceName(), srv.Pid())
		if raceErr == nil {
			time.Sleep(time.Second)
			race[1], raceErr = sampleEndRace(testenv.DeviceName(), srv.Pid())
		}
		cancel()
	}
	srvStatus := srv.Wait()
	tooltest.LogOnFailure(t, srv, srvStatus)
	tooltest.LogOnFailure(t, cli, cliStatus)
	if wd.Stop() {
		t.Fatalf("timed out after %v", tooltest.RunTimeout)
	}
	var so ppOutput
	if raceErr == nil && race[0].qps != nil {
		// Every exchange made; only the server's last send waits for
		// an ACK that cannot come (endrace_test.go).
		local, remote := parseAddrs(srv.Stdout.String())
		packets := uint32(ppIters * (size / 1024)) // -m is 1024
		if err := judgeEndRace(race[0], race[1], local, remote, packets); err != nil {
			t.Fatalf("the server still ran %v after its client exited 0, and not in rxe's end race: %v", endRaceWait, err)
		}
		t.Logf("the server still ran %v after its client exited 0: rxe's end race (its QPs in RTS with all %d packets received, completer_retry_err %d then %d); killed",
			endRaceWait, packets, race[0].retries, race[1].retries)
		so = checkOutput(t, srv, c, nqp, size, 0)
	} else {
		if raceErr != nil {
			t.Errorf("sampling the server that outlived its client: %v", raceErr)
		}
		if srvStatus != 0 || cliStatus != 0 {
			t.Fatalf("exit statuses: server %d, client %d; want 0 and 0", srvStatus, cliStatus)
		}
		so = checkOutput(t, srv, c, nqp, size, ppIters)
	}
	co := checkOutput(t, cli, c, nqp, size, ppIters)
	// Each side must have understood the other's addresses.
	if strings.Join(so.local, " ") != strings.Join(co.remote, " ") || strings.Join(co.local, " ") != strings.Join(so.remote, " ") {
		t.Errorf("addresses do not match:\nserver local %q remote %q\nclient local %q remote %q", so.local, so.remote, co.local, co.remote)
	}
}

func goSide(c ppCase, viaAlias bool) func(args []string) []string {
	return func(args []string) []string {
		if viaAlias {
			return append([]string{"rdmago", c.kind.String() + "_pingpong"}, args...)
		}
		return append([]string{"rdmago", "pingpong", "--type", c.kind.String()}, args...)
	}
}

func cSide(c ppCase) func(args []string) []string {
	return func(args []string) []string { return tooltest.LineBuffered(append([]string{c.cTool()}, args...)) }
}

// rdmago serves, rdma-core's program is the client.
func TestDevicePingpongGoServerCClient(t *testing.T) {
	for _, c := range ppCases {
		t.Run(c.name(), func(t *testing.T) { runPP(t, c, goSide(c, false), cSide(c)) })
	}
}

// rdma-core's program serves, rdmago is the client.
func TestDevicePingpongCServerGoClient(t *testing.T) {
	for _, c := range ppCases {
		t.Run(c.name(), func(t *testing.T) { runPP(t, c, cSide(c), goSide(c, true)) })
	}
}

// rdmago on both sides.
func TestDevicePingpongGoGo(t *testing.T) {
	for _, c := range ppCases {
		t.Run(c.name(), func(t *testing.T) { runPP(t, c, goSide(c, false), goSide(c, true)) })
	}
}

// TestDevicePingpongFailures runs rdmago and the C program where both must
// fail before any exchange, and compares their messages and statuses.
func TestDevicePingpongFailures(t *testing.T) {
	testenv.RequireDevice(t)
	port := strconv.Itoa(tooltest.FreePort(t)) // nothing listens there
	for _, tc := range []struct {
		kind ppKind
		args []string
	}{
		{ppRC, []string{"-d", testenv.DeviceName(), "-g", "1", "-p", port, "10.0.2.15"}},
		{ppUD, []string{"-d", testenv.DeviceName(), "-g", "1", "-p", port, "10.0.2.15"}},
		{ppRC, []string{"-d", "rdmago_no_such_device", "10.0.2.15"}},
		{ppSRQ, []string{"-d", testenv.DeviceName(), "-g", "9999", "-q", "2"}},
		{ppUC, []string{"-d", testenv.DeviceName(), "-g", "9999"}},
		{ppUD, []string{"-d", testenv.DeviceName(), "-s", "8192"}},
		{ppRC, []string{"-d", testenv.DeviceName(), "-t"}},
		{ppRC, []string{"-d", testenv.DeviceName(), "--ts", "-e"}},
		{ppRC, []string{"-d", testenv.DeviceName(), "-j"}},
	} {
		compareFailure(t, tc.kind, tc.args)
	}
}

// compareFailure runs the C program and rdmago with args, where both must
// fail alone, and compares their statuses, messages and output.
func compareFailure(t *testing.T, kind ppKind, args []string) {
	t.Helper()
	c := ppCase{kind: kind}
	tooltest.RequireCTool(t, c.cTool())
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.RunTimeout)
	defer cancel()
	want := tooltest.Start(t, ctx, "C", append([]string{c.cTool()}, args...))
	wantStatus := want.Wait()
	got := tooltest.Start(t, ctx, "rdmago", append([]string{"rdmago", kind.String() + "_pingpong"}, args...))
	gotStatus := got.Wait()
	wantErr := strings.Join(dropLibibverbs(want.Stderr.String()), "\n")
	t.Logf("%s %q: status %d, stderr %q", c.cTool(), args, wantStatus, wantErr)
	if wantStatus == 0 || gotStatus != wantStatus || got.Stderr.String() != wantErr+"\n" {
		t.Errorf("%s %q: status %d, stderr %q; %s: status %d, stderr %q",
			kind, args, gotStatus, got.Stderr.String(), c.cTool(), wantStatus, wantErr)
	}
	// Both print the local address (or nothing) before failing.
	if g, w := ppAddrRE.MatchString(firstLine(got.Stdout.String())), ppAddrRE.MatchString(firstLine(want.Stdout.String())); g != w {
		t.Errorf("%s %q: stdout %q; %s: %q", kind, args, got.Stdout.String(), c.cTool(), want.Stdout.String())
	}
}

// TestDevicePingpongODP runs -o (on-demand paging; -P, prefetch, too for
// rc) where the device supports it, as rxe does from Linux 6.15 on or so,
// and elsewhere checks that rdmago refuses it as the C programs do.
func TestDevicePingpongODP(t *testing.T) {
	name := testenv.RequireDevice(t)
	uctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	attr, err := uctx.QueryDevice()
	uctx.Close()
	if err != nil {
		t.Fatal(err)
	}
	odp := attr.ODPCaps
	t.Logf("kernel %s: ODP general caps %#x, RC caps %#x", testenv.Kernel(), odp.GeneralCaps, odp.RCODPCaps)
	for _, tc := range []struct {
		c    ppCase
		need uverbs.ODPTransportCaps
	}{
		{ppCase{kind: ppRC, extra: []string{"-o", "-P"}, stderrOK: []string{"Couldn't prefetch MR("}}, odpSupportSend | odpSupportRecv},
		{ppCase{kind: ppSRQ, extra: []string{"-o"}}, odpSupportSend | odpSupportSRQRecv},
	} {
		t.Run(tc.c.name(), func(t *testing.T) {
			if odp.GeneralCaps&odpSupport == 0 || odp.RCODPCaps&tc.need != tc.need {
				t.Logf("the device lacks ODP for %s: both must refuse", tc.c.kind)
				compareFailure(t, tc.c.kind, append([]string{"-d", name}, tc.c.extra...))
				return
			}
			runPP(t, tc.c, goSide(tc.c, false), cSide(tc.c))
			runPP(t, tc.c, cSide(tc.c), goSide(tc.c, true))
		})
	}
}

func dropLibibverbs(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if !strings.HasPrefix(l, "libibverbs: ") {
			out = append(out, l)
		}
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestNoDevicePingpong runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago must fail as the C programs do.
func TestNoDevicePingpong(t *testing.T) {
	testenv.RequireNoDevice(t)
	for _, k := range []ppKind{ppRC, ppUD} {
		compareFailure(t, k, nil)
		compareFailure(t, k, []string{"-d", "rxe0", "10.0.2.15"})
	}
}

// withoutGID drops "-g 1" from a side's arguments.
func withoutGID(side func(args []string) []string) func(args []string) []string {
	return func(args []string) []string {
		var out []string
		for i := 0; i < len(args); i++ {
			if args[i] == "-g" {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return side(out)
	}
}

// TestDevicePingpongSelectsGID runs rdmago without -g against the C
// program with -g 1, both ways: on a RoCE port rdmago picks the GID
// rdma_cm would (uverbs.Context.SelectGID), index 1 here, where the C
// program without -g sends no GRH and cannot connect. checkOutput checks
// that both sides' address lines carry the VM's IPv4 GID.
func TestDevicePingpongSelectsGID(t *testing.T) {
	for _, c := range []ppCase{{kind: ppRC}, {kind: ppUD}} {
		t.Run(c.name(), func(t *testing.T) {
			runPP(t, c, withoutGID(goSide(c, false)), cSide(c))
			runPP(t, c, cSide(c), withoutGID(goSide(c, true)))
		})
	}
}

// TestDeviceEndRaceSample runs the end race's sampling on a QP that is in
// it for sure: one that sends to a QP number nobody has, at retry count 7.
func TestDeviceEndRaceSample(t *testing.T) {
	testenv.RequireDevice(t)
	r := rdmatest.ConnectToNobody(t, 7)
	_, err := r.A.QP.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}}})
	rdmatest.Must(t, err)
	first, err := sampleEndRace(testenv.DeviceName(), os.Getpid())
	rdmatest.Must(t, err)
	time.Sleep(300 * time.Millisecond)
	second, err := sampleEndRace(testenv.DeviceName(), os.Getpid())
	rdmatest.Must(t, err)
	// It has received nothing: its rq-psn is still its peer's first PSN.
	local := []ppAddr{{r.A.QP.Num(), 0}}
	remote := []ppAddr{{0, 0}}
	for _, q := range first.qps {
		if q.lqpn == r.A.QP.Num() {
			remote[0].psn = q.rqPSN
		}
	}
	if err := judgeEndRace(first, second, local, remote, 0); err != nil {
		t.Errorf("a QP retrying to nobody: %v (samples %+v, %+v)", err, first, second)
	}
	if err := judgeEndRace(first, second, local, remote, 1); err == nil {
		t.Errorf("a QP retrying to nobody passes for one that received a packet")
	}
}
