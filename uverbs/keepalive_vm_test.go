package uverbs_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceKeepAliveStuckStream is the link-down write stream: a peer
// that stops answering while the send queue is full of RDMA writes. With
// retry count 7, rxe retries them for ever; the keepalive, finding no room
// for a probe and nothing retired, ends it within its timeout, and every
// write comes back flushed, in order, with no probe among them. Before
// that, writes on a live connection run beside the probes untouched.
func TestDeviceKeepAliveStuckStream(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})

	// What cannot run a check: a QP not yet connected, one created
	// SingleThreaded, and a bad timeout.
	q, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.A.CQ, RecvCQ: r.A.CQ, Caps: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetKeepAlive(uverbs.KeepAlive{Interval: time.Second, Timeout: time.Second}); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("keepalive on a QP in RESET: %v, want ENOTCONN", err)
	}
	rdmatest.Check(t, "close QP", q.Close())
	single, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.A.CQ, RecvCQ: r.A.CQ, SingleThreaded: true,
		Caps: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := single.SetKeepAlive(uverbs.KeepAlive{Interval: time.Second, Timeout: time.Second}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("keepalive on a SingleThreaded QP: %v, want EINVAL", err)
	}
	rdmatest.Check(t, "close QP", single.Close())
	if err := r.A.QP.SetKeepAlive(uverbs.KeepAlive{Interval: time.Second}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("keepalive without a timeout: %v, want EINVAL", err)
	}

	dead := make(chan error, 1)
	const timeout = time.Second
	rdmatest.Check(t, "set keepalive", r.A.QP.SetKeepAlive(uverbs.KeepAlive{Interval: 10 * time.Millisecond, Timeout: timeout,
		OnDead: func(err error) { dead <- err }}))
	write := func(id uint64) error {
		_, err := r.A.QP.PostSend([]wr.SendWR{{ID: id, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.A.Buf.SGE(0, 1024)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}}})
		return err
	}
	for i := range 200 {
		rdmatest.Check(t, "write", write(uint64(i)))
		rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], uint64(i), wr.WCRDMAWrite)
	}
	select {
	case err := <-dead:
		t.Fatalf("a live peer declared dead: %v", err)
	default:
	}

	// The peer's QP goes away; the stream fills the queue.
	rdmatest.Check(t, "close peer QP", r.B.QP.Close())
	r.B.QP = nil
	t0 := time.Now()
	n := 0
	for ; ; n++ {
		if err := write(uint64(1000 + n)); err != nil {
			if !errors.Is(err, unix.ENOMEM) {
				t.Fatalf("write %d: %v, want ENOMEM once the queue is full", n, err)
			}
			break
		}
	}
	select {
	case err := <-dead:
		took := time.Since(t0)
		if !errors.Is(err, unix.ETIMEDOUT) {
			t.Errorf("OnDead: %v, want ETIMEDOUT", err)
		}
		if took > timeout+5*time.Second {
			t.Errorf("the stuck stream was reported after %v, want about %v", took, timeout)
		}
		t.Logf("%d writes stuck; reported after %v: %v", n, took, err)
	case <-time.After(timeout + 20*time.Second):
		t.Fatal("the stuck stream was never reported")
	}
	if s := r.A.QP.State(); s != qp.StateErr {
		t.Errorf("QP in state %v after the keepalive fired, want ERR", s)
	}
	for i, c := range rdmatest.WaitWC(t, r.A.CQ, n) {
		if c.ID != uint64(1000+i) || c.Status != wr.WRFlushErr {
			t.Fatalf("completion %d: %+v, want write %d flushed", i, c, 1000+i)
		}
	}
	// Nothing else: the probes' completions stay hidden.
	time.Sleep(100 * time.Millisecond)
	var wc [4]wr.Completion
	if k, err := r.A.CQ.Poll(wc[:]); k != 0 || err != nil {
		t.Errorf("after the flush: %d more completions (%+v), %v", k, wc[:k], err)
	}
}
