package uverbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestMain checks, under the VM runner, that the tests left no kernel
// object behind: rdma res lists every PD, CQ, QP and MR with its owner.
func TestMain(m *testing.M) {
	code := m.Run()
	// A child process of TestDeviceTwoProcesses shares the command name with
	// its parent, which still holds its objects: only the parent checks.
	if code == 0 && testenv.InVM() && os.Getenv("RDMAGO_TWO_PROCESS_CHILD") == "" {
		if leaks := ourRDMAResources(); leaks != "" {
			fmt.Fprintf(os.Stderr, "kernel objects left behind by the tests (rdma res):\n%s", leaks)
			code = 1
		}
	}
	os.Exit(code)
}

// ourRDMAResources returns the rdma res lines that name this program.
func ourRDMAResources() string {
	var out strings.Builder
	for _, kind := range []string{"pd", "cq", "qp", "mr", "srq"} {
		lines, err := ourResLines(kind)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			continue
		}
		for _, l := range lines {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// ourResLines returns the lines of rdma res show kind that name this
// program. The kernel records the thread that created each object, whose
// id is not the process id for a Go program, so the match is on the
// command name (which the kernel truncates to 15 bytes).
func ourResLines(kind string) ([]string, error) {
	comm := filepath.Base(os.Args[0])
	if len(comm) > 15 {
		comm = comm[:15]
	}
	pid := " comm " + comm + " "
	b, err := exec.Command("/usr/bin/rdma", "res", "show", kind).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("rdma res show %s: %v: %s", kind, err, b)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line+" ", pid) {
			out = append(out, line)
		}
	}
	return out, nil
}

func TestDeviceUCSendWrite(t *testing.T) {
	r := newRig(t, qp.UC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	copy(r.a.buf.Bytes(), "unreliable but connected")
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 5, SGList: []wr.SGE{r.b.buf.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{r.a.buf.SGE(0, 24)}},
		{ID: 2, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.a.buf.SGE(0, 24)}, RemoteAddr: r.b.buf.Addr() + 1000, RKey: r.b.buf.RKey},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, r.a.cq, 2)
	wantOK(t, wcs[0], 1, wr.WCSend)
	wantOK(t, wcs[1], 2, wr.WCRDMAWrite)
	wantOK(t, waitWC(t, r.b.cq, 1)[0], 5, wr.WCRecv)
	// UC acknowledges nothing: the send completes before the data may have
	// landed, so wait for the write's bytes.
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Equal(r.b.buf.Bytes()[1000:1024], r.a.buf.Bytes()[:24]) {
		if time.Now().After(deadline) {
			t.Fatalf("UC RDMA write delivered %q", r.b.buf.Bytes()[1000:1024])
		}
		time.Sleep(time.Millisecond)
	}
	if !bytes.Equal(r.b.buf.Bytes()[:24], r.a.buf.Bytes()[:24]) {
		t.Fatalf("UC send delivered %q", r.b.buf.Bytes()[:24])
	}
	// UC cannot read.
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 3, Opcode: wr.OpRDMARead, SGList: []wr.SGE{r.a.buf.SGE(0, 8)}}}); err == nil {
		t.Error("RDMA read on a UC QP was accepted")
	}
}

const grhSize = 40 // UD receives start with room for the GRH

func TestDeviceUDSend(t *testing.T) {
	r := newRig(t, qp.UD, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ah, err := r.pd.CreateAH(provider.AHAttr{IsGlobal: true, DGID: r.gid, SGIDIndex: r.gidIndex, HopLimit: 1, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	msg := []byte("datagram with an address handle")
	copy(r.a.buf.Bytes(), msg)
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 11, SGList: []wr.SGE{r.b.buf.SGE(0, grhSize+256)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSendWithImm, Imm: 99, Flags: wr.Signaled,
		SGList: []wr.SGE{r.a.buf.SGE(0, len(msg))}, AH: ah, RemoteQPN: r.b.qp.Num(), RemoteQKey: testQKey}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 1, wr.WCSend)
	c := waitWC(t, r.b.cq, 1)[0]
	wantOK(t, c, 11, wr.WCRecv)
	if c.SrcQP != r.a.qp.Num() {
		t.Errorf("UD receive from QP %d, want %d", c.SrcQP, r.a.qp.Num())
	}
	if int(c.ByteLen) != grhSize+len(msg) || c.Imm != 99 || c.Flags&wr.WCGRH == 0 {
		t.Errorf("UD receive %+v: want %d bytes with a GRH and immediate 99", c, grhSize+len(msg))
	}
	if got := r.b.buf.Bytes()[grhSize : grhSize+len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("UD payload %q", got)
	}
	// A UD send without an address handle is refused before the queue.
	if n, err := r.a.qp.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSend, SGList: []wr.SGE{r.a.buf.SGE(0, 8)}}}); n != 0 || err == nil {
		t.Errorf("UD send without an AH: %d, %v", n, err)
	}
}

// TestDeviceSRQShared serves two connected QPs from one SRQ and checks the
// limit event.
func TestDeviceSRQShared(t *testing.T) {
	name := testenv.RequireDevice(t)
	ctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	gidIndex, gid := roceV2GID(t, ctx)
	srq, err := pd.CreateSRQ(uverbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	buf, err := mr.New(pd, 1<<16, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	caps := provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	var senders, receivers [2]*uverbs.QP
	for i := range senders {
		if senders[i], err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: caps}); err != nil {
			t.Fatal(err)
		}
		defer senders[i].Close()
		if receivers[i], err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, SRQ: srq, Cap: caps}); err != nil {
			t.Fatal(err)
		}
		defer receivers[i].Close()
		connectPair(t, senders[i], receivers[i], gid, gidIndex)
		connectPair(t, receivers[i], senders[i], gid, gidIndex)
	}
	if _, err := receivers[0].PostRecv([]wr.RecvWR{{ID: 1}}); err == nil {
		t.Error("posting a receive to a QP that uses an SRQ was accepted")
	}
	recvs := make([]wr.RecvWR, 8)
	for i := range recvs {
		recvs[i] = wr.RecvWR{ID: uint64(100 + i), SGList: []wr.SGE{buf.SGE(1024*(i+1), 1024)}}
	}
	if _, err := srq.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(uverbs.SRQAttr{Limit: 4}, uverbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		copy(buf.Bytes()[i*8:], fmt.Sprintf("msg%d....", i))
		if _, err := senders[i%2].PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{buf.SGE(i*8, 8)}}}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := waitWC(t, cq, 10)
	byQP := map[uint32]int{}
	for _, c := range wcs {
		if c.Status != wr.Success {
			t.Fatalf("completion %+v: %v", c, c.Status)
		}
		if c.Opcode == wr.WCRecv {
			byQP[c.QPNum]++
			slot := int(c.ID - 100)
			if got := buf.Bytes()[1024*(slot+1) : 1024*(slot+1)+3]; string(got) != "msg" {
				t.Errorf("receive %d holds %q", c.ID, got)
			}
		}
	}
	if byQP[receivers[0].Num()] != 3 || byQP[receivers[1].Num()] != 2 {
		t.Errorf("receives per QP %v; want 3 on QP %d and 2 on QP %d", byQP, receivers[0].Num(), receivers[1].Num())
	}
	// 3 receives are left, fewer than the limit of 4: the event fires.
	ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ctx.GetAsyncEvent(ectx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != uverbs.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("async event %v; want SRQ limit reached on our SRQ", ev)
	}
	if a, err := srq.Query(); err != nil || a.Limit != 0 {
		t.Errorf("SRQ after its limit event: %+v, %v; want the limit disarmed (0)", a, err)
	}
	// A QP on an SRQ that enters the error state reports its last WQE.
	// rxe raises the event since Linux 6.x (measured: absent on 6.1,
	// present on 6.12 and 7.2).
	t.Run("LastWQEReached", func(t *testing.T) {
		if !kernelAtLeast(t, 6, 12) {
			t.Skipf("rxe on Linux %s does not raise IBV_EVENT_QP_LAST_WQE_REACHED (measured on 6.12 and later)", kernelRelease(t))
		}
		errAttr := qp.Attr{State: qp.StateErr}
		if err := receivers[1].Modify(&errAttr, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		ev, err := ctx.GetAsyncEvent(ectx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != uverbs.EventQPLastWQEReached || ev.QP != receivers[1] {
			t.Fatalf("async event %v; want last WQE reached on QP %d", ev, receivers[1].Num())
		}
	})
}

// testQPTimeout is the local ACK timeout of the tests' RC QPs: 18, about
// 1.07 s, where qp.RTSAttrs sets pingpong's 14 (67 ms). An emulated VM on a
// loaded host stalls for longer than 67 ms, and each stall then makes rxe
// retransmit what it had sent; in one full run on 6.1 a send that its peer
// had received and acted on never completed after such retransmissions (the
// retransmit timer fired every 68 ms for the 20 s the test waited). The
// tests here are not about retransmission.
const testQPTimeout = 18

// testRTSAttrs is qp.RTSAttrs with the tests' timeout for RC.
func testRTSAttrs(typ qp.Type) (qp.Attr, qp.AttrMask) {
	a, m := qp.RTSAttrs(typ, 0)
	if typ == qp.RC {
		a.Timeout = testQPTimeout
	}
	return a, m
}

// connectPair moves q to RTS, talking to peer through the device's GID.
func connectPair(t testing.TB, q, peer *uverbs.QP, gid [16]byte, gidIndex uint8) {
	t.Helper()
	typ := q.Type()
	remote := qp.Remote{QPN: peer.Num(), GID: gid, SGIDIndex: gidIndex, PortNum: 1}
	if typ == qp.UD {
		remote = qp.Remote{}
	}
	for _, step := range []func() (qp.Attr, qp.AttrMask){
		func() (qp.Attr, qp.AttrMask) { return qp.InitAttrs(typ, 1, 0, allAccess, testQKey) },
		func() (qp.Attr, qp.AttrMask) { return qp.RTRAttrs(typ, remote, uint8(uverbs.MTU1024)) },
		func() (qp.Attr, qp.AttrMask) { return testRTSAttrs(typ) },
	} {
		attr, mask := step()
		if err := q.Modify(&attr, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeviceEventsManyCQs arms several CQs on one completion channel and
// waits for each one's event.
func TestDeviceEventsManyCQs(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, err := r.ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	const n = 4
	var cqs [n]*uverbs.CQ
	var qps [n]*uverbs.QP
	for i := range cqs {
		if cqs[i], err = r.ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Channel: ch}); err != nil {
			t.Fatal(err)
		}
		defer cqs[i].Close()
		// qps[i] receives into cqs[i]; its peer sends to it below.
		if qps[i], err = r.pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.a.cq, RecvCQ: cqs[i],
			Cap: provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		defer qps[i].Close()
	}
	var peers [n]*uverbs.QP
	for i := range peers {
		if peers[i], err = r.pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.b.cq, RecvCQ: r.b.cq,
			Cap: provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		defer peers[i].Close()
		connectPair(t, qps[i], peers[i], r.gid, r.gidIndex)
		connectPair(t, peers[i], qps[i], r.gid, r.gidIndex)
		if _, err := qps[i].PostRecv([]wr.RecvWR{{ID: uint64(i), SGList: []wr.SGE{r.a.buf.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := cqs[i].ReqNotify(false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range peers {
		if _, err := peers[i].PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpSend, SGList: []wr.SGE{r.b.buf.SGE(0, 16)}}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[*uverbs.CQ]bool{}
	ectx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(seen) < n {
		cq, err := ch.GetEvent(ectx)
		if err != nil {
			t.Fatalf("after events for %d CQs: %v", len(seen), err)
		}
		seen[cq] = true
		cq.AckEvents(1)
	}
	for i, cq := range cqs {
		if !seen[cq] {
			t.Errorf("no event for CQ %d", i)
		}
		wantOK(t, waitWC(t, cq, 1)[0], uint64(i), wr.WCRecv)
	}
	// With nothing armed, a wait ends with its context.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := ch.GetEvent(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting on a quiet channel: %v, want deadline exceeded", err)
	}
}

// TestDeviceDestroyFlushes closes a QP with receives outstanding: they come
// back flushed.
func TestDeviceDestroyFlushes(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 1, SGList: []wr.SGE{r.b.buf.SGE(0, 64)}}, {ID: 2, SGList: []wr.SGE{r.b.buf.SGE(64, 64)}}, {ID: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.qp.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range waitWC(t, r.b.cq, 3) {
		if c.Status != wr.WRFlushErr || c.ID != uint64(i+1) {
			t.Errorf("after destroy: completion %+v (%v), want ID %d flushed", c, c.Status, i+1)
		}
	}
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 4}}); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("post on a closed QP: %v, want ErrClosed", err)
	}
}

// TestDeviceDeregInUse deregisters memory that posted work requests still
// name: the process must not crash, and later requests fail cleanly.
func TestDeviceDeregInUse(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 16, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	extra, err := mr.New(r.pd, 1<<20, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	var wrs []wr.SendWR
	for i := 0; i < 8; i++ {
		wrs = append(wrs, wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{extra.SGE(0, 1<<15)}, RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey})
	}
	if _, err := r.a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	lkey := extra.LKey
	if err := extra.Close(); err != nil { // deregister and unmap while in flight
		t.Fatal(err)
	}
	done := waitWC(t, r.a.cq, len(wrs))
	failed := 0
	for _, c := range done {
		if c.Status != wr.Success {
			failed++
		}
	}
	t.Logf("%d of %d writes completed with errors after deregistration", failed, len(done))
	// The QP may be in error now; either way a post naming the dead key is
	// accepted or refused without a crash, and completes with an error.
	fresh := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if _, err := fresh.a.qp.PostSend([]wr.SendWR{{ID: 9, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
		SGList: []wr.SGE{{Addr: fresh.a.buf.Addr(), Length: 8, LKey: lkey}}, RemoteAddr: fresh.b.buf.Addr(), RKey: fresh.b.buf.RKey}}); err != nil {
		t.Fatal(err)
	}
	if c := waitWC(t, fresh.a.cq, 1)[0]; c.Status == wr.Success {
		t.Errorf("a write through a deregistered key succeeded")
	}
}

// overrunRig is a context with a CQ of two entries (small), one of 64
// (big), a region, and two RC QPs connected to each other: a, whose
// completions of one kind go to small, and b, all on big.
type overrunRig struct {
	ctx        *uverbs.Context
	small, big *uverbs.CQ
	buf        *mr.Region
	a, b       *uverbs.QP
}

// newOverrunRig makes the rig; smallRecv puts a's receive completions on
// small (else its send completions).
func newOverrunRig(t *testing.T, smallRecv bool) *overrunRig {
	name := testenv.RequireDevice(t)
	var r overrunRig
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r.ctx, err = uverbs.Open(name)
	must(err)
	t.Cleanup(func() { r.ctx.Close() })
	pd, err := r.ctx.AllocPD()
	must(err)
	t.Cleanup(func() { pd.Close() })
	gidIndex, gid := roceV2GID(t, r.ctx)
	r.small, err = r.ctx.CreateCQ(uverbs.CQAttr{CQE: 2})
	must(err)
	t.Cleanup(func() { r.small.Close() })
	r.big, err = r.ctx.CreateCQ(uverbs.CQAttr{CQE: 64})
	must(err)
	t.Cleanup(func() { r.big.Close() })
	r.buf, err = mr.New(pd, 4096, allAccess)
	must(err)
	t.Cleanup(func() { r.buf.Close() })
	caps := provider.QPCaps{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}
	sendCQ, recvCQ := r.small, r.big
	if smallRecv {
		sendCQ, recvCQ = r.big, r.small
	}
	r.a, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: sendCQ, RecvCQ: recvCQ, Cap: caps})
	must(err)
	t.Cleanup(func() { r.a.Close() })
	r.b, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.big, RecvCQ: r.big, Cap: caps})
	must(err)
	t.Cleanup(func() { r.b.Close() })
	connectPair(t, r.a, r.b, gid, gidIndex)
	connectPair(t, r.b, r.a, gid, gidIndex)
	return &r
}

// pollUntilOverrun polls cq one completion at a time until Poll reports
// ErrCQOverrun, and returns how many completions came first.
func pollUntilOverrun(t *testing.T, cq *uverbs.CQ) int {
	t.Helper()
	one := make([]wr.Completion, 1)
	got := 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		k, err := cq.Poll(one)
		if err != nil {
			if !errors.Is(err, uverbs.ErrCQOverrun) || !errors.Is(err, unix.EOVERFLOW) {
				t.Fatalf("Poll after the overrun: %v; want ErrCQOverrun (EOVERFLOW)", err)
			}
			return got
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no ErrCQOverrun 10 s after the CQ of %d overran (%d polled)", cq.CQE(), got)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestDeviceCQOverrun lets more completions arrive than the CQ holds without
// polling: the library must report it, as a CQ error event and as Poll's
// error once the CQ is drained, and never hang or crash.
func TestDeviceCQOverrun(t *testing.T) {
	r := newOverrunRig(t, false)
	ctx, small, buf, a := r.ctx, r.small, r.buf, r.a
	n := small.CQE() + 8
	wrs := make([]wr.SendWR, n)
	for i := range wrs {
		wrs[i] = wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{buf.SGE(0, 8)}, RemoteAddr: buf.Addr(), RKey: buf.RKey}
	}
	if _, err := a.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ctx.GetAsyncEvent(ectx)
	if err != nil {
		t.Fatalf("no async event after overrunning a CQ of %d with %d completions: %v", small.CQE(), n, err)
	}
	if ev.Type != uverbs.EventCQErr || ev.CQ != small {
		t.Fatalf("async event %v; want a CQ error on the small CQ", ev)
	}
	// A slow poller learns of the loss from Poll itself: the completions
	// the CQ holds come first, then ErrCQOverrun.
	got := pollUntilOverrun(t, small)
	if got >= n {
		t.Errorf("all %d completions polled from a CQ of %d", got, small.CQE())
	}
	t.Logf("overrun reported as %v; %d of %d completions polled, then %v", ev, got, n, uverbs.ErrCQOverrun)
}

// Receive completions that overflow a slow poller's CQ are reported the
// same way.
func TestDeviceCQOverrunRecv(t *testing.T) {
	r := newOverrunRig(t, true)
	n := r.small.CQE() + 8
	for i := 0; i < n; i++ {
		if _, err := r.a.PostRecv([]wr.RecvWR{{ID: uint64(i), SGList: []wr.SGE{r.buf.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := r.b.PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{r.buf.SGE(64, 8)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// rxe stops taking the sends once the receiver's CQ overran (the
	// sender sees them time out): only the receiver's CQ tells.
	got := pollUntilOverrun(t, r.small)
	if got >= n {
		t.Errorf("all %d receive completions polled from a CQ of %d", got, r.small.CQE())
	}
	t.Logf("%d receives, %d completions polled from a CQ of %d, then ErrCQOverrun", n, got, r.small.CQE())
}

// kernelRelease returns the running kernel's release, e.g. "6.1.0-57-amd64".
func kernelRelease(t testing.TB) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast reports whether the running kernel is major.minor or newer.
// Tests use it only for rxe behaviour measured to differ between kernels.
func kernelAtLeast(t testing.TB, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(kernelRelease(t), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", kernelRelease(t), err)
	}
	return ma > major || (ma == major && mi >= minor)
}

// TestDeviceCloseContextFirst closes a context while its objects are still
// open: they report ErrClosed afterwards, and closing them is harmless.
func TestDeviceCloseContextFirst(t *testing.T) {
	name := testenv.RequireDevice(t)
	ctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 8})
	if err != nil {
		t.Fatal(err)
	}
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: provider.QPCaps{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Poll(make([]wr.Completion, 1)); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("Poll after the context closed: %v", err)
	}
	if _, err := q.PostRecv([]wr.RecvWR{{ID: 1}}); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("PostRecv after the context closed: %v", err)
	}
	for what, err := range map[string]error{"QP": q.Close(), "CQ": cq.Close(), "PD": pd.Close()} {
		if err != nil {
			t.Errorf("closing the %s after its context: %v", what, err)
		}
	}
}
