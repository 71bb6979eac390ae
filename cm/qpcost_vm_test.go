package cm_test

import (
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceCreateQPCost: the CQs CreateQP makes share one completion
// channel per device, so that a QP costs no file descriptor of its own
// (librdmacm's per-QP channels cost two): twenty QPs after the first open
// none. CQs the caller gives are used and left alone, and GetSendComp
// refuses to wait on them.
func TestDeviceCreateQPCost(t *testing.T) {
	rdmatest.Context(t)
	caps := qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	first := bindID(t)
	defer rdmatest.Destroy(t, first)
	rdmatest.Must(t, first.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}))
	var ids []*cm.ID
	defer func() {
		for _, id := range ids {
			rdmatest.Destroy(t, id)
		}
	}()
	for range 20 {
		ids = append(ids, bindID(t))
	}
	// Each synchronous ID has an event channel of its own: count after
	// them.
	before := fdCount()
	for _, id := range ids {
		rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}))
		if id.SendCQ() == nil || id.RecvCQ() == nil || id.SendCQ() == id.RecvCQ() {
			t.Fatalf("CQs %p and %p: want two of the QP's own", id.SendCQ(), id.RecvCQ())
		}
	}
	if n := fdCount(); n != before {
		t.Errorf("20 QPs opened %d file descriptors (%d before, %d after):\n%s", n-before, before, n, fdList())
	}

	// The caller's CQ, for both queues.
	cq, err := first.Verbs().CreateCQ(uverbs.CQAttr{CQE: 4})
	rdmatest.Must(t, err)
	defer cq.Close()
	id := bindID(t)
	defer rdmatest.Destroy(t, id)
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Caps: caps}))
	if id.SendCQ() != cq || id.RecvCQ() != cq {
		t.Fatalf("CQs %p and %p, want the caller's %p", id.SendCQ(), id.RecvCQ(), cq)
	}
	_, err = id.GetSendComp(rdmatest.Context(t))
	wantErrno(t, "GetSendComp on the caller's CQ", err, 22) // EINVAL
	rdmatest.Must(t, id.DestroyQP())
	// The caller's CQ outlives the QP.
	var wc [1]wr.Completion
	if _, err := cq.Poll(wc[:]); err != nil {
		t.Fatalf("poll the caller's CQ after DestroyQP: %v", err)
	}
}

// TestDeviceSharedCompChannel: connections whose CQs share the device's
// completion channel each get their own completions, waited for at once
// and arriving in the other order than the waits began.
func TestDeviceSharedCompChannel(t *testing.T) {
	ctx := rdmatest.Context(t)
	const n = 3
	var pairs [n]*rdmatest.CMPair
	var bufs [n][]byte
	for i := range pairs {
		pairs[i] = rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
			b, m := rdmatest.Msgs(t, s, 64)
			bufs[i] = b
			rdmatest.Must(t, s.PostRecv(uint64(100+i), b, m))
		})
	}
	type got struct {
		i   int
		wc  wr.Completion
		err error
	}
	done := make(chan got, n)
	for i, p := range pairs {
		go func() {
			wc, err := p.Server.GetRecvComp(ctx)
			done <- got{i, wc, err}
		}()
	}
	for i := n - 1; i >= 0; i-- {
		c := pairs[i].Client
		b, m := rdmatest.Msgs(t, c, 64)
		b[0] = byte(i)
		rdmatest.Must(t, c.PostSend(uint64(i), b[:1], m, wr.Signaled))
		wc, err := c.GetSendComp(ctx)
		wantComp(t, "send", wc, err, uint64(i), wr.WCSend)
		g := <-done
		if g.i != i {
			t.Fatalf("connection %d's receive completed before %d's", g.i, i)
		}
		wantComp(t, "recv", g.wc, g.err, uint64(100+i), wr.WCRecv)
		if bufs[i][0] != byte(i) {
			t.Fatalf("connection %d received %d", i, bufs[i][0])
		}
	}
}
