package uverbs_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceQueryQPAndGoMemory queries a connected QP, then registers
// ordinary Go memory and has the peer write into it.
func TestDeviceQueryQPAndGoMemory(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	a, init, err := r.a.qp.Query(qp.AttrState | qp.AttrDestQPN | qp.AttrCap | qp.AttrPathMTU | qp.AttrAV | qp.AttrTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != qp.StateRTS || a.DestQPNum != r.b.qp.Num() || a.PathMTU != uint8(uverbs.MTU1024) || a.Timeout != testQPTimeout {
		t.Errorf("query: state %v dest %d mtu %d timeout %d; want RTS, %d, 3, %d", a.State, a.DestQPNum, a.PathMTU, a.Timeout, r.b.qp.Num(), testQPTimeout)
	}
	if !a.AHAttr.IsGlobal || a.AHAttr.DGID != r.gid || init.Cap.MaxSendWR < 8 {
		t.Errorf("query: AH %+v, init %+v", a.AHAttr, init)
	}

	goMem := make([]byte, 8192) // Go heap memory, not from package mr
	gmr, err := r.pd.RegMR(goMem, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer gmr.Close()
	copy(r.a.buf.Bytes(), "into the Go heap")
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
		SGList: []wr.SGE{r.a.buf.SGE(0, 16)}, RemoteAddr: gmr.Addr() + 100, RKey: gmr.RKey}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 1, wr.WCRDMAWrite)
	if got := string(goMem[100:116]); got != "into the Go heap" {
		t.Fatalf("Go memory holds %q", got)
	}
	if _, err := r.pd.RegMR(nil, allAccess); err == nil {
		t.Error("registering no memory succeeded")
	}
	if _, err := r.pd.RegMR(goMem, wr.RemoteWrite); err == nil {
		t.Error("remote write without local write was accepted")
	}
}

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// TestDeviceSolicitedAndParkedWaiters arms CQs for solicited events only,
// and checks that goroutines waiting on many channels hold no OS threads.
// newEventPair makes a completion channel, a CQ reporting to it, and two
// connected RC QPs: rq receives on that CQ, sq sends from r.b's CQ.
func newEventPair(t *testing.T, r *rig) (*uverbs.CompChannel, *uverbs.CQ, *uverbs.QP, *uverbs.QP) {
	t.Helper()
	ch, err := r.ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	cq, err := r.ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	caps := provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	rq, err := r.pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.a.cq, RecvCQ: cq, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rq.Close() })
	sq, err := r.pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.b.cq, RecvCQ: r.b.cq, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	connectPair(t, rq, sq, r.gid, r.gidIndex)
	connectPair(t, sq, rq, r.gid, r.gidIndex)
	return ch, cq, rq, sq
}

func TestDeviceSolicitedAndParkedWaiters(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, cq, rq, sq := newEventPair(t, r)
	if _, err := rq.PostRecv([]wr.RecvWR{{ID: 1}, {ID: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	// An unsolicited send completes but raises no event...
	if _, err := sq.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, cq, 1)[0], 1, wr.WCRecv)
	quiet, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ch.GetEvent(quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("event for an unsolicited message: %v", err)
	}
	// ...a solicited one does.
	if _, err := sq.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSend, Flags: wr.Solicited}}); err != nil {
		t.Fatal(err)
	}
	ectx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	got, err := ch.GetEvent(ectx)
	if err != nil || got != cq {
		t.Fatalf("solicited event: %v, %v", got, err)
	}
	got.AckEvents(1)
	wantOK(t, waitWC(t, cq, 1)[0], 2, wr.WCRecv)

	// Goroutines parked on completion channels hold no thread each.
	const waiters = 32
	before := threads(t)
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		c, err := r.ctx.NewCompChannel()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.GetEvent(wctx); !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: %v", err)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	during := threads(t)
	stop()
	wg.Wait()
	if during-before > 4 {
		t.Errorf("%d goroutines waiting for events took %d OS threads (%d → %d)", waiters, during-before, before, during)
	}
	t.Logf("threads with %d waiters parked: %d → %d", waiters, before, during)
}

// TestDeviceGetEventDirect waits for completion events in the kernel on
// the calling thread: events arrive as with GetEvent, without allocating;
// a context ends the wait; closing the channel ends a wait in progress; a
// GC meanwhile is not held up (the wait gives the thread back each
// millisecond even without preemption signals).
func TestDeviceGetEventDirect(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, cq, rq, sq := newEventPair(t, r)

	recv := []wr.RecvWR{{ID: 1}}
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled}}
	wc := make([]wr.Completion, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// One message: arm, send, wait in the kernel, poll.
	roundTrip := func() {
		if _, err := rq.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if _, err := sq.PostSend(send); err != nil {
			t.Fatal(err)
		}
		got, err := ch.GetEventDirect(ctx)
		if err != nil || got != cq {
			t.Fatalf("GetEventDirect: %v, %v", got, err)
		}
		got.AckEvents(1)
		for n := 0; n == 0; {
			if n, err = cq.Poll(wc); err != nil {
				t.Fatal(err)
			}
		}
		if wc[0].Status != wr.Success || wc[0].Opcode != wr.WCRecv {
			t.Fatalf("completion %+v", wc[0])
		}
		for n := 0; n == 0; { // the sender's completion
			if n, err = r.b.cq.Poll(wc); err != nil {
				t.Fatal(err)
			}
		}
	}
	roundTrip()
	if a := testing.AllocsPerRun(20, roundTrip); a != 0 {
		t.Errorf("a round trip with GetEventDirect allocates %v times", a)
	}

	// A context's deadline ends a wait, and a GC meanwhile completes.
	gcDone := make(chan time.Duration, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		runtime.GC()
		gcDone <- time.Since(start)
	}()
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := ch.GetEventDirect(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("quiet channel: %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the wait ended %v after it began; its context's deadline was 300ms", d)
	}
	select {
	case d := <-gcDone:
		t.Logf("GC during a direct wait took %v", d)
	case <-time.After(5 * time.Second):
		t.Error("a GC did not complete while a goroutine waited in GetEventDirect")
	}

	// Closing the channel ends a wait in progress.
	c2, err := r.ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c2.GetEventDirect(context.Background())
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, uverbs.ErrClosed) {
			t.Errorf("wait on a closed channel: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the channel did not end the wait")
	}
	if c2.Fd() != -1 {
		t.Errorf("closed channel's Fd is %d, want -1", c2.Fd())
	}
}
