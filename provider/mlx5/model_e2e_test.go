package mlx5

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/failnote"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Step 3 of docs/mlx5.md: the data path end to end against the device
// model in model_test.go: post → doorbell → the model consumes WQEs and
// writes CQEs → poll.

func addrOfBuf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// rcPair is two connected RC QPs, each with its own CQ.
type rcPair struct {
	h        *hca
	ctx      *Context
	a, b     *QP
	ha, hb   *hwQP
	cqa, cqb *CQ
	hca, hcb *hwCQ
}

var pairCaps = qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}

func newRCPair(t *testing.T, caps qp.Caps, cqe int) *rcPair {
	return newRCPairCQ(t, caps, provider.CQAttr{CQE: cqe})
}

// newRCPairCQ is newRCPair with extended CQs, on a device whose kernel
// maps the clock pages.
func newRCPairCQ(t *testing.T, caps qp.Caps, cq provider.CQAttr) *rcPair {
	h := newHCA(t)
	h.clock = true
	p := &rcPair{h: h, ctx: h.openContext()}
	p.cqa, p.hca = h.createCQEx(p.ctx, cq)
	p.cqb, p.hcb = h.createCQEx(p.ctx, cq)
	p.a, p.ha = h.createQP(p.ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, p.hca, p.hca, nil)
	p.b, p.hb = h.createQP(p.ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, p.hcb, p.hcb, nil)
	connect(p.ha, p.hb)
	return p
}

// pollN polls cq until it has n completions (the model has already run).
func pollN(t *testing.T, cq *CQ, n int) []wr.Completion {
	t.Helper()
	out := make([]wr.Completion, n+4)
	got := cq.Poll(out)
	if got != n {
		t.Fatalf("polled %d completions, want %d: %+v", got, n, out[:got])
	}
	return out[:n]
}

func mustPost(t *testing.T, n int, err error, want int) {
	t.Helper()
	if n != want || err != nil {
		t.Fatalf("posted %d (%v), want %d", n, err, want)
	}
}

func TestModelSendRecv(t *testing.T) {
	p := newRCPair(t, pairCaps, 16)
	src, dst := bytes.Repeat([]byte("0123456789abcdef"), 16), make([]byte, 512)
	ks, kd := p.h.regMR(src, 0), p.h.regMR(dst, wr.LocalWrite)

	n, err := p.b.PostRecv([]wr.RecvWR{{ID: 100, SGList: []wr.SGE{{Addr: addrOfBuf(dst), Length: 100, LKey: kd}, {Addr: addrOfBuf(dst) + 200, Length: 300, LKey: kd}}}})
	mustPost(t, n, err, 1)
	n, err = p.a.PostSend([]wr.SendWR{{ID: 7, Opcode: wr.OpSendWithImm, Flags: wr.Signaled | wr.Solicited, Imm: 0xc0ffee,
		SGList: []wr.SGE{{Addr: addrOfBuf(src), Length: 150, LKey: ks}, {Addr: addrOfBuf(src) + 150, Length: 0, LKey: ks}, {Addr: addrOfBuf(src) + 150, Length: 50, LKey: ks}}}})
	mustPost(t, n, err, 1)
	p.h.run()

	s := pollN(t, p.cqa, 1)[0]
	if s.ID != 7 || s.Status != wr.Success || s.Opcode != wr.WCSend || s.Flags != wr.WCWithImm || s.QPNum != p.ha.qpn {
		t.Errorf("send completion %+v", s)
	}
	r := pollN(t, p.cqb, 1)[0]
	if r.ID != 100 || r.Status != wr.Success || r.Opcode != wr.WCRecv || r.ByteLen != 200 || r.Imm != 0xc0ffee ||
		r.Flags != wr.WCWithImm || r.SrcQP != p.ha.qpn || r.QPNum != p.hb.qpn {
		t.Errorf("receive completion %+v", r)
	}
	if !bytes.Equal(dst[:100], src[:100]) || !bytes.Equal(dst[200:300], src[100:200]) {
		t.Errorf("data not scattered as posted")
	}
	if p.a.sq.tail.Load() != p.a.sq.head || p.b.rq.tail.Load() != 1 {
		t.Errorf("queues not retired: sq %d/%d rq %d", p.a.sq.tail.Load(), p.a.sq.head, p.b.rq.tail.Load())
	}
	if got := getBE32(unsafe.Pointer(&p.cqa.db[cqSetCI])); got != 1 {
		t.Errorf("CQ consumer index in doorbell record %d, want 1", got)
	}
}

// TestModelStop checks the close protocol posts rely on instead of a lock
// of the core's: a stopped QP refuses posts without writing a WQE or
// ringing the doorbell, Resume undoes it, and Close stops for good.
func TestModelStop(t *testing.T) {
	p := newRCPair(t, pairCaps, 16)
	src := make([]byte, 64)
	ks := p.h.regMR(src, 0)
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(src), Length: 64, LKey: ks}}}}
	p.a.Stop()
	if n, err := p.a.PostSend(send); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostSend on a stopped QP: %d, %v", n, err)
	}
	if n, err := p.a.PostRecv([]wr.RecvWR{{ID: 2}}); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostRecv on a stopped QP: %d, %v", n, err)
	}
	if p.a.sq.head != 0 || p.a.rq.head != 0 {
		t.Errorf("a stopped QP wrote WQEs: send head %d, receive head %d", p.a.sq.head, p.a.rq.head)
	}
	p.a.Resume()
	n, err := p.b.PostRecv([]wr.RecvWR{{ID: 3}})
	mustPost(t, n, err, 1)
	n, err = p.a.PostSend(send)
	mustPost(t, n, err, 1)
	p.h.run()
	pollN(t, p.cqa, 1)
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	p.a.Resume() // too late: the buffers are gone
	if n, err := p.a.PostSend(send); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostSend after Close: %d, %v", n, err)
	}
}

func TestModelRDMAAndAtomics(t *testing.T) {
	p := newRCPair(t, pairCaps, 16)
	local, remote := make([]byte, 4096), make([]byte, 4096)
	for i := range remote {
		remote[i] = byte(i * 3)
	}
	copy(local, "write me")
	kl := p.h.regMR(local, wr.LocalWrite)
	kr := p.h.regMR(remote, wr.RemoteWrite|wr.RemoteRead|wr.RemoteAtomic)
	binary.BigEndian.PutUint64(remote[1024:], 40)
	binary.BigEndian.PutUint64(remote[1032:], 5)
	recvBuf := make([]byte, 16)
	krecv := p.h.regMR(recvBuf, wr.LocalWrite)
	p.b.PostRecv([]wr.RecvWR{{ID: 55, SGList: []wr.SGE{{Addr: addrOfBuf(recvBuf), Length: 16, LKey: krecv}}}})

	la, ra := addrOfBuf(local), addrOfBuf(remote)
	wrs := []wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: la, Length: 8, LKey: kl}}, Remote: wr.Remote{Addr: ra + 2048, RKey: kr}},
		{ID: 2, Opcode: wr.OpRDMARead, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: la + 100, Length: 300, LKey: kl}}, Remote: wr.Remote{Addr: ra, RKey: kr}},
		{ID: 3, Opcode: wr.OpAtomicCmpAndSwp, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: la + 512, Length: 8, LKey: kl}}, Remote: wr.Remote{Addr: ra + 1024, RKey: kr}, CompareAdd: 40, Swap: 41},
		{ID: 4, Opcode: wr.OpAtomicFetchAdd, Flags: wr.Signaled | wr.Fence, SGList: []wr.SGE{{Addr: la + 520, Length: 8, LKey: kl}}, Remote: wr.Remote{Addr: ra + 1032, RKey: kr}, CompareAdd: 10},
		{ID: 5, Opcode: wr.OpRDMAWriteWithImm, Flags: wr.Signaled | wr.Inline, Imm: 99, SGList: []wr.SGE{{Addr: la, Length: 5}}, Remote: wr.Remote{Addr: ra + 3000, RKey: kr}},
	}
	n, err := p.a.PostSend(wrs)
	mustPost(t, n, err, len(wrs))
	p.h.run()
	cs := pollN(t, p.cqa, 5)
	wantOp := []wr.WCOpcode{wr.WCRDMAWrite, wr.WCRDMARead, wr.WCCompSwap, wr.WCFetchAdd, wr.WCRDMAWrite}
	wantLen := []uint32{0, 300, 8, 8, 0}
	for i, c := range cs {
		if c.ID != uint64(i+1) || c.Status != wr.Success || c.Opcode != wantOp[i] || c.ByteLen != wantLen[i] {
			t.Errorf("completion %d: %+v", i, c)
		}
	}
	if string(remote[2048:2056]) != "write me" || string(remote[3000:3005]) != "write" {
		t.Errorf("RDMA writes did not land: %q %q", remote[2048:2056], remote[3000:3005])
	}
	for i := range 300 {
		if local[100+i] != byte(i*3) {
			t.Fatalf("RDMA read byte %d = %d", i, local[100+i])
		}
	}
	if binary.BigEndian.Uint64(local[512:]) != 40 || binary.BigEndian.Uint64(remote[1024:]) != 41 {
		t.Errorf("compare and swap: old %d new %d", binary.BigEndian.Uint64(local[512:]), binary.BigEndian.Uint64(remote[1024:]))
	}
	if binary.BigEndian.Uint64(local[520:]) != 5 || binary.BigEndian.Uint64(remote[1032:]) != 15 {
		t.Errorf("fetch and add: old %d new %d", binary.BigEndian.Uint64(local[520:]), binary.BigEndian.Uint64(remote[1032:]))
	}
	r := pollN(t, p.cqb, 1)[0]
	if r.ID != 55 || r.Opcode != wr.WCRecvRDMAWithImm || r.Imm != 99 || r.ByteLen != 5 || r.Flags != wr.WCWithImm {
		t.Errorf("write-with-immediate receive %+v", r)
	}
}

// A small send queue, lists of mixed-size requests, many passes: WQEs
// cross the end of the ring and the 16-bit WQE index wraps; unsignaled
// requests retire with the next signaled one; a CQ of 4 entries flips its
// owner bit every pass.
func TestModelRingWrap(t *testing.T) {
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInlineData: 100}
	p := newRCPair(t, caps, 3)
	// Room for 100 bytes inline makes the largest WQE 320 bytes: 6 fit in
	// 32 BBs, and all 6 may be posted, as libmlx5 allows.
	if p.a.sq.wqeCnt != 32 || p.a.sq.maxPost != 6 {
		t.Fatalf("send queue of %d BBs, %d requests", p.a.sq.wqeCnt, p.a.sq.maxPost)
	}
	local, remote := make([]byte, 1024), make([]byte, 1024)
	kl, kr := p.h.regMR(local, wr.LocalWrite), p.h.regMR(remote, wr.RemoteWrite)
	la, ra := addrOfBuf(local), addrOfBuf(remote)
	crossed := 0
	var id uint64
	for round := range 16000 {
		var wrs []wr.SendWR
		for k := range 1 + round%4 {
			id++
			src := la + uint64(k)*128
			for i := range 64 {
				local[k*128+i] = byte(int(id) + i)
			}
			w := wr.SendWR{ID: id, Opcode: wr.OpRDMAWrite, Remote: wr.Remote{Addr: ra + uint64(k)*128, RKey: kr}}
			switch (round + k) % 3 {
			case 0: // 1 BB
				w.SGList = []wr.SGE{{Addr: src, Length: 64, LKey: kl}}
			case 1: // 2 BBs: ctrl, raddr, 4 data segments
				w.SGList = []wr.SGE{{Addr: src, Length: 16, LKey: kl}, {Addr: src + 16, Length: 16, LKey: kl}, {Addr: src + 32, Length: 16, LKey: kl}, {Addr: src + 48, Length: 16, LKey: kl}}
			case 2: // inline, 2 BBs
				w.Flags = wr.Inline
				w.SGList = []wr.SGE{{Addr: src, Length: 64}}
			}
			wrs = append(wrs, w)
		}
		wrs[len(wrs)-1].Flags |= wr.Signaled
		before := p.a.sq.curPost
		n, err := p.a.PostSend(wrs)
		mustPost(t, n, err, len(wrs))
		if (before&(p.a.sq.wqeCnt-1))+(p.a.sq.curPost-before) > p.a.sq.wqeCnt {
			crossed++
		}
		p.h.run()
		c := pollN(t, p.cqa, 1)[0]
		if c.ID != id || c.Status != wr.Success {
			t.Fatalf("round %d: completion %+v, want ID %d", round, c, id)
		}
		if p.a.sq.tail.Load() != p.a.sq.head {
			t.Fatalf("round %d: tail %d head %d", round, p.a.sq.tail.Load(), p.a.sq.head)
		}
		for k := range wrs {
			if remote[k*128] != byte(int(wrs[k].ID)) || remote[k*128+63] != byte(int(wrs[k].ID)+63) {
				t.Fatalf("round %d request %d: data % x", round, k, remote[k*128:k*128+4])
			}
		}
	}
	if crossed < 100 || p.a.sq.curPost < 0x10000 {
		t.Errorf("ring crossings %d, %#x BBs posted: the test did not exercise the wrap", crossed, p.a.sq.curPost)
	}
}

func TestModelBlueFlame(t *testing.T) {
	p := newRCPair(t, pairCaps, 64)
	buf := make([]byte, 256)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	if p.a.bf.bufSize != modelBfRegSize/2 {
		t.Fatalf("QP on register %d with %d-byte halves", p.a.bf.uuarn, p.a.bf.bufSize)
	}
	// The first QPs get low-latency registers: no lock.
	if p.a.bf.mu != nil || p.b.bf.mu != nil || p.a.bf == p.b.bf {
		t.Errorf("low-latency registers shared or locked")
	}
	write := wr.SendWR{Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}, Remote: wr.Remote{Addr: addrOfBuf(buf) + 100, RKey: k}}
	for range 3 {
		p.a.PostSend([]wr.SendWR{write})
		p.h.run()
	}
	p.a.PostSend([]wr.SendWR{write, write})
	p.h.run()
	db := p.h.doorbell
	if len(db) != 4 {
		t.Fatalf("%d doorbells", len(db))
	}
	for i := range 3 {
		if !db[i].blueFlame || db[i].bytes != 64 {
			t.Errorf("single WQE %d: doorbell %+v, want its 48 bytes copied as one 64-byte BlueFlame block", i, db[i])
		}
		if db[i].half != uintptr(i%2)*modelBfRegSize/2 {
			t.Errorf("doorbell %d in half %d: halves do not alternate", i, db[i].half)
		}
	}
	if db[3].blueFlame || db[3].bytes > 8 {
		t.Errorf("a list of two rang %+v, want an 8-byte doorbell", db[3])
	}
	// A WQE larger than a BlueFlame half: 8-byte doorbell.
	big := wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 64}}}
	p.b.PostRecv([]wr.RecvWR{{SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 256, LKey: k}}}})
	p.a.PostSend([]wr.SendWR{big})
	p.h.run()
	if d := p.h.doorbell[4]; !d.blueFlame || d.bytes != 128 {
		t.Errorf("inline send of 64 bytes: %+v, want a 128-byte BlueFlame copy", d)
	}

	// Without write combining (bf_reg_size 0) every doorbell is 8 bytes.
	h := newHCA(t)
	h.noWC = true
	ctx := h.openContext()
	cq, hcq := h.createCQ(ctx, 8)
	qa, hqa := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: pairCaps}, hcq, hcq, nil)
	qb, hqb := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: pairCaps}, hcq, hcq, nil)
	connect(hqa, hqb)
	k2 := h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	write.SGList[0].LKey, write.Remote.RKey, write.Flags = k2, k2, wr.Signaled
	qa.PostSend([]wr.SendWR{write})
	h.run()
	if d := h.doorbell[0]; d.blueFlame || d.bytes > 8 {
		t.Errorf("without write combining: %+v", d)
	}
	pollN(t, cq, 1)
	_ = qb
}

// Error completions: a bad local key fails the request with a local
// protection error and the QP flushes everything after it, receives
// included; a bad remote key is a remote access error; a send with no
// receive posted is an RNR retry error; a receive too short fails both
// sides.
func TestModelErrors(t *testing.T) {
	p := newRCPair(t, pairCaps, 32)
	buf := make([]byte, 256)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	a := addrOfBuf(buf)
	p.a.PostRecv([]wr.RecvWR{{ID: 900, SGList: []wr.SGE{{Addr: a, Length: 16, LKey: k}}}, {ID: 901}})
	n, err := p.a.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k + 1}}, Remote: wr.Remote{Addr: a, RKey: k}},
		{ID: 2, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k}}, Remote: wr.Remote{Addr: a, RKey: k}},
		{ID: 3, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k}}, Remote: wr.Remote{Addr: a, RKey: k}},
	})
	mustPost(t, n, err, 3)
	// uverbs' note of failed QPs (internal/failnote): once per failed
	// completion, with its QP's number, before Poll returns it.
	var noted []uint32
	if !failnote.Install(p.cqa, func(qpn uint32) { noted = append(noted, qpn) }) {
		t.Fatal("failnote.Install does not take an mlx5 CQ")
	}
	p.h.run()
	cs := pollN(t, p.cqa, 5)
	if len(noted) != 5 || slices.ContainsFunc(noted, func(n uint32) bool { return n != p.a.num }) {
		t.Errorf("failed completions noted for QPs %v, want QP %d five times", noted, p.a.num)
	}
	want := []struct {
		id     uint64
		status wr.Status
	}{{900, wr.WRFlushErr}, {901, wr.WRFlushErr}, {1, wr.LocProtErr}, {2, wr.WRFlushErr}, {3, wr.WRFlushErr}}
	// The receive flushes come first: the model flushes the RQ when the
	// QP fails, before the later send WQEs are consumed.
	got := map[uint64]wr.Completion{}
	for _, c := range cs {
		got[c.ID] = c
	}
	for _, w := range want {
		c, ok := got[w.id]
		if !ok || c.Status != w.status || c.VendorErr != modelVendorSynd || c.Err() == nil {
			t.Errorf("request %d: %+v, want %v", w.id, c, w.status)
		}
	}
	if p.a.sq.tail.Load() != p.a.sq.head || p.a.rq.tail.Load() != 2 {
		t.Errorf("error completions did not retire the queues: sq %d/%d rq %d", p.a.sq.tail.Load(), p.a.sq.head, p.a.rq.tail.Load())
	}

	for _, c := range []struct {
		name string
		w    wr.SendWR
		recv bool
		want wr.Status
		peer wr.Status
	}{
		{"bad rkey", wr.SendWR{ID: 10, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k}}, Remote: wr.Remote{Addr: a, RKey: 0xdead}}, false, wr.RemAccessErr, 0},
		{"no receive posted", wr.SendWR{ID: 11, Opcode: wr.OpSend, SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k}}}, false, wr.RNRRetryExcErr, 0},
		{"receive too short", wr.SendWR{ID: 12, Opcode: wr.OpSend, SGList: []wr.SGE{{Addr: a, Length: 200, LKey: k}}}, true, wr.RemInvReqErr, wr.LocLenErr},
	} {
		q := newRCPair(t, pairCaps, 8)
		k := q.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
		c.w.SGList[0].LKey = k
		if c.w.Remote.RKey != 0xdead {
			c.w.Remote.RKey = k
		}
		if c.recv {
			q.b.PostRecv([]wr.RecvWR{{ID: 77, SGList: []wr.SGE{{Addr: a, Length: 100, LKey: k}}}})
		}
		q.a.PostSend([]wr.SendWR{c.w})
		q.h.run()
		if s := pollN(t, q.cqa, 1)[0]; s.Status != c.want || s.ID != c.w.ID {
			t.Errorf("%s: %+v, want %v", c.name, s, c.want)
		}
		if c.peer != 0 {
			if r := pollN(t, q.cqb, 1)[0]; r.Status != c.peer || r.ID != 77 {
				t.Errorf("%s: receiver %+v, want %v", c.name, r, c.peer)
			}
		}
	}
}

func TestModelSRQ(t *testing.T) {
	h := newHCA(t)
	ctx := h.openContext()
	scq, hscq := h.createCQ(ctx, 64)
	rcq, hrcq := h.createCQ(ctx, 64)
	srq, hsrq := h.createSRQ(ctx, provider.SRQInitAttr{MaxWR: 5, MaxSGE: 2})
	if srq.ring.nwqe != 8 {
		t.Fatalf("SRQ of %d WQEs", srq.ring.nwqe)
	}
	caps := qp.Caps{MaxSendWR: 8, MaxSendSGE: 1}
	s1, hs1 := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hscq, hscq, nil)
	s2, hs2 := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hscq, hscq, nil)
	r1, hr1 := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps, HasSRQ: true}, hrcq, hrcq, hsrq)
	r2, hr2 := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps, HasSRQ: true}, hrcq, hrcq, hsrq)
	connect(hs1, hr1)
	connect(hs2, hr2)
	if r1.rq != nil {
		t.Fatal("a QP on an SRQ has a receive queue")
	}
	if n, err := r1.PostRecv([]wr.RecvWR{{}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("receive posted to a QP on an SRQ: %d, %v", n, err)
	}
	bufs := make([]byte, 8*64)
	k := h.regMR(bufs, wr.LocalWrite)
	msg := []byte("0123456789")
	km := h.regMR(msg, 0)
	// Fill the SRQ: it holds 7 (nwqe-1); the 8th is ENOMEM.
	recvs := make([]wr.RecvWR, 8)
	for i := range recvs {
		recvs[i] = wr.RecvWR{ID: uint64(1000 + i), SGList: []wr.SGE{{Addr: addrOfBuf(bufs) + uint64(i)*64, Length: 32, LKey: k}, {Addr: addrOfBuf(bufs) + uint64(i)*64 + 32, Length: 32, LKey: k}}}
	}
	if n, err := srq.PostRecv(recvs); n != 7 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("filling the SRQ: %d, %v", n, err)
	}
	if n, err := srq.PostRecv([]wr.RecvWR{{SGList: make([]wr.SGE, 3)}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("3 SGEs on a 2-SGE SRQ: %d, %v", n, err)
	}
	next := uint64(1007)
	seen := map[uint64]bool{}
	for round := range 200 {
		s, hs := s1, hs1
		if round%2 == 1 {
			s, hs = s2, hs2
		}
		_ = hs
		mustPost2(t, s, []wr.SendWR{{ID: uint64(round), Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: 10, LKey: km}}}})
		h.run()
		pollN(t, scq, 1)
		c := pollN(t, rcq, 1)[0]
		if c.Status != wr.Success || c.ByteLen != 10 || seen[c.ID] {
			t.Fatalf("round %d: %+v (seen %v)", round, c, seen[c.ID])
		}
		seen[c.ID] = true
		// Give the WQE back: repost one request.
		mustPostRecv(t, srq, []wr.RecvWR{{ID: next, SGList: recvs[c.ID%8].SGList}})
		next++
	}
	if getBE32(unsafe.Pointer(srq.db)) != srq.ring.counter&0xffff || srq.ring.counter != 207 {
		t.Errorf("SRQ counter %d, doorbell record %d", srq.ring.counter, getBE32(unsafe.Pointer(srq.db)))
	}
	_ = r2
}

func mustPost2(t *testing.T, q *QP, wrs []wr.SendWR) {
	t.Helper()
	n, err := q.PostSend(wrs)
	mustPost(t, n, err, len(wrs))
}

func mustPostRecv(t *testing.T, s *SRQ, wrs []wr.RecvWR) {
	t.Helper()
	n, err := s.PostRecv(wrs)
	mustPost(t, n, err, len(wrs))
}

func TestModelUD(t *testing.T) {
	h := newHCA(t)
	ctx := h.openContext()
	cq, hcq := h.createCQ(ctx, 16)
	caps := qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}
	a, ha := h.createQP(ctx, provider.QPInitAttr{Type: qp.UD, Caps: caps, SignalAll: true}, hcq, hcq, nil)
	b, hb := h.createQP(ctx, provider.QPInitAttr{Type: qp.UD, Caps: caps}, hcq, hcq, nil)
	hb.qkey = 0x11112222
	ah := h.createAH(ctx, qp.AHAttr{IsGlobal: true, DGID: [16]byte{0xfe, 0x80}, SGIDIndex: 1, HopLimit: 64, PortNum: 1, SL: 3}, true, [6]byte{2, 0, 0, 0, 0, 9})
	if ah.av[avOffRMAC+5] != 9 || getBE16(unsafe.Pointer(&ah.av[avOffRLID])) < roceUDPEncapPortMin {
		t.Errorf("RoCE AV % x", ah.av)
	}
	buf := make([]byte, 128)
	k := h.regMR(buf, wr.LocalWrite)
	b.PostRecv([]wr.RecvWR{{ID: 5, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: grhSize, LKey: k}, {Addr: addrOfBuf(buf) + 64, Length: 64, LKey: k}}}})
	msg := []byte("hello, datagram")
	// Unsignaled, but the QP signals every request.
	mustPost2(t, a, []wr.SendWR{{ID: 4, Opcode: wr.OpSend, Flags: wr.Inline, AH: dest{ah}, RemoteQPN: hb.qpn, RemoteQKey: 0x11112222,
		SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: uint32(len(msg))}}}})
	// No AH, or not an mlx5 one: refused.
	if n, err := a.PostSend([]wr.SendWR{{Opcode: wr.OpSend}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("UD send without AH: %d, %v", n, err)
	}
	h.run()
	cs := pollN(t, cq, 2)
	if cs[0].ID == 4 {
		cs[0], cs[1] = cs[1], cs[0]
	}
	if cs[1].ID != 4 || cs[1].Opcode != wr.WCSend || cs[1].QPNum != ha.qpn {
		t.Errorf("send %+v", cs[1])
	}
	if r := cs[0]; r.ID != 5 || r.ByteLen != uint32(grhSize+len(msg)) || r.Flags != wr.WCGRH || r.SrcQP != ha.qpn {
		t.Errorf("UD receive %+v", r)
	}
	if string(buf[64:64+len(msg)]) != string(msg) {
		t.Errorf("UD payload %q", buf[64:64+len(msg)])
	}
	// A wrong Q_Key is dropped silently; the sender still completes.
	mustPost2(t, a, []wr.SendWR{{ID: 6, Opcode: wr.OpSend, Flags: wr.Inline, AH: dest{ah}, RemoteQPN: hb.qpn, RemoteQKey: 1,
		SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: 4}}}})
	h.run()
	if c := pollN(t, cq, 1)[0]; c.ID != 6 || c.Status != wr.Success {
		t.Errorf("UD send to a wrong Q_Key: %+v", c)
	}
}

func TestModelArm(t *testing.T) {
	p := newRCPair(t, pairCaps, 8)
	buf := make([]byte, 64)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	w := wr.SendWR{Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}, Remote: wr.Remote{Addr: addrOfBuf(buf), RKey: k}}
	for i := range 3 {
		if err := p.cqa.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		p.h.run()
		if p.hca.armed == 0 || p.hca.armSN != uint32(i) {
			t.Fatalf("arm %d: model sees armed=%d sn=%d", i, p.hca.armed, p.hca.armSN)
		}
		mustPost2(t, p.a, []wr.SendWR{w, w})
		p.h.run()
		if p.hca.events != i+1 {
			t.Fatalf("arm %d: %d events, want one per arm", i, p.hca.events)
		}
		pollN(t, p.cqa, 2)
		p.cqa.CQEvent() // the core read the event
	}
	// Solicited-only: an unsolicited completion raises nothing.
	p.cqa.ReqNotify(true)
	p.h.run()
	mustPost2(t, p.a, []wr.SendWR{w})
	p.h.run()
	if p.hca.events != 3 || p.hca.armed != 2 {
		t.Errorf("solicited-only arm fired on an unsolicited completion (events %d, armed %d)", p.hca.events, p.hca.armed)
	}
	word := getBE32(unsafe.Pointer(&p.cqa.db[cqArmDB]))
	if word>>28 != 3 || word&cqDBReqNotSol == 0 || word&0xffffff != 6 {
		t.Errorf("arm word %#x: want sn 3, solicited, consumer index 6", word)
	}
}

// Destroying a QP removes its completions from the CQ, keeping the others
// in order, as rdma-core's __mlx5_cq_clean does.
func TestModelDestroyCleansCQ(t *testing.T) {
	h := newHCA(t)
	ctx := h.openContext()
	cq, hcq := h.createCQ(ctx, 16)
	caps := qp.Caps{MaxSendWR: 8, MaxSendSGE: 1, MaxRecvWR: 1, MaxRecvSGE: 1}
	a, ha := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	b, hb := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	peer, hpeer := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	connect(ha, hpeer)
	hb.peer = hpeer
	buf := make([]byte, 64)
	k := h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	w := wr.SendWR{Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}, Remote: wr.Remote{Addr: addrOfBuf(buf), RKey: k}}
	// Fill 3 passes' worth of entries first so cleaning crosses owner bits.
	for range 10 {
		mustPost2(t, a, []wr.SendWR{w})
		h.run()
		pollN(t, cq, 1)
	}
	for i := range 6 {
		q := a
		if i%2 == 1 {
			q = b
		}
		w.ID = uint64(i)
		mustPost2(t, q, []wr.SendWR{w})
		h.run()
	}
	h.destroyQP(a, ha)
	cs := pollN(t, cq, 3)
	for i, c := range cs {
		if c.ID != uint64(2*i+1) || c.QPNum != hb.qpn {
			t.Errorf("after cleaning, completion %d is %+v", i, c)
		}
	}
	if n, err := a.PostSend([]wr.SendWR{w}); n != 0 || err == nil {
		t.Errorf("posting on a closed QP: %d, %v", n, err)
	}
	_ = peer
}

func TestModelRefusals(t *testing.T) {
	p := newRCPair(t, qp.Caps{MaxSendWR: 3, MaxRecvWR: 2, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 16}, 16)
	buf := make([]byte, 64)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite|wr.RemoteAtomic|wr.RemoteRead)
	a := addrOfBuf(buf)
	sge := []wr.SGE{{Addr: a, Length: 8, LKey: k}}
	sq := p.a.sq
	snapshot := func() []byte {
		return append([]byte(nil), unsafe.Slice((*byte)(sq.start), uintptr(sq.wqeCnt)*sendWQEBB)...)
	}
	for _, c := range []struct {
		name string
		w    wr.SendWR
		err  error
	}{
		{"too many SGEs", wr.SendWR{Opcode: wr.OpSend, SGList: make([]wr.SGE, 3)}, unix.EINVAL},
		{"inline too long", wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline, SGList: []wr.SGE{{Addr: a, Length: 64}}}, unix.EINVAL},
		{"misaligned atomic", wr.SendWR{Opcode: wr.OpAtomicFetchAdd, SGList: sge, Remote: wr.Remote{Addr: a + 4, RKey: k}}, unix.EINVAL},
		{"short atomic", wr.SendWR{Opcode: wr.OpAtomicCmpAndSwp, SGList: []wr.SGE{{Addr: a, Length: 4, LKey: k}}, Remote: wr.Remote{Addr: a, RKey: k}}, unix.EINVAL},
		{"inline read", wr.SendWR{Opcode: wr.OpRDMARead, Flags: wr.Inline, SGList: sge, Remote: wr.Remote{Addr: a, RKey: k}}, unix.EINVAL},
		{"bind MW", wr.SendWR{Opcode: wr.OpBindMW}, unix.EOPNOTSUPP},
		{"send with invalidate", wr.SendWR{Opcode: wr.OpSendWithInv}, unix.EOPNOTSUPP},
	} {
		before, post := snapshot(), sq.curPost
		n, err := p.a.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: sge}, c.w})
		if n != 1 || !errors.Is(err, c.err) {
			t.Errorf("%s: posted %d, %v; want 1, %v", c.name, n, err, c.err)
		}
		after := snapshot()
		first := int(post&(sq.wqeCnt-1)) * sendWQEBB
		after = append(after[:first:first], after[first+sendWQEBB:]...)
		before = append(before[:first:first], before[first+sendWQEBB:]...)
		if !bytes.Equal(before, after) || sq.curPost != post+1 {
			t.Errorf("%s: the refused request wrote to the send queue", c.name)
		}
		p.b.PostRecv([]wr.RecvWR{{SGList: []wr.SGE{{Addr: a, Length: 64, LKey: k}}}})
		p.h.run()
		pollN(t, p.cqa, 1)
		pollN(t, p.cqb, 1)
	}
	// The depth is what the ring holds, as libmlx5 grants it: 3 were
	// asked for, and 4 of the 256-byte WQEs fit in the 1 KiB ring.
	if c := p.a.GrantedCaps(); c != (qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 60}) {
		t.Errorf("granted %+v", c)
	}
	w := wr.SendWR{Opcode: wr.OpRDMAWrite, SGList: sge, Remote: wr.Remote{Addr: a, RKey: k}}
	n, err := p.a.PostSend([]wr.SendWR{w, w, w, w, w})
	if n != 4 || !errors.Is(err, unix.ENOMEM) {
		t.Errorf("posting 5 on a depth of 4: %d, %v", n, err)
	}
	if n, err := p.a.PostSend([]wr.SendWR{w}); n != 0 || !errors.Is(err, unix.ENOMEM) {
		t.Errorf("posting on a full queue: %d, %v", n, err)
	}
	// Unsignaled requests retire only with a signaled one.
	w.Flags = wr.Signaled
	p.h.run()
	if n, err := p.a.PostSend([]wr.SendWR{w}); n != 0 || !errors.Is(err, unix.ENOMEM) {
		t.Errorf("posting before polling: %d, %v", n, err)
	}
	// Receive queue: 2 asked for, one SGE; the ring is at least a 64-byte
	// block, so 4 of the 16-byte WQEs.
	r := wr.RecvWR{SGList: []wr.SGE{{Addr: a, Length: 8, LKey: k}}}
	if n, err := p.b.PostRecv([]wr.RecvWR{r, r, r, r, r}); n != 4 || !errors.Is(err, unix.ENOMEM) {
		t.Errorf("5 receives on a depth of 4: %d, %v", n, err)
	}
	if n, err := p.a.PostRecv([]wr.RecvWR{{SGList: make([]wr.SGE, 2)}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("2 SGEs on a 1-SGE receive queue: %d, %v", n, err)
	}
	// Receive WQEs hold what the ring allows: a 1-SGE request on a
	// 1-segment WQE has no end marker; the device stops at the WQE's end.
	if p.b.rq.maxGS != 1 {
		t.Errorf("receive WQE of %d segments", p.b.rq.maxGS)
	}
}

// The data path allocates nothing.
func TestModelHotPathAllocs(t *testing.T) {
	p := newRCPair(t, qp.Caps{MaxSendWR: 16, MaxSendSGE: 1, MaxRecvWR: 16, MaxRecvSGE: 1}, 255)
	buf := make([]byte, 64)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}, Remote: wr.Remote{Addr: addrOfBuf(buf), RKey: k}}}
	recv := []wr.RecvWR{{ID: 1, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}}}
	out := make([]wr.Completion, 4)
	for name, f := range map[string]func(){
		"post send": func() { p.a.PostSend(send); p.a.sq.tail.Store(p.a.sq.head); p.ha.sqCI = p.a.sq.curPost },
		"post recv": func() { p.b.PostRecv(recv); p.b.rq.tail.Store(p.b.rq.head) },
		"poll":      func() { p.cqa.Poll(out) },
		"arm":       func() { p.cqa.ReqNotify(false) },
	} {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
	// Poll with completions to decode, with timestamps and without.
	for _, ts := range []bool{false, true} {
		testDecodeAllocs(t, send, buf, out, ts)
	}
}

// testDecodeAllocs lets the model produce 150 completions first, on a
// fresh pair (TestModelHotPathAllocs's loop rang doorbells the model never
// read), then counts the allocations of polling them one by one; with
// timestamps, also of converting each one's to wall time.
func testDecodeAllocs(t *testing.T, send []wr.SendWR, buf []byte, out []wr.Completion, ts bool) {
	p := newRCPairCQ(t, qp.Caps{MaxSendWR: 256, MaxSendSGE: 1}, provider.CQAttr{CQE: 255, Timestamp: ts})
	p.h.setClockInfo(tsToNSVectors[0].info, 2)
	k := p.h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	send[0].SGList[0].LKey, send[0].Remote.RKey = k, k
	for range 15 {
		batch := make([]wr.SendWR, 10)
		for i := range batch {
			batch[i] = send[0]
		}
		mustPost2(t, p.a, batch)
		p.h.run()
	}
	if a := testing.AllocsPerRun(100, func() {
		if p.cqa.Poll(out[:1]) != 1 {
			t.Fatal("no completion to poll")
		}
		if (out[0].Timestamp != 0) != ts {
			t.Fatalf("timestamps %v: completion %+v", ts, out[0])
		}
		if ts {
			if _, err := p.ctx.TimestampNS(out[0].Timestamp); err != nil {
				t.Fatal(err)
			}
		}
	}); a != 0 {
		t.Errorf("decoding completions (timestamps %v) allocates %.1f times per call", ts, a)
	}
}

// TestModelTimestamps: the completions of a CQ with timestamps carry the
// device's clock when it wrote each CQE, which the clock info converts to
// wall time; those of a CQ without carry none.
func TestModelTimestamps(t *testing.T) {
	for _, ts := range []bool{false, true} {
		p := newRCPairCQ(t, pairCaps, provider.CQAttr{CQE: 16, Timestamp: ts})
		src, dst := make([]byte, 64), make([]byte, 64)
		ks, kd := p.h.regMR(src, 0), p.h.regMR(dst, wr.LocalWrite)
		recvs := make([]wr.RecvWR, 3)
		sends := make([]wr.SendWR, 3)
		for i := range recvs {
			recvs[i] = wr.RecvWR{ID: uint64(10 + i), SGList: []wr.SGE{{Addr: addrOfBuf(dst), Length: 64, LKey: kd}}}
			sends[i] = wr.SendWR{ID: uint64(20 + i), Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(src), Length: 8, LKey: ks}}}
		}
		n, err := p.b.PostRecv(recvs)
		mustPost(t, n, err, 3)
		mustPost2(t, p.a, sends)
		p.h.run()
		// The model writes each receive's CQE before its send's; its clock
		// steps by modelCycleStep per CQE.
		got := append(pollN(t, p.cqb, 3), pollN(t, p.cqa, 3)...)
		if !ts {
			for _, c := range got {
				if c.Timestamp != 0 {
					t.Errorf("CQ without timestamps: %+v", c)
				}
			}
			continue
		}
		for i := 1; i < 3; i++ {
			if d := got[i].Timestamp - got[i-1].Timestamp; d != 2*modelCycleStep {
				t.Errorf("receives %d and %d: %d cycles apart, want %d (%+v)", i-1, i, d, 2*modelCycleStep, got)
			}
			if d := got[3+i].Timestamp - got[i].Timestamp; d != modelCycleStep {
				t.Errorf("send %d completed %d cycles after its receive, want %d", i, d, modelCycleStep)
			}
		}
		if got[0].Timestamp == 0 || got[0].Timestamp > p.h.cycles {
			t.Errorf("first timestamp %#x, model clock at %#x", got[0].Timestamp, p.h.cycles)
		}
		// Converted: the clock info moment is the first receive; the
		// others are later by the cycles between them.
		ci := clockInfo{nsec: 1_700_000_000_000_000_000, lastCycles: got[0].Timestamp, mult: 5 << 20, shift: 20, mask: 1<<48 - 1}
		p.h.setClockInfo(ci, 6)
		for i, c := range got {
			ns, err := p.ctx.TimestampNS(c.Timestamp)
			want := ci.nsec + 5*(c.Timestamp-got[0].Timestamp)
			if err != nil || ns != want {
				t.Errorf("completion %d: %d ns (%v), want %d", i, ns, err, want)
			}
		}
	}
}
