package rdmatest

import (
	"testing"
	"time"

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// AllAccess is every access right a region can grant.
const AllAccess = wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic

// QKey is the Q_Key of the UD QPs that ConnectQP brings up.
const QKey = 0x11111111

// QPTimeout is the local ACK timeout of the RC QPs that ConnectQP brings
// up: 18, about 1.07 s, where qp.ToRTS sets pingpong's 14 (67 ms). An
// emulated VM on a loaded host stalls for longer than 67 ms, and each stall
// then makes rxe retransmit what it had sent; in one full run on 6.1 a send
// that its peer had received and acted on never completed after such
// retransmissions (the retransmit timer fired every 68 ms for the 20 s the
// test waited). The device tests are not about retransmission.
const QPTimeout = 18

// rtsAttrs is qp.ToRTS with QPTimeout for RC.
func rtsAttrs(typ qp.Type) (qp.Attr, qp.AttrMask) {
	a, m := qp.ToRTS(typ, 0)
	if typ == qp.RC {
		a.Timeout = QPTimeout
	}
	return a, m
}

// RoCEv2GID returns the index and value of the IPv4 RoCE v2 GID of port 1
// of ctx's device, and fails the test where there is none.
func RoCEv2GID(t testing.TB, ctx *uverbs.Context) (uint8, [16]byte) {
	t.Helper()
	gids, err := ctx.QueryGIDTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gids {
		if g.Port == 1 && g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
			return uint8(g.Index), g.GID
		}
	}
	t.Fatalf("no IPv4 RoCE v2 GID on port 1 in %+v", gids)
	return 0, [16]byte{}
}

// ConnectQP moves q from RESET through INIT and RTR to RTS on port 1,
// talking to remote over path (which a UD QP ignores), with every access
// right, QKey and QPTimeout.
func ConnectQP(t testing.TB, q *uverbs.QP, remote qp.Endpoint, path qp.Path) {
	t.Helper()
	typ := q.Type()
	if typ == qp.UD {
		remote, path = qp.Endpoint{}, qp.Path{}
	}
	for _, step := range []func() (qp.Attr, qp.AttrMask){
		func() (qp.Attr, qp.AttrMask) { return qp.ToInit(typ, 1, 0, AllAccess, QKey) },
		func() (qp.Attr, qp.AttrMask) { return qp.ToRTR(typ, remote, path, qp.MTU1024) },
		func() (qp.Attr, qp.AttrMask) { return rtsAttrs(typ) },
	} {
		attr, mask := step()
		if err := q.Modify(attr, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// ConnectQPs connects a and b, on the same device, to each other through
// the GID at gidIndex (see RoCEv2GID).
func ConnectQPs(t testing.TB, a, b *uverbs.QP, gidIndex uint8, gid [16]byte) {
	t.Helper()
	path := qp.Path{SGIDIndex: gidIndex, PortNum: 1}
	ConnectQP(t, a, qp.Endpoint{QPN: b.Num(), GID: gid}, path)
	ConnectQP(t, b, qp.Endpoint{QPN: a.Num(), GID: gid}, path)
}

// End is one side of a Pair: a QP, the CQ of both its queues, and a
// registered region of 64 KiB with every access right.
type End struct {
	CQ  *uverbs.CQ
	QP  *uverbs.QP
	Buf *mr.Region
}

// Pair is the test device opened with a PD, and two QPs of one type
// connected to each other through the device's RoCE v2 GID.
type Pair struct {
	Ctx      *uverbs.Context
	PD       *uverbs.PD
	GIDIndex uint8
	GID      [16]byte
	A, B     End
}

// NewPair opens the test device and connects two QPs of typ with caps on
// it; each has a CQ of 64 entries and a region (End). Everything is closed
// when the test ends, the QPs first; a test may close any of it earlier.
func NewPair(t testing.TB, typ qp.Type, caps qp.Caps) *Pair {
	t.Helper()
	p := &Pair{}
	p.Ctx, p.PD = OpenPD(t)
	t.Cleanup(func() {
		for _, e := range []*End{&p.A, &p.B} {
			if e.QP != nil {
				Check(t, "close QP", e.QP.Close())
			}
			if e.CQ != nil {
				Check(t, "close CQ", e.CQ.Close())
			}
			if e.Buf != nil {
				Check(t, "close MR", e.Buf.Close())
			}
		}
	})
	p.GIDIndex, p.GID = RoCEv2GID(t, p.Ctx)
	var err error
	for _, e := range []*End{&p.A, &p.B} {
		if e.CQ, err = p.Ctx.CreateCQ(uverbs.CQAttr{CQE: 64}); err != nil {
			t.Fatal(err)
		}
		if e.Buf, err = mr.New(p.PD, 1<<16, AllAccess); err != nil {
			t.Fatal(err)
		}
		if e.QP, err = p.PD.CreateQP(uverbs.QPInitAttr{Type: typ, SendCQ: e.CQ, RecvCQ: e.CQ, Caps: caps}); err != nil {
			t.Fatal(err)
		}
	}
	ConnectQPs(t, p.A.QP, p.B.QP, p.GIDIndex, p.GID)
	return p
}

// WaitWC polls cq until it has returned n completions, and fails the test
// if they take more than 20 s.
func WaitWC(t testing.TB, cq *uverbs.CQ, n int) []wr.Completion {
	t.Helper()
	out := make([]wr.Completion, 0, n)
	buf := make([]wr.Completion, n)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(buf[:n-len(out)])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return out
}

// WantOK fails the test unless c is a successful completion of the work
// request id with opcode op.
func WantOK(t testing.TB, c wr.Completion, id uint64, op wr.WCOpcode) {
	t.Helper()
	if c.Status != wr.Success || c.ID != id || c.Opcode != op {
		t.Fatalf("completion %+v (status %v); want ID %d opcode %v success", c, c.Status, id, op)
	}
}

// ConnectToNobody is a Pair whose A is connected to a QP number nobody
// has, with a timeout of 16.8 ms and retryCnt retries.
func ConnectToNobody(t testing.TB, retryCnt uint8) *Pair {
	t.Helper()
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	r := NewPair(t, qp.RC, caps)
	a := qp.Attr{State: qp.StateReset}
	Must(t, r.A.QP.Modify(a, qp.AttrState))
	nobody := r.B.QP.Num() + 0x100
	for _, step := range []func() (qp.Attr, qp.AttrMask){
		func() (qp.Attr, qp.AttrMask) { return qp.ToInit(qp.RC, 1, 0, AllAccess, 0) },
		func() (qp.Attr, qp.AttrMask) {
			return qp.ToRTR(qp.RC, qp.Endpoint{QPN: nobody, GID: r.GID}, qp.Path{SGIDIndex: r.GIDIndex, PortNum: 1}, qp.MTU1024)
		},
		func() (qp.Attr, qp.AttrMask) {
			a, m := qp.ToRTS(qp.RC, 0)
			a.Timeout, a.RetryCnt = 12, retryCnt // 16.8 ms
			return a, m | qp.AttrTimeout | qp.AttrRetryCnt
		},
	} {
		attr, mask := step()
		Must(t, r.A.QP.Modify(attr, mask))
	}
	return r
}
