package cm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/wr"
)

// sentPkts reads rxe0's count of packets sent: the probes show in it.
func sentPkts(t testing.TB) int {
	t.Helper()
	n, err := rdmatest.HWCounter(testenv.DeviceName(), "sent_pkts")
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// TestDeviceKeepAlive checks the liveness check end to end: bad settings
// refused, probes that cost the program nothing on a live connection (no
// completion of theirs surfaces, the program's own come back in order even
// when the check polled them first), and a peer whose QP vanished without
// a word reported within the bound: flushed work, a DISCONNECTED event
// with ETIMEDOUT that wakes a waiting GetEvent, and posts that fail with
// ETIMEDOUT.
func TestDeviceKeepAlive(t *testing.T) {
	ctx := rdmatest.Context(t)
	sbuf := rdmatest.Alloc(t, 4096)
	var smsg interface{ Close() error }
	p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
		m := rdmatest.Reg(t, s.RegMsgs, sbuf)
		smsg = m
		for i := range 10 {
			rdmatest.Must(t, s.PostRecv(uint64(100+i), sbuf[i*64:(i+1)*64], m))
		}
	})
	defer smsg.Close()
	c, s := p.Client, p.Server
	cbuf, cmsg := rdmatest.Msgs(t, c, 4096)

	wantErrno(t, "negative interval", c.SetKeepAlive(-time.Second, time.Second), unix.EINVAL)
	wantErrno(t, "no timeout", c.SetKeepAlive(time.Millisecond, 0), unix.EINVAL)

	const interval, timeout = 10 * time.Millisecond, 2 * time.Second
	before := sentPkts(t)
	rdmatest.Must(t, c.SetKeepAlive(interval, timeout))

	// The program's sends complete as they would without the check.
	for i := range 5 {
		rdmatest.Must(t, c.PostSend(uint64(i+1), cbuf[:32], cmsg, wr.Signaled))
		wc, err := c.GetSendComp(ctx)
		wantComp(t, "send", wc, err, uint64(i+1), wr.WCSend)
	}
	// Completions nobody polls while a probe is overdue are polled by
	// the check, and still come back to the program, in order.
	for i := range 5 {
		rdmatest.Must(t, c.PostSend(uint64(i+11), cbuf[:32], cmsg, wr.Signaled))
	}
	time.Sleep(timeout) // past timeout/2: the check harvests the CQ
	for i := range 5 {
		wc, err := c.GetSendComp(ctx)
		wantComp(t, "send after harvest", wc, err, uint64(i+11), wr.WCSend)
	}
	for range 10 {
		wc, err := s.GetRecvComp(ctx)
		if err != nil || wc.Opcode != wr.WCRecv {
			t.Fatalf("server receive: %+v, %v", wc, err)
		}
	}
	// No probe completion surfaces, while the probes go out: more than
	// 10 packets beyond the 10 sends, their ACKs and the server's
	// (loopback counts both sides). A probe completes only when its
	// completion is polled (here by GetSendComp) or harvested, so the
	// count grows while the program waits; a loaded machine runs fewer
	// waits per second, hence the wait in slices, up to 10 s.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		idle, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		wc, err := c.GetSendComp(idle)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("idle GetSendComp: %+v, %v; want the deadline", wc, err)
		}
		if n = sentPkts(t) - before; n >= 40 || time.Now().After(deadline) {
			break
		}
	}
	if n < 40 {
		t.Errorf("%d packets sent with the keepalive on for over 10 s at a 10 ms interval; want probes", n)
	}

	// The server's QP goes away without a disconnect: nothing answers the
	// probes from now on, as when the peer's machine is powered off.
	rdmatest.Must(t, c.PostRecv(7, cbuf[1024:1088], cmsg))
	events := make(chan *cm.Event, 1)
	go func() {
		ev, err := c.Channel().GetEvent(ctx)
		if err != nil {
			t.Errorf("GetEvent: %v", err)
		}
		events <- ev
	}()
	time.Sleep(50 * time.Millisecond) // GetEvent waits in the kernel
	t0 := time.Now()
	rdmatest.Must(t, s.DestroyQP())
	wc, err := c.GetRecvComp(ctx)
	took := time.Since(t0)
	if wc.ID != 7 || wc.Status != wr.WRFlushErr {
		t.Fatalf("receive after the peer vanished: %+v, %v; want 7 flushed", wc, err)
	}
	// The bound is interval + timeout from the first unanswered probe; TCG
	// scheduling gets a generous margin, the lower end none: the check
	// must not give up early. (rxe went on answering for about a second
	// after the peer's QP was destroyed, on 6.1 and 6.12 alike: the first
	// unanswered probe was posted then, and the report came 3 s after
	// DestroyQP.)
	if took < timeout-2*interval || took > timeout+interval+5*time.Second {
		t.Errorf("peer vanished, reported after %v; want about %v", took, timeout+interval)
	}
	t.Logf("peer vanished: reported after %v (interval %v, timeout %v)", took, interval, timeout)
	var ev *cm.Event
	select {
	case ev = <-events:
	case <-ctx.Done():
		t.Fatal("GetEvent not woken")
	}
	if ev == nil || ev.Type != cm.EventDisconnected || ev.ID != c || !errors.Is(ev.Err(), unix.ETIMEDOUT) {
		t.Fatalf("event %v, want DISCONNECTED with ETIMEDOUT on the client", ev)
	}
	// A wait with nothing left to complete says why, a second on.
	_, err = c.GetRecvComp(ctx)
	wantErrno(t, "wait after the peer vanished", err, unix.ETIMEDOUT)
	wantErrno(t, "send after the peer vanished", c.PostSend(30, cbuf[:8], cmsg, wr.Signaled), unix.ETIMEDOUT)
	wantErrno(t, "recv after the peer vanished", c.PostRecv(31, cbuf[:8], cmsg), unix.ETIMEDOUT)
	if err := c.SetKeepAlive(0, 0); err != nil {
		t.Errorf("turning the check off after it fired: %v", err)
	}
}
