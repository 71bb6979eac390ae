package mlx5_test

// Device tests for hosts with a ConnectX adapter:
//
//	RDMAGO_DEVICE=mlx5_0 RDMAGO_REQUIRE_DEVICE=1 go test ./provider/mlx5
//
// They go through the whole library (uverbs, with the mlx5 provider
// registered for RDMA_DRIVER_MLX5) and stress what the in-memory model
// cannot prove: that a real HCA reads these WQEs and doorbells and writes
// the CQEs this provider decodes. On any other device they skip. They have
// not run on hardware yet (docs/mlx5.md).

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// openMLX5 opens the test device and a PD on it, both closed when the test
// ends, and skips the test unless mlx5 drives the device.
func openMLX5(t *testing.T) (*uverbs.Context, *uverbs.PD) {
	t.Helper()
	ctx, pd := rdmatest.OpenPD(t)
	if d := ctx.Device(); d.Driver != "mlx5" {
		t.Skipf("device %s is driven by %q; these tests need an mlx5 (ConnectX) adapter", d.Name, d.Driver)
	}
	return ctx, pd
}

// remote addresses q on port 1 of this device: by its RoCE v2 GID on
// Ethernet, by its LID on InfiniBand; the path is port 1 and that GID.
func remote(t *testing.T, ctx *uverbs.Context, q *uverbs.QP) (qp.Endpoint, qp.Path) {
	t.Helper()
	r, path := qp.Endpoint{QPN: q.Num()}, qp.Path{PortNum: 1}
	gids, err := ctx.QueryGIDTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gids {
		if g.Port == 1 && g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
			r.GID, path.SGIDIndex = g.GID, g.Index
			return r, path
		}
	}
	port, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	r.LID = port.LID
	return r, path
}

// connect moves q to RTS, talking to peer.
func connect(t *testing.T, ctx *uverbs.Context, q, peer *uverbs.QP) {
	t.Helper()
	r, path := remote(t, ctx, peer)
	rdmatest.ConnectQP(t, q, r, path)
}

// poll waits for n successful completions on cq.
func poll(t *testing.T, cq *uverbs.CQ, n int) []wr.Completion {
	t.Helper()
	out := rdmatest.WaitWC(t, cq, n)
	for _, c := range out {
		if c.Status != wr.Success {
			t.Fatalf("completion %+v: %v", c, c.Err())
		}
	}
	return out
}

type pair struct {
	ctx      *uverbs.Context
	pd       *uverbs.PD
	cqa, cqb *uverbs.CQ
	a, b     *uverbs.QP
	bufA     *mr.Region
	bufB     *mr.Region
}

func newPair(t *testing.T, caps qp.Caps, srq *uverbs.SRQ, ctx *uverbs.Context, pd *uverbs.PD) *pair {
	t.Helper()
	p := &pair{ctx: ctx, pd: pd}
	var err error
	for _, cq := range []**uverbs.CQ{&p.cqa, &p.cqb} {
		if *cq, err = ctx.CreateCQ(uverbs.CQAttr{CQE: 15}); err != nil { // a CQ of 16 entries: its owner bit flips often
			t.Fatal(err)
		}
	}
	if p.a, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: p.cqa, RecvCQ: p.cqa, Caps: caps}); err != nil {
		t.Fatal(err)
	}
	if p.b, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: p.cqb, RecvCQ: p.cqb, Caps: caps, SRQ: srq}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []**mr.Region{&p.bufA, &p.bufB} {
		if *b, err = mr.New(pd, 1<<16, rdmatest.AllAccess); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, ctx, p.a, p.b)
	connect(t, ctx, p.b, p.a)
	t.Cleanup(func() {
		p.a.Close()
		p.b.Close()
		p.cqa.Close()
		p.cqb.Close()
		p.bufA.Close()
		p.bufB.Close()
	})
	return p
}

// TestDeviceMLX5RingWrap sends lists of RDMA writes of every WQE shape
// (one and two blocks, gather and inline) through a send queue of a few
// requests for thousands of rounds: WQEs cross the end of the ring, the
// 16-bit WQE index wraps, single WQEs ring BlueFlame doorbells and lists
// 8-byte ones, and the CQs wrap many times.
func TestDeviceMLX5RingWrap(t *testing.T) {
	ctx, pd := openMLX5(t)
	p := newPair(t, qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInlineData: 64}, nil, ctx, pd)
	local, remoteBuf := p.bufA.Bytes(), p.bufB.Bytes()
	var id uint64
	for round := range 20000 {
		wrs := make([]wr.SendWR, 1+round%4)
		for k := range wrs {
			id++
			src := local[k*128 : k*128+64]
			for i := range src {
				src[i] = byte(int(id) + i)
			}
			w := wr.SendWR{ID: id, Opcode: wr.OpRDMAWrite, Remote: wr.Remote{Addr: p.bufB.Addr() + uint64(k)*128, RKey: p.bufB.RKey()}}
			switch (round + k) % 3 {
			case 0:
				w.SGList = []wr.SGE{p.bufA.SGE(k*128, 64)}
			case 1:
				w.SGList = []wr.SGE{p.bufA.SGE(k*128, 16), p.bufA.SGE(k*128+16, 16), p.bufA.SGE(k*128+32, 16), p.bufA.SGE(k*128+48, 16)}
			case 2:
				w.Flags = wr.Inline
				w.SGList = []wr.SGE{p.bufA.SGE(k*128, 64)}
			}
			wrs[k] = w
		}
		wrs[len(wrs)-1].Flags |= wr.Signaled
		if n, err := p.a.PostSend(wrs); n != len(wrs) {
			t.Fatalf("round %d: posted %d of %d: %v", round, n, len(wrs), err)
		}
		if c := poll(t, p.cqa, 1)[0]; c.ID != id || c.Opcode != wr.WCRDMAWrite {
			t.Fatalf("round %d: completion %+v, want ID %d", round, c, id)
		}
		for k := range wrs {
			if got := remoteBuf[k*128 : k*128+64]; got[0] != byte(int(wrs[k].ID)) || got[63] != byte(int(wrs[k].ID)+63) {
				t.Fatalf("round %d request %d: remote % x", round, k, got[:4])
			}
		}
	}
}

// TestDeviceMLX5SRQ sends more messages through an SRQ than it holds, so
// its free list recycles every WQE many times.
func TestDeviceMLX5SRQ(t *testing.T) {
	ctx, pd := openMLX5(t)
	srq, err := pd.CreateSRQ(uverbs.SRQAttr{MaxWR: 7, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	p := newPair(t, qp.Caps{MaxSendWR: 8, MaxSendSGE: 1, MaxRecvWR: 8, MaxRecvSGE: 1}, srq, ctx, pd)
	for i := range 7 {
		if _, err := srq.PostRecv([]wr.RecvWR{{ID: uint64(i), SGList: []wr.SGE{p.bufB.SGE(i*256, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	src := p.bufA.Bytes()
	for round := range 1000 {
		copy(src, []byte{byte(round), byte(round >> 8), 0xaa})
		if _, err := p.a.PostSend([]wr.SendWR{{ID: uint64(round), Opcode: wr.OpSendWithImm, Imm: uint32(round), Flags: wr.Signaled,
			SGList: []wr.SGE{p.bufA.SGE(0, 3)}}}); err != nil {
			t.Fatal(err)
		}
		poll(t, p.cqa, 1)
		c := poll(t, p.cqb, 1)[0]
		slot := int(c.ID % 7)
		if c.Opcode != wr.WCRecv || c.Imm != uint32(round) || c.ByteLen != 3 ||
			!bytes.Equal(p.bufB.Bytes()[slot*256:slot*256+3], src[:3]) {
			t.Fatalf("round %d: %+v", round, c)
		}
		if _, err := srq.PostRecv([]wr.RecvWR{{ID: c.ID + 7, SGList: []wr.SGE{p.bufB.SGE(slot*256, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeviceMLX5Arm arms a CQ from user space again and again: each arm
// must produce exactly one event, which needs the arm sequence number to
// advance with every event read (the provider's CQEvent).
func TestDeviceMLX5Arm(t *testing.T) {
	ctx, pd := openMLX5(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	p := newPair(t, qp.Caps{MaxSendWR: 8, MaxSendSGE: 1, MaxRecvWR: 8, MaxRecvSGE: 1}, nil, ctx, pd)
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: qp.Caps{MaxSendWR: 8, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	peer, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: p.cqb, RecvCQ: p.cqb, Caps: qp.Caps{MaxRecvWR: 8, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	connect(t, ctx, q, peer)
	connect(t, ctx, peer, q)
	for i := range 5 {
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if _, err := q.PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{p.bufA.SGE(0, 8)}, Remote: wr.Remote{Addr: p.bufB.Addr(), RKey: p.bufB.RKey()}}}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := ch.GetEvent(wctx)
		cancel()
		if err != nil || got != cq {
			t.Fatalf("arm %d: event %v, %v", i, got, err)
		}
		cq.AckEvents(1)
		poll(t, cq, 1)
	}
}
