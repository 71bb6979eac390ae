package mlx5

// FuzzCQE feeds CQEs the device could write (any opcode, syndrome, WQE
// counter, QP, SRQ or user index) to the real poll path, on a context of
// the in-memory model with a CQ, an RC QP with its own receive queue and
// one on an SRQ, under both CQE versions. The device is trusted, but a
// CQE naming a destroyed QP, a counter past the ring or a CQE kind the
// provider never asked for must be skipped or decoded, never read or
// written outside the provider's buffers.

import (
	"testing"
	"unsafe"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// fuzzCQE returns a 64-byte CQE with an opcode, a QPN and a WQE counter.
func fuzzCQE(opcode uint8, qpn uint32, counter uint16, fill func(c unsafe.Pointer)) []byte {
	b := make([]byte, cqe64Size)
	c := unsafe.Pointer(&b[0])
	putBE32(at(c, cqeOffSopDropQPN), qpn)
	*(*uint8)(at(c, cqeOffWQECounter)) = uint8(counter >> 8)
	*(*uint8)(at(c, cqeOffWQECounter+1)) = uint8(counter)
	if fill != nil {
		fill(c)
	}
	b[cqeOffOpOwn] = opcode << cqeOpcodeShift
	return b
}

func FuzzCQE(f *testing.F) {
	req := fuzzCQE(cqeReq, uint32(opRDMAWrite)<<24, 0, nil)
	recv := fuzzCQE(cqeRespSendIm, 0, 0, func(c unsafe.Pointer) {
		putBE32(at(c, cqeOffByteCnt), 10)
		putBE32(at(c, cqeOffImmInvalPkey), 0xcafe)
	})
	reqErr := fuzzCQE(cqeReqErr, uint32(opSend)<<24, 3, func(c unsafe.Pointer) {
		*(*uint8)(at(c, errOffSyndrome)) = syndRemoteAccessErr
	})
	// targets: 2 bits per CQE, which QP or SRQ it names (see below).
	f.Add(req, uint16(0b01), false)
	f.Add(req, uint16(0b01), true)
	f.Add(recv, uint16(0b10), false)
	f.Add(recv, uint16(0b11), true)
	f.Add(append(append(req, recv...), reqErr...), uint16(0b01_10_01), false)
	f.Add(append(append(req, recv...), reqErr...), uint16(0b01_10_01), true)
	f.Add(fuzzCQE(cqeRespErr, 0, 0xffff, nil), uint16(0b11), true)
	f.Add(fuzzCQE(cqeResizeCQ, 0, 0, nil), uint16(0), false)
	// One context per CQE version for all iterations: the model keeps
	// the UAR pages of every context it opened mapped.
	type model struct {
		h   *hca
		ctx *Context
	}
	var models [2]model
	for i, v0 := range []bool{false, true} {
		h := newHCA(f)
		h.oldCQE = v0
		models[i] = model{h, h.openContext()}
	}
	f.Fuzz(func(t *testing.T, cqes []byte, targets uint16, v0 bool) {
		m := models[0]
		if v0 {
			m = models[1]
		}
		h, ctx := m.h, m.ctx
		// This iteration's failures are its own, and the numbers of the
		// last one's objects, all destroyed, are free again.
		h.t, h.nextNum = t, 0x100
		// An odd number of bytes asks for a CQ with timestamps.
		ts := len(cqes)%2 == 1
		cq, hcq := h.createCQEx(ctx, provider.CQAttr{CQE: 7, Timestamp: ts})
		srq, hsrq := h.createSRQ(ctx, provider.SRQInitAttr{MaxWR: 3, MaxSGE: 1})
		caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
		rc, hrc := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
		onSRQ, honSRQ := h.createQP(ctx, provider.QPInitAttr{Type: qp.RC, Caps: caps, HasSRQ: true}, hcq, hcq, hsrq)
		// Every iteration frees what it made: the mappings would
		// otherwise run out.
		t.Cleanup(func() {
			h.destroyQP(onSRQ, honSRQ)
			h.destroyQP(rc, hrc)
			for _, c := range []interface{ Close() error }{srq, cq} {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}
		})
		buf := make([]byte, 64)
		k := h.regMR(buf, wr.LocalWrite)
		sge := []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}
		if n, err := srq.PostRecv([]wr.RecvWR{{ID: 1, SGList: sge}, {ID: 2, SGList: sge}}); n != 2 {
			t.Fatal(err)
		}
		if n, err := rc.PostRecv([]wr.RecvWR{{ID: 3, SGList: sge}}); n != 1 {
			t.Fatal(err)
		}

		n := min(len(cqes)/cqe64Size, int(hcq.ncqe))
		stamps := map[uint64]bool{}
		for i := range n {
			e := unsafe.Add(hcq.buf, uintptr(i)*uintptr(hcq.size))
			c := unsafe.Add(e, hcq.size-cqe64Size)
			copy(unsafe.Slice((*byte)(c), cqe64Size), cqes[i*cqe64Size:])
			// A CQE names a QP by number (sop_drop_qpn) and, with CQE
			// version 1, by user index (srqn_uidx); a receive on an SRQ
			// under version 0 names the SRQ there. The fuzzer picks
			// what the CQE names: its own bits (0), the RC QP (1), the
			// QP on the SRQ (2), or the SRQ alone (3).
			var qp *QP
			switch (targets >> (2 * i)) & 3 {
			case 1:
				qp = rc
			case 2:
				qp = onSRQ
			case 3:
				putBE32(at(c, cqeOffSrqnUidx), srq.num)
			}
			if qp != nil {
				w := getBE32(at(c, cqeOffSopDropQPN))
				putBE32(at(c, cqeOffSopDropQPN), w&^cqeQPNMask|qp.num)
				if !v0 || qp == onSRQ {
					id := qp.rsn
					if v0 {
						id = srq.num
					}
					putBE32(at(c, cqeOffSrqnUidx), id)
				}
			}
			// Owned by software in the first pass over the ring.
			*(*uint8)(at(c, cqeOffOpOwn)) &^= cqeOwnerMask
			stamps[getBE64(at(c, cqeOffTimestamp))] = true
		}
		wc := make([]wr.Completion, 16)
		got := cq.Poll(wc)
		if got < 0 || got > n {
			t.Fatalf("polled %d completions from %d CQEs", got, n)
		}
		for _, c := range wc[:got] {
			_ = c.Err()
			if ts && !stamps[c.Timestamp] || !ts && c.Timestamp != 0 {
				t.Errorf("timestamps %v: completion %+v has a timestamp no CQE holds", ts, c)
			}
		}
		if more := cq.Poll(wc); more != 0 {
			t.Fatalf("second poll found %d more", more)
		}
	})
}
