package mlx5

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// TestModelXRCSend posts on an XRC send QP to the device model: each
// send's WQE carries the XRC segment with the SRQ number it names, the
// model delivers the message into that XRC SRQ of the target's domain,
// and a wrong number (another domain's SRQ, or none) fails the request
// with a remote invalid request error, as the device does.
func TestModelXRCSend(t *testing.T) {
	for _, old := range []bool{false, true} {
		modelOldCQE = old
		t.Run(map[bool]string{false: "v1", true: "v0"}[old], testModelXRCSend)
	}
	modelOldCQE = false
}

func testModelXRCSend(t *testing.T) {
	h := newHCA(t)
	ctx := h.openContext()
	scq, hscq := h.createCQ(ctx, 16)
	rcq, hrcq := h.createCQ(ctx, 16)
	caps := qp.Caps{MaxSendWR: 8, MaxSendSGE: 1, MaxInlineData: 16}
	s, hs := h.createQP(ctx, provider.QPInitAttr{Type: qp.XRCSend, Caps: caps}, hscq, nil, nil)
	if s.rq != nil {
		t.Fatal("an XRC send QP has a receive queue")
	}
	// The send queue is RC's with room for the XRC segment.
	rc, _ := sqOverhead(qp.RC)
	if over, err := sqOverhead(qp.XRCSend); err != nil || over != rc+xrcSegSize {
		t.Errorf("XRC send overhead %d, %v; want RC's %d + %d", over, err, rc, xrcSegSize)
	}
	if n, err := s.PostRecv([]wr.RecvWR{{}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("receive posted to an XRC send QP: %d, %v", n, err)
	}
	// The target: an XRC receive QP of domain 1, with two SRQs in it and
	// one in another domain.
	_, target := h.createXRCRecvQP(ctx, 1)
	connect(hs, target)
	var srqs [3]*SRQ
	var hsrqs [3]*hwSRQ
	bufs := make([]byte, 3*64)
	k := h.regMR(bufs, wr.LocalWrite)
	for i := range srqs {
		srqs[i], hsrqs[i] = h.createXRCSRQ(ctx, provider.SRQInitAttr{MaxWR: 2, MaxSGE: 1}, hrcq, 1+i/2)
		mustPostRecv(t, srqs[i], []wr.RecvWR{{ID: uint64(100 + i), SGList: []wr.SGE{{Addr: addrOfBuf(bufs) + uint64(i)*64, Length: 64, LKey: k}}}})
	}
	msg := []byte("xrc to the second")
	km := h.regMR(msg, 0)
	mustPost2(t, s, []wr.SendWR{
		{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: uint32(len(msg)), LKey: km}}, RemoteSRQN: hsrqs[1].srqn},
		{ID: 2, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline, SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: 3}}, RemoteSRQN: hsrqs[0].srqn},
	})
	// The first WQE as written: control, then the XRC segment.
	wqe := unsafe.Slice((*byte)(hs.sq), 64)
	if n := getBE32(at(unsafe.Pointer(&wqe[0]), 16)); n != hsrqs[1].srqn {
		t.Errorf("XRC segment names SRQ %#x, want %#x", n, hsrqs[1].srqn)
	}
	if ds := wqe[7] & 0x3f; ds != 3 {
		t.Errorf("WQE of %d 16-byte units, want 3 (control, XRC, data)", ds)
	}
	h.run()
	for _, c := range pollN(t, scq, 2) {
		if c.Status != wr.Success {
			t.Errorf("send %d: %+v", c.ID, c)
		}
	}
	if !bytes.Equal(bufs[64:64+len(msg)], msg) || !bytes.Equal(bufs[:3], msg[:3]) {
		t.Errorf("the SRQs' buffers hold %q and %q", bufs[64:64+len(msg)], bufs[:3])
	}
	if hsrqs[0].ci != 1 || hsrqs[1].ci != 1 || hsrqs[2].ci != 0 {
		t.Errorf("SRQ WQEs consumed %d, %d, %d; want 1, 1, 0", hsrqs[0].ci, hsrqs[1].ci, hsrqs[2].ci)
	}
	got := map[uint64]uint32{}
	for _, c := range pollN(t, rcq, 2) {
		if c.Status != wr.Success || c.QPNum != target.qpn || c.SrcQP != hs.qpn || c.Opcode != wr.WCRecv {
			t.Errorf("receive %+v", c)
		}
		got[c.ID] = c.ByteLen
	}
	if got[101] != uint32(len(msg)) || got[100] != 3 {
		t.Errorf("receives %v", got)
	}
	// A batch (ibv_wr_*) writes the same segment.
	mustPostRecv(t, srqs[1], []wr.RecvWR{{ID: 200, SGList: []wr.SGE{{Addr: addrOfBuf(bufs) + 64, Length: 64, LKey: k}}}})
	if err := s.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	if err := s.AddToBatch(&wr.SendWR{ID: 4, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline, SGList: []wr.SGE{{Addr: addrOfBuf(msg) + 4, Length: 2}}, RemoteSRQN: hsrqs[1].srqn}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.EndBatch(); n != 1 || err != nil {
		t.Fatalf("EndBatch = %d, %v", n, err)
	}
	h.run()
	if c := pollN(t, scq, 1)[0]; c.Status != wr.Success || c.ID != 4 {
		t.Errorf("batched send: %+v", c)
	}
	if hsrqs[1].ci != 2 || !bytes.Equal(bufs[64:66], msg[4:6]) {
		t.Errorf("batched send: SRQ consumed %d, buffer %q", hsrqs[1].ci, bufs[64:66])
	}
	if c := pollN(t, rcq, 1)[0]; c.ID != 200 || c.ByteLen != 2 {
		t.Errorf("batched send's receive: %+v", c)
	}
	// An SRQ of another domain, or none, fails the request.
	for _, n := range []uint32{hsrqs[2].srqn, 0xfffff} {
		mustPost2(t, s, []wr.SendWR{{ID: 3, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline, SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: 3}}, RemoteSRQN: n}})
		h.run()
		if c := pollN(t, scq, 1)[0]; c.Status != wr.RemInvReqErr {
			t.Errorf("send to SRQ %#x: %+v, want a remote invalid request error", n, c)
		}
		hs.err = false // the model's QP left the error state, as a reset would
	}
	if hsrqs[2].ci != 0 {
		t.Error("a refused message consumed a receive")
	}
	if n := rcq.Poll(make([]wr.Completion, 4)); n != 0 {
		t.Errorf("%d receive completions for refused messages", n)
	}
}

// TestXRCUdata checks the driver data of an XRC SRQ and an XRC receive
// QP as mlx5_ib decodes them. The SRQ's is struct mlx5_ib_create_srq with
// the buffer and doorbell record, no flags (no signature), reserved words
// zero, and under CQE version 1 a user index of its own from the QPs'
// index space (get_srq_user_index refuses the default there), under
// version 0 the default. The receive QP sends none: the kernel creates an
// XRC_TGT QP without udata.
func TestXRCUdata(t *testing.T) {
	for _, old := range []bool{false, true} {
		h := newHCA(t)
		h.oldCQE = old
		c := h.openContext()
		_, hcq := h.createCQ(c, 4)
		a, _ := h.createQP(c, provider.QPInitAttr{Type: qp.XRCSend, Caps: qp.Caps{MaxSendWR: 1, MaxSendSGE: 1}}, hcq, nil, nil)
		b, err := c.NewSRQ(provider.SRQInitAttr{MaxWR: 100, MaxSGE: 2, XRC: true})
		if err != nil {
			t.Fatal(err)
		}
		sb := b.(*srqBuilder)
		in := request(t, b, abi.SizeofMlx5IbCreateSrq, abi.SizeofMlx5IbCreateSrqResp)
		buf, db, flags, res0, uidx, res1 := ne.u64(in, 0), ne.u64(in, 8), ne.u32(in, 16), ne.u32(in, 20), ne.u32(in, 24), ne.u32(in, 28)
		if buf != addrOf(sb.mem) || db != uint64(uintptr(sb.db)) || flags != 0 || res0 != 0 || res1 != 0 {
			t.Errorf("v1=%v: buf %#x db %#x flags %#x reserved %#x %#x", !old, buf, db, flags, res0, res1)
		}
		switch {
		case old && uidx != defaultUIDX:
			t.Errorf("CQE version 0: XRC SRQ user index %#x, want the default", uidx)
		case !old && (uidx == defaultUIDX || uidx&^cqeSrqnUidxMask != 0 || uidx == a.rsn):
			t.Errorf("CQE version 1: XRC SRQ user index %#x (the send QP has %#x)", uidx, a.rsn)
		}
		if sb.size.nwqe != 128 || sb.size.wqeShift != 6 {
			t.Errorf("XRC SRQ of %d WQEs of %d bytes", sb.size.nwqe, 1<<sb.size.wqeShift)
		}
		_, out := b.Udata()
		(*abi.Mlx5IbCreateSrqResp)(unsafe.Pointer(&out[0])).Srqn = 0x1234
		p, err := b.Finish(provider.Created{SRQNum: 0x1234})
		if err != nil {
			t.Fatal(err)
		}
		s := p.(*SRQ)
		if !s.xrc || s.num != 0x1234 || c.t.srqs.get(0x1234) != s || (!old && c.t.xsrqs.get(uidx) != s) || (old && c.t.xsrqs.get(uidx) != nil) {
			t.Errorf("v1=%v: XRC SRQ %+v not in its tables", !old, s)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if c.t.srqs.get(0x1234) != nil || c.t.xsrqs.get(uidx) != nil {
			t.Error("closed XRC SRQ still found")
		}
		if !old {
			if v, _ := c.uidx.alloc(); v != uidx {
				t.Errorf("closed XRC SRQ's user index %#x not reused (got %#x)", uidx, v)
			}
		}

		qb, err := c.NewQP(provider.QPInitAttr{Type: qp.XRCRecv})
		if err != nil {
			t.Fatal(err)
		}
		if in, out := qb.Udata(); in != nil || out != nil {
			t.Errorf("XRC receive QP driver data %d/%d bytes", len(in), len(out))
		}
		pq, err := qb.Finish(provider.Created{QPNum: 0x77})
		if err != nil {
			t.Fatal(err)
		}
		q := pq.(*QP)
		if q.num != 0x77 || q.sq != nil || q.rq != nil || q.mem != nil || c.t.qps.get(0x77) != nil || c.t.uidx.get(0x77) != nil {
			t.Errorf("XRC receive QP %+v", q)
		}
		if n, err := q.PostSend([]wr.SendWR{{}}); n != 0 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("send on an XRC receive QP: %d, %v", n, err)
		}
		if n, err := q.PostRecv([]wr.RecvWR{{}}); n != 0 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("receive on an XRC receive QP: %d, %v", n, err)
		}
		if err := q.BeginBatch(); !errors.Is(err, unix.EINVAL) {
			t.Errorf("batch on an XRC receive QP: %v", err)
		}
		q.Stop()
		q.Resume()
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestModelXRCRecv receives through XRC SRQs on the device model, on
// devices of both CQE versions: completions on a CQ shared by two XRC
// SRQs and the XRC send QP's own sends (so the lookup alternates between
// QPs and SRQs by user index, and between SRQs), and on another CQ; the
// SRQs' WQEs recycled; a receive length error and a flush completing the
// SRQ WQE they name; an XRC SRQ destroyed with completions in the CQ,
// which go while the others stay, in order, and its user index taken by
// a new SRQ that stale CQEs would otherwise have named; the XRC receive
// QP destroyed with completions still to poll; and polling those
// completions allocates nothing.
func TestModelXRCRecv(t *testing.T) {
	for _, old := range []bool{false, true} {
		modelOldCQE = old
		t.Run(map[bool]string{false: "v1", true: "v0"}[old], testModelXRCRecv)
	}
	modelOldCQE = false
}

func testModelXRCRecv(t *testing.T) {
	h := newHCA(t)
	ctx := h.openContext()
	cq, hcq := h.createCQ(ctx, 16)
	ocq, hocq := h.createCQ(ctx, 16)
	s, hs := h.createQP(ctx, provider.QPInitAttr{Type: qp.XRCSend, Caps: qp.Caps{MaxSendWR: 8, MaxSendSGE: 1, MaxInlineData: 16}}, hcq, nil, nil)
	tq, ht := h.createXRCRecvQP(ctx, 1)
	connect(hs, ht)
	attr := provider.SRQInitAttr{MaxWR: 3, MaxSGE: 1}
	a, ha := h.createXRCSRQ(ctx, attr, hcq, 1)
	b, hb := h.createXRCSRQ(ctx, attr, hcq, 1)
	c, hc := h.createXRCSRQ(ctx, attr, hocq, 1)
	if !modelOldCQE && (a.uidx == defaultUIDX || a.uidx == s.rsn || a.uidx == b.uidx) {
		t.Fatalf("user indexes: send QP %#x, SRQs %#x %#x", s.rsn, a.uidx, b.uidx)
	}
	buf := make([]byte, 16*64)
	k := h.regMR(buf, wr.LocalWrite)
	slot := 0
	recv := func(srq *SRQ, id uint64, n uint32) {
		t.Helper()
		mustPostRecv(t, srq, []wr.RecvWR{{ID: id, SGList: []wr.SGE{{Addr: addrOfBuf(buf) + uint64(slot%16)*64, Length: n, LKey: k}}}})
		slot++
	}
	msg := []byte("0123456789abcdef")
	send := func(id uint64, to *hwSRQ, n uint32) {
		t.Helper()
		mustPost2(t, s, []wr.SendWR{{ID: id, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline, SGList: []wr.SGE{{Addr: addrOfBuf(msg), Length: n}}, RemoteSRQN: to.srqn}})
		h.run() // one doorbell at a time: the model checks each
	}
	type want struct {
		id     uint64
		op     wr.WCOpcode
		status wr.Status
		n      uint32
	}
	check := func(q *CQ, ws ...want) {
		t.Helper()
		for i, c := range pollN(t, q, len(ws)) {
			w := ws[i]
			if c.ID != w.id || c.Status != w.status || (w.status == wr.Success && (c.Opcode != w.op || c.ByteLen != w.n)) {
				t.Errorf("completion %d: %+v, want %+v", i, c, w)
			}
			if w.op == wr.WCRecv && (c.QPNum != ht.qpn || (w.status == wr.Success && c.SrcQP != hs.qpn)) {
				t.Errorf("receive %d names QP %#x from %#x, want %#x from %#x", c.ID, c.QPNum, c.SrcQP, ht.qpn, hs.qpn)
			}
		}
	}

	// Two SRQs and the send QP on one CQ, a third SRQ on another.
	recv(a, 10, 64)
	recv(a, 11, 64)
	recv(b, 20, 64)
	recv(c, 30, 64)
	send(1, ha, 5)
	send(2, hb, 7)
	send(3, hc, 3)
	send(4, ha, 2)
	h.run()
	check(cq, want{10, wr.WCRecv, wr.Success, 5}, want{1, wr.WCSend, wr.Success, 0},
		want{20, wr.WCRecv, wr.Success, 7}, want{2, wr.WCSend, wr.Success, 0},
		want{3, wr.WCSend, wr.Success, 0},
		want{11, wr.WCRecv, wr.Success, 2}, want{4, wr.WCSend, wr.Success, 0})
	check(ocq, want{30, wr.WCRecv, wr.Success, 3})

	// Each completion gave its WQE back: many more rounds than the SRQ
	// holds.
	for i := range 20 {
		recv(b, uint64(100+i), 64)
		send(uint64(200+i), hb, uint32(1+i%16))
		h.run()
		check(cq, want{uint64(100 + i), wr.WCRecv, wr.Success, uint32(1 + i%16)}, want{uint64(200 + i), wr.WCSend, wr.Success, 0})
	}

	// A message longer than the receive: a local length error on the
	// receive, whose WQE is freed, and the sender's request fails.
	recv(b, 40, 4)
	send(5, hb, 10)
	h.run()
	check(cq, want{40, wr.WCRecv, wr.LocLenErr, 0}, want{5, wr.WCSend, wr.RemInvReqErr, 0})
	hs.err = false // the model's QP left the error state, as a reset would
	// A flush of a receive the XRC target had taken.
	recv(b, 41, 64)
	h.flushXRC(ht, hb)
	check(cq, want{41, wr.WCRecv, wr.WRFlushErr, 0})
	for i := range 8 { // the error and the flush freed their WQEs too
		recv(b, uint64(300+i), 64)
		send(uint64(400+i), hb, 1)
		h.run()
		check(cq, want{uint64(300 + i), wr.WCRecv, wr.Success, 1}, want{uint64(400 + i), wr.WCSend, wr.Success, 0})
	}

	// Destroying an XRC SRQ takes its completions out of the CQ; the
	// others stay, in order.
	recv(a, 12, 64)
	recv(b, 21, 64)
	send(6, ha, 1)
	send(7, hb, 2)
	send(8, ha, 3) // no receive posted: RNR
	h.run()
	hs.err = false
	oldUidx := a.uidx
	h.destroySRQ(a, ha)
	if ctx.t.xsrqs.get(oldUidx) != nil || ctx.t.srqs.get(ha.srqn) != nil {
		t.Error("destroyed XRC SRQ still found")
	}
	// Its index goes to the next SRQ (under version 0 the number would
	// be the device's to reuse), where a stale CQE would complete the new
	// SRQ's first WQE.
	d, hd := h.createXRCSRQ(ctx, attr, hcq, 1)
	if !modelOldCQE && d.uidx != oldUidx {
		t.Errorf("new XRC SRQ has user index %#x, not the freed %#x", d.uidx, oldUidx)
	}
	recv(d, 50, 64)
	check(cq, want{6, wr.WCSend, wr.Success, 0}, want{21, wr.WCRecv, wr.Success, 2}, want{7, wr.WCSend, wr.Success, 0},
		want{8, wr.WCSend, wr.RNRRetryExcErr, 0})
	send(9, hd, 4)
	h.run()
	check(cq, want{50, wr.WCRecv, wr.Success, 4}, want{9, wr.WCSend, wr.Success, 0})

	// Polling XRC SRQ receives allocates nothing.
	for i := range 3 {
		recv(d, uint64(60+i), 64)
	}
	for i := range 3 {
		send(uint64(70+i), hd, 1)
	}
	h.run()
	out := make([]wr.Completion, 1)
	if a := testing.AllocsPerRun(5, func() { cq.Poll(out) }); a != 0 {
		t.Errorf("polling XRC receives allocates %.1f times per call", a)
	}

	// The XRC receive QP destroyed with a receive still in the CQ: the
	// CQE names the SRQ, which completes it.
	recv(b, 22, 64)
	send(10, hb, 6)
	h.run()
	h.destroyQP(tq, ht)
	check(cq, want{22, wr.WCRecv, wr.Success, 6}, want{10, wr.WCSend, wr.Success, 0})
	h.destroySRQ(b, hb)
	h.destroySRQ(c, hc)
	h.destroySRQ(d, hd)
}
