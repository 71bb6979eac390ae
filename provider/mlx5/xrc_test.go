package mlx5

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// TestModelXRCSend posts on an XRC send QP to the device model: each
// send's WQE carries the XRC segment with the SRQ number it names, the
// model delivers the message into that SRQ of the target's domain, and a
// wrong number fails the request with a remote invalid request error, as
// the device does. The SRQs here are the provider's basic ones, whose
// WQEs an XRC SRQ's share; the provider makes no XRC SRQ or XRC receive
// QP yet (their completions name the SRQ by user index), so the receive
// completions are checked only under CQE version 0, which names an SRQ
// by number for both kinds.
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
	target := &hwQP{qpn: h.num(), typ: qp.XRCRecv, xrcd: 1}
	connect(hs, target)
	var srqs [3]*SRQ
	var hsrqs [3]*hwSRQ
	bufs := make([]byte, 3*64)
	k := h.regMR(bufs, wr.LocalWrite)
	for i := range srqs {
		srqs[i], hsrqs[i] = h.createSRQ(ctx, provider.SRQInitAttr{MaxWR: 2, MaxSGE: 1})
		hsrqs[i].xrcd = 1 + i/2
		if old := modelOldCQE; old {
			hsrqs[i].cq = hrcq
		}
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
	if modelOldCQE {
		got := map[uint64]uint32{}
		for _, c := range pollN(t, rcq, 2) {
			if c.Status != wr.Success || c.QPNum != target.qpn {
				t.Errorf("receive %+v", c)
			}
			got[c.ID] = c.ByteLen
		}
		if got[101] != uint32(len(msg)) || got[100] != 3 {
			t.Errorf("receives %v", got)
		}
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
	if modelOldCQE {
		pollN(t, rcq, 1)
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
	_ = rcq
}
