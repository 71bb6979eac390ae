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

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceEventsManyCQs arms several CQs on one completion channel and
// waits for each one's event.
func TestDeviceEventsManyCQs(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, err := r.Ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	const n = 4
	var cqs [n]*uverbs.CQ
	var qps [n]*uverbs.QP
	for i := range cqs {
		if cqs[i], err = r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Channel: ch}); err != nil {
			t.Fatal(err)
		}
		defer cqs[i].Close()
		// qps[i] receives into cqs[i]; its peer sends to it below.
		if qps[i], err = r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.A.CQ, RecvCQ: cqs[i],
			Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		defer qps[i].Close()
	}
	var peers [n]*uverbs.QP
	for i := range peers {
		if peers[i], err = r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.B.CQ, RecvCQ: r.B.CQ,
			Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		defer peers[i].Close()
		rdmatest.ConnectQPs(t, qps[i], peers[i], r.GIDIndex, r.GID)
		if _, err := qps[i].PostRecv([]wr.RecvWR{{ID: uint64(i), SGList: []wr.SGE{r.A.Buf.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := cqs[i].ReqNotify(false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range peers {
		if _, err := peers[i].PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpSend, SGList: []wr.SGE{r.B.Buf.SGE(0, 16)}}}); err != nil {
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
		rdmatest.WantOK(t, rdmatest.WaitWC(t, cq, 1)[0], uint64(i), wr.WCRecv)
	}
	// With nothing armed, a wait ends with its context.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := ch.GetEvent(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting on a quiet channel: %v, want deadline exceeded", err)
	}
}

// newEventPair makes a completion channel, a CQ reporting to it, and two
// connected RC QPs: rq receives on that CQ, sq sends from r.b's CQ.
func newEventPair(t *testing.T, r *rdmatest.Pair) (*uverbs.CompChannel, *uverbs.CQ, *uverbs.QP, *uverbs.QP) {
	t.Helper()
	ch, err := r.Ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	cq, err := r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	rq, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.A.CQ, RecvCQ: cq, Caps: caps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rq.Close() })
	sq, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.B.CQ, RecvCQ: r.B.CQ, Caps: caps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	rdmatest.ConnectQPs(t, rq, sq, r.GIDIndex, r.GID)
	return ch, cq, rq, sq
}

// TestDeviceSolicitedAndParkedWaiters arms CQs for solicited events only,
// and checks that goroutines waiting on many channels hold no OS threads.
func TestDeviceSolicitedAndParkedWaiters(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
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
	rdmatest.WantOK(t, rdmatest.WaitWC(t, cq, 1)[0], 1, wr.WCRecv)
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
	rdmatest.WantOK(t, rdmatest.WaitWC(t, cq, 1)[0], 2, wr.WCRecv)

	// Goroutines parked on completion channels hold no thread each.
	const waiters = 32
	before := threads(t)
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		c, err := r.Ctx.NewCompChannel()
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

// threads returns the number of the process's OS threads.
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

// eventRoundTrip returns a round trip of one message from sq to rq,
// whose receive completes on cq (on channel ch): arm, send, wait, poll.
// With *queued set, the wait begins only once the event is queued (the
// channel's descriptor is readable): rxe completes a send in the
// doorbell's system call on some kernels and in a worker on others.
func eventRoundTrip(t *testing.T, r *rdmatest.Pair, ch *uverbs.CompChannel, cq *uverbs.CQ, rq, sq *uverbs.QP,
	queued *bool, wait func() (*uverbs.CQ, error)) func() {
	recv := []wr.RecvWR{{ID: 1}}
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled}}
	wc := make([]wr.Completion, 1)
	return func() {
		t.Helper()
		if _, err := rq.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if _, err := sq.PostSend(send); err != nil {
			t.Fatal(err)
		}
		if *queued {
			waitReadable(t, ch)
		}
		got, err := wait()
		if err != nil || got != cq {
			t.Fatalf("wait for the event: %v, %v", got, err)
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
			if n, err = r.B.CQ.Poll(wc); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDeviceGetEventDirect waits for completion events in the kernel on
// the calling thread: events arrive as with GetEvent, without allocating;
// a context ends the wait; closing the channel ends a wait in progress; a
// GC meanwhile is not held up (a context's wait gives the thread back each
// millisecond, a sleep with no bound when the runtime's signal asks).
func TestDeviceGetEventDirect(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, cq, rq, sq := newEventPair(t, r)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queued := false
	roundTrip := eventRoundTrip(t, r, ch, cq, rq, sq, &queued, func() (*uverbs.CQ, error) { return ch.GetEventDirect(ctx) })
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

	// With a context that is never done, the channel's read deadline
	// bounds the wait, and moving it into the past ends a wait under way.
	start = time.Now()
	ch.SetReadDeadline(start.Add(100 * time.Millisecond))
	if _, err := ch.GetEventDirect(context.Background()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("quiet channel with a read deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Errorf("the wait ended %v after it began; the deadline was 100ms", d)
	}
	ch.SetReadDeadline(time.Time{})
	derr := make(chan error, 1)
	go func() {
		_, err := ch.GetEventDirect(context.Background())
		derr <- err
	}()
	// With neither a deadline nor a context that can be done, the sleep
	// has no bound (no kernel timer); a GC meanwhile completes (the
	// runtime's preemption signal ends the sleep), and the sleep goes on.
	waitSleeping(t, ch)
	start = time.Now()
	runtime.GC()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a GC during a sleep with no bound took %v", d)
	}
	waitSleeping(t, ch)
	select {
	case err := <-derr:
		t.Fatalf("the wait ended without an event, a deadline or Close: %v", err)
	default:
	}
	pastDeadlineEndsWait(t, ch, derr)
	// A deadline set in the future while a wait sleeps with no bound ends
	// it then.
	ch.SetReadDeadline(time.Time{})
	go func() {
		_, err := ch.GetEventDirect(context.Background())
		derr <- err
	}()
	waitSleeping(t, ch)
	start = time.Now()
	ch.SetReadDeadline(start.Add(100 * time.Millisecond))
	select {
	case err := <-derr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("wait given a deadline while it slept: %v", err)
		}
		if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
			t.Errorf("the wait ended %v after it was given a deadline 100ms away", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline given while the wait slept with no bound did not end it")
	}
	ch.SetReadDeadline(time.Time{})

	// The quiet waits above found no event at their first read, so the
	// channel now sleeps before it reads; round trips whose event is
	// queued before the wait are still delivered, and the periodic first
	// read finds them queued, which turns the order back.
	if m := uverbs.DirectMiss(ch); m < 2 {
		t.Errorf("after quiet waits the miss count is %d, want 2 or more (sleep first)", m)
	}
	queued = true
	for range 4 * 8 {
		roundTrip()
	}
	queued = false
	if m := uverbs.DirectMiss(ch); m != 0 {
		t.Errorf("after round trips whose events were queued the miss count is %d, want 0 (read first)", m)
	}

	// Closing the channel ends a wait in progress, one with no bound and
	// one that sleeps until a deadline an hour away.
	c2 := closeEndsWait(t, r.Ctx, time.Time{})
	closeEndsWait(t, r.Ctx, time.Now().Add(time.Hour))
	if err := c2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c2.SyscallConn(); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("closed channel's SyscallConn: %v, want ErrClosed", err)
	}
}

// TestDeviceGetEventPoller waits for completion events through the
// runtime poller (GetEvent), whose read of the channel is a raw read(2)
// in the file's SyscallConn: events arrive, queued or not when the wait
// begins, without allocating; the read deadline bounds a wait with a
// context that is never done, and moving it into the past ends one under
// way; Close ends one under way with ErrClosed.
func TestDeviceGetEventPoller(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	ch, cq, rq, sq := newEventPair(t, r)

	// A deadline instead of a context, so that the round trip allocates
	// nothing; a lost event fails the test rather than hanging it.
	ch.SetReadDeadline(time.Now().Add(30 * time.Second))
	queued := false
	roundTrip := eventRoundTrip(t, r, ch, cq, rq, sq, &queued, func() (*uverbs.CQ, error) { return ch.GetEvent(context.Background()) })
	roundTrip()
	if a := testing.AllocsPerRun(20, roundTrip); a != 0 {
		t.Errorf("a round trip with GetEvent allocates %v times", a)
	}
	queued = true
	for range 8 {
		roundTrip()
	}

	start := time.Now()
	ch.SetReadDeadline(start.Add(100 * time.Millisecond))
	_, err := ch.GetEvent(context.Background())
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("quiet channel with a read deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if want := "uverbs: get CQ event: read comp_channel: i/o timeout"; err.Error() != want {
		t.Errorf("quiet channel with a read deadline: %q, want %q (File.Read's words)", err, want)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Errorf("the wait ended %v after it began; the deadline was 100ms", d)
	}
	ch.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(context.Background())
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	pastDeadlineEndsWait(t, ch, errc)

	c2, err := r.Ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := c2.GetEvent(context.Background())
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
	if _, err := c2.GetEvent(context.Background()); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("GetEvent on a closed channel: %v, want ErrClosed", err)
	}
}

// pastDeadlineEndsWait moves ch's read deadline into the past while a
// wait is under way, and checks that the wait, whose error comes on errc,
// ends at once with os.ErrDeadlineExceeded.
func pastDeadlineEndsWait(t *testing.T, ch *uverbs.CompChannel, errc <-chan error) {
	t.Helper()
	start := time.Now()
	ch.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("wait whose deadline moved into the past: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the wait ended %v after its deadline moved into the past", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline moved into the past did not end the wait")
	}
}

// closeEndsWait opens a channel with read deadline dl, closes it while a
// GetEventDirect sleeps on it, and checks that the wait ends at once with
// ErrClosed. It returns the closed channel.
func closeEndsWait(t *testing.T, ctx *uverbs.Context, dl time.Time) *uverbs.CompChannel {
	t.Helper()
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	ch.SetReadDeadline(dl)
	errc := make(chan error, 1)
	go func() {
		_, err := ch.GetEventDirect(context.Background())
		errc <- err
	}()
	waitSleeping(t, ch)
	start := time.Now()
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with a wait sleeping (deadline %v)", d, dl)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, uverbs.ErrClosed) {
			t.Errorf("wait on a closed channel (deadline %v): %v, want ErrClosed", dl, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("closing the channel did not end the wait (deadline %v)", dl)
	}
	return ch
}

// waitSleeping waits until a GetEventDirect on ch sleeps longer than a
// slice (with no bound, or until a deadline); with
// GODEBUG=asyncpreemptoff=1, where it sleeps in slices, a while.
func waitSleeping(t *testing.T, ch *uverbs.CompChannel) {
	t.Helper()
	if !uverbs.DirectUnbounded {
		time.Sleep(50 * time.Millisecond)
		if uverbs.DirectSleeping(ch) {
			t.Fatal("a direct sleep outlasts a slice with GODEBUG=asyncpreemptoff=1")
		}
		return
	}
	for start := time.Now(); !uverbs.DirectSleeping(ch); time.Sleep(time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("GetEventDirect with context.Background did not sleep longer than a slice")
		}
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
	ctx, pd := rdmatest.OpenPD(t)
	r := overrunRig{ctx: ctx}
	var err error
	closeLater := func(c interface{ Close() error }) { t.Cleanup(func() { c.Close() }) }
	r.small, err = ctx.CreateCQ(uverbs.CQAttr{CQE: 2})
	rdmatest.Must(t, err)
	closeLater(r.small)
	r.big, err = ctx.CreateCQ(uverbs.CQAttr{CQE: 64})
	rdmatest.Must(t, err)
	closeLater(r.big)
	r.buf, err = mr.New(pd, 4096, rdmatest.AllAccess)
	rdmatest.Must(t, err)
	closeLater(r.buf)
	caps := qp.Caps{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}
	sendCQ, recvCQ := r.small, r.big
	if smallRecv {
		sendCQ, recvCQ = r.big, r.small
	}
	r.a, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: sendCQ, RecvCQ: recvCQ, Caps: caps})
	rdmatest.Must(t, err)
	closeLater(r.a)
	r.b, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.big, RecvCQ: r.big, Caps: caps})
	rdmatest.Must(t, err)
	closeLater(r.b)
	gidIndex, gid := rdmatest.RoCEv2GID(t, ctx)
	rdmatest.ConnectQPs(t, r.a, r.b, gidIndex, gid)
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
		wrs[i] = wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{buf.SGE(0, 8)}, Remote: wr.Remote{Addr: buf.Addr(), RKey: buf.RKey()}}
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

// waitReadable waits until ch's descriptor is readable: an event is
// queued.
func waitReadable(t *testing.T, ch *uverbs.CompChannel) {
	t.Helper()
	rc, err := ch.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	cerr := rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if n, err = unix.Poll(fds, 10_000); err != unix.EINTR {
				return
			}
		}
	})
	if cerr != nil || err != nil || n != 1 {
		t.Fatalf("waiting for the channel to be readable: %v, %v, %d ready", cerr, err, n)
	}
}

// Pending says whether Poll may find something, for a single-threaded CQ
// and a shared one: false while the ring is empty, true once a completion
// is there and until it is polled, true after an overrun (Poll's error)
// and after Close (ErrClosed).
func TestDeviceCQPending(t *testing.T) {
	r := newOverrunRig(t, false)
	if r.small.Pending() || r.big.Pending() {
		t.Fatal("new CQs are Pending")
	}
	w := wr.SendWR{ID: 7, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.buf.SGE(0, 8)}, Remote: wr.Remote{Addr: r.buf.Addr(), RKey: r.buf.RKey()}}
	if _, err := r.a.PostSend([]wr.SendWR{w}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !r.small.Pending(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the write's completion never made its CQ Pending")
		}
	}
	one := make([]wr.Completion, 1)
	if n, err := r.small.Poll(one); n != 1 || err != nil || one[0].ID != 7 {
		t.Fatalf("Poll of a Pending CQ: %d, %v, %+v", n, err, one[0])
	}
	if r.small.Pending() {
		t.Error("Pending after its one completion was polled")
	}
	// Overrun: more completions than the CQ holds, then Pending until
	// Poll has reported it.
	wrs := make([]wr.SendWR, r.small.CQE()+8)
	for i := range wrs {
		wrs[i] = w
	}
	if _, err := r.a.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	pollUntilOverrun(t, r.small)
	if !r.small.Pending() {
		t.Error("an overrun CQ is not Pending: Poll has ErrCQOverrun to say")
	}
	for _, single := range []bool{true, false} {
		cq, err := r.ctx.CreateCQ(uverbs.CQAttr{CQE: 4, SingleThreaded: single})
		rdmatest.Must(t, err)
		if cq.Pending() {
			t.Errorf("new CQ (single-threaded %v) is Pending", single)
		}
		cq.Close()
		if !cq.Pending() {
			t.Errorf("closed CQ (single-threaded %v) is not Pending: Poll has ErrClosed to say", single)
		}
		if _, err := cq.Poll(one); !errors.Is(err, uverbs.ErrClosed) {
			t.Errorf("Poll of a closed CQ: %v, want ErrClosed", err)
		}
	}
	var nilCQ *uverbs.CQ
	if !nilCQ.Pending() {
		t.Error("a nil CQ is not Pending: Poll has its error to say")
	}
}
