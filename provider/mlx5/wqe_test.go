package mlx5

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Step 1 and 2 of docs/mlx5.md: every format the provider writes or reads,
// byte for byte against vectors built with rdma-core's mlx5dv.h.

func diffBytes(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			lo, hi := i&^15, min(i&^15+16, len(got))
			return fmt.Sprintf("first difference at byte %d (BB %d, offset %d):\n got % x\nwant % x", i, i/64, i%64, got[lo:hi], want[lo:hi])
		}
	}
	return ""
}

func TestLayoutMatchesMlx5dv(t *testing.T) {
	ours := map[string]uintptr{
		"sizeof ctrl":             ctrlSegSize,
		"sizeof raddr":            raddrSegSize,
		"sizeof atomic":           atomicSegSize,
		"sizeof data":             dataSegSize,
		"sizeof datagram":         datagramSize,
		"sizeof inline":           inlineHdrSize,
		"sizeof srq next":         srqNextSegSize,
		"sizeof umr ctrl":         umrCtrlSegSize,
		"sizeof mkey context":     mkeyCtxSegSize,
		"sizeof umr klm":          umrKLMSegSize,
		"sizeof cqe64":            cqe64Size,
		"sizeof err cqe":          cqe64Size,
		"cqe64.ml_path":           cqeOffMLPath,
		"cqe64.slid":              cqeOffSLID,
		"cqe64.flags_rqpn":        cqeOffFlagsRQPN,
		"cqe64.srqn_uidx":         cqeOffSrqnUidx,
		"cqe64.imm_inval_pkey":    cqeOffImmInvalPkey,
		"cqe64.byte_cnt":          cqeOffByteCnt,
		"cqe64.timestamp":         cqeOffTimestamp,
		"cqe64.sop_drop_qpn":      cqeOffSopDropQPN,
		"cqe64.wqe_counter":       cqeOffWQECounter,
		"cqe64.signature":         cqeOffSignature,
		"cqe64.op_own":            cqeOffOpOwn,
		"err_cqe.vendor_err_synd": errOffVendorSynd,
		"err_cqe.syndrome":        errOffSyndrome,
		"av.dqp_dct":              avOffDQP,
		"av.stat_rate_sl":         avOffRateSL,
		"av.fl_mlid":              avOffFlMLID,
		"av.rlid":                 avOffRLID,
		"av.rmac":                 avOffRMAC,
		"av.tclass":               avOffTClass,
		"av.hop_limit":            avOffHopLimit,
		"av.grh_gid_fl":           avOffGrhGidFl,
		"av.rgid":                 avOffRGID,
	}
	checkNamed(t, layout, ours)
	consts := map[string]uint64{
		"MLX5_OPCODE_SEND": opSend, "MLX5_OPCODE_SEND_IMM": opSendImm, "MLX5_OPCODE_SEND_INVAL": opSendInval,
		"MLX5_OPCODE_RDMA_WRITE": opRDMAWrite, "MLX5_OPCODE_RDMA_WRITE_IMM": opRDMAWriteImm,
		"MLX5_OPCODE_RDMA_READ": opRDMARead, "MLX5_OPCODE_ATOMIC_CS": opAtomicCS, "MLX5_OPCODE_ATOMIC_FA": opAtomicFA,
		"MLX5_OPCODE_TSO": opTSO, "MLX5_WQE_CTRL_CQ_UPDATE": ctrlCQUpdate, "MLX5_WQE_CTRL_SOLICITED": ctrlSolicited,
		"MLX5_WQE_CTRL_FENCE": ctrlFence, "MLX5_SEND_WQE_BB": sendWQEBB, "MLX5_INLINE_SEG": inlineSeg,
		"MLX5_INVALID_LKEY": invalidLKey, "MLX5_EXTENDED_UD_AV": extendedUDAV, "MLX5_CQE_INVALID": cqeInvalid,
		"MLX5_CQE_REQ_ERR": cqeReqErr, "MLX5_CQE_RESP_ERR": cqeRespErr, "MLX5_CQ_DOORBELL": cqDoorbellOffset,
		"MLX5_CQ_DB_REQ_NOT_SOL": cqDBReqNotSol, "MLX5_RCV_DBR": rcvDBR, "MLX5_SND_DBR": sndDBR,
	}
	checkNamed(t, constants, consts)
}

// checkNamed compares each value mlx5dv.h gave (want, from the generated
// vectors) with the Go one of the same name.
func checkNamed[V uintptr | uint64](t *testing.T, want []struct {
	name  string
	value V
}, ours map[string]V) {
	t.Helper()
	for _, w := range want {
		v, ok := ours[w.name]
		if !ok {
			t.Errorf("%s: no Go counterpart", w.name)
		} else if v != w.value {
			t.Errorf("%s = %#x, mlx5dv.h says %#x", w.name, v, w.value)
		}
	}
}

func TestSegmentVectors(t *testing.T) {
	for i, v := range ctrlVectors {
		var b [16]byte
		prefillPattern(b[:], 0xa5)
		setCtrlSeg(unsafe.Pointer(&b), v.pi, v.opcode, v.opmod, v.qpn, v.fmCeSe, v.ds, v.signature, v.imm)
		if d := diffBytes(b[:], v.want[:]); d != "" {
			t.Errorf("ctrl %d (%+v): %s", i, v, d)
		}
	}
	for i, v := range dataVectors {
		var b [16]byte
		prefillPattern(b[:], 0x3c)
		setDataSeg(unsafe.Pointer(&b), v.length, v.lkey, v.addr)
		if d := diffBytes(b[:], v.want[:]); d != "" {
			t.Errorf("data %d: %s", i, d)
		}
	}
	for i, v := range raddrVectors {
		var b [16]byte
		prefillPattern(b[:], 0x11)
		setRaddrSeg(unsafe.Pointer(&b), v.raddr, v.rkey)
		if d := diffBytes(b[:], v.want[:]); d != "" {
			t.Errorf("raddr %d: %s", i, d)
		}
	}
	for i, v := range atomicVectors {
		var b [16]byte
		prefillPattern(b[:], 0x77)
		setAtomicSeg(unsafe.Pointer(&b), v.opcode, v.swap, v.compareAdd)
		if d := diffBytes(b[:], v.want[:]); d != "" {
			t.Errorf("atomic %d (%v): %s", i, v.opcode, d)
		}
	}
	for i, v := range dgramVectors {
		var b [48]byte
		prefillPattern(b[:], 0x5f)
		setDgramSeg(unsafe.Pointer(&b), v.key, v.dqp, v.ext, v.rateSL, v.flMLID, v.rlid, &v.rmac, v.tclass, v.hopLimit, v.grhGidFl, &v.rgid)
		if d := diffBytes(b[:], v.want[:]); d != "" {
			t.Errorf("datagram %d: %s", i, d)
		}
	}
	var end [16]byte
	setDataSegEnd(unsafe.Pointer(&end))
	if d := diffBytes(end[:], dataVectors[0].want[:]); d != "" {
		t.Errorf("receive list end: %s", d)
	}
}

func TestAddressVectorVectors(t *testing.T) {
	for _, v := range avVectors {
		if v.eth && v.attr.FlowLabel != 0 {
			if s := udpSport(v.attr.FlowLabel); s != v.sport {
				t.Errorf("%s: UDP source port %#x from flow label %#x, ibv_flow_label_to_udp_sport says %#x", v.name, s, v.attr.FlowLabel, v.sport)
			}
		}
		got := makeAV(&v.attr, v.eth, v.dmac, v.sport)
		if d := diffBytes(got[:], v.want[:]); d != "" {
			t.Errorf("%s: %s", v.name, d)
		}
	}
	for range 100 {
		if s := udpSport(0); s < roceUDPEncapPortMin {
			t.Fatalf("random UDP source port %#x below %#x", s, roceUDPEncapPortMin)
		}
	}
}

// testSQ is a send queue over Go memory, with room for every request.
func testSQ(typ qp.Type, qpn, wqeCnt, start uint32, sigAll bool, buf []byte) *sendQueue {
	base := unsafe.Pointer(&buf[0])
	sq := &sendQueue{
		start: base, qend: unsafe.Add(base, uintptr(wqeCnt)*sendWQEBB), wqeCnt: wqeCnt, curPost: start,
		maxPost: 1 << 20, maxGS: 16, maxInl: 1024, qpn: qpn, typ: typ,
		recs: make([]wqeRecord, wqeCnt),
	}
	if sigAll {
		sq.sigBits = ctrlCQUpdate
	}
	return sq
}

// sendWR makes the work request a vector describes; inline data lives in
// Go memory the request points at.
func (v *wrVector) sendWR() wr.SendWR {
	w := wr.SendWR{ID: v.id, Opcode: v.opcode, Flags: v.flags, Imm: v.imm, Remote: wr.Remote{Addr: v.remoteAddr, RKey: v.rkey},
		CompareAdd: v.compareAdd, Swap: v.swap, RemoteQPN: v.remoteQPN, RemoteQKey: v.remoteQKey}
	for i, s := range v.sges {
		g := wr.SGE{Addr: s.addr, Length: s.length, LKey: s.lkey}
		if v.inline != nil {
			g.Addr = uint64(uintptr(unsafe.Pointer(&v.inline[i][0])))
		}
		w.SGList = append(w.SGList, g)
	}
	if v.av >= 0 {
		w.AH = dest{&AH{av: avVectors[v.av].want}}
	}
	return w
}

func TestWQEVectors(t *testing.T) {
	for _, v := range wqeVectors {
		t.Run(v.name, func(t *testing.T) {
			// The ring, then a guard BB that must stay untouched.
			mem := make([]byte, (v.wqeCnt+1)*sendWQEBB)
			buf := mem[:v.wqeCnt*sendWQEBB]
			prefillPattern(buf, v.prefill)
			sq := testSQ(v.qpType, v.qpn, v.wqeCnt, v.startPost, v.sigAll, buf)
			for j := range v.wrs {
				wv := &v.wrs[j]
				w := wv.sendWR()
				av, err := sq.check(&w)
				if err != nil {
					t.Fatalf("request %d refused: %v", j, err)
				}
				idx := sq.curPost & (sq.wqeCnt - 1)
				ctrl, ds, _ := sq.write(&w, av, uint32(j))
				if ctrl != sq.bb(idx) || ds != wv.wantDS || sq.curPost != wv.wantPost {
					t.Errorf("request %d: ds %d, post %#x; want ds %d, post %#x", j, ds, sq.curPost, wv.wantDS, wv.wantPost)
				}
				if r := sq.recs[idx]; r.id != wv.id || r.head != uint32(j) {
					t.Errorf("request %d: wrid[%d] = %d, wqe_head %d", j, idx, r.id, r.head)
				}
				runtime.KeepAlive(wv.inline)
			}
			if d := diffBytes(buf, v.want); d != "" {
				t.Error(d)
			}
			if !bytes.Equal(mem[len(buf):], make([]byte, sendWQEBB)) {
				t.Errorf("wrote past the end of the ring: % x", mem[len(buf):])
			}
		})
	}
}

func TestRecvVectors(t *testing.T) {
	for _, v := range recvVectors {
		buf := make([]byte, 2<<v.wqeShift)
		prefillPattern(buf, v.prefill)
		rq := &recvQueue{start: unsafe.Pointer(&buf[0]), wqeCnt: 2, wqeShift: v.wqeShift, maxGS: (1 << v.wqeShift) / dataSegSize, wrid: make([]uint64, 2)}
		w := wr.RecvWR{ID: 77}
		for _, s := range v.sges {
			w.SGList = append(w.SGList, wr.SGE{Addr: s.addr, Length: s.length, LKey: s.lkey})
		}
		rq.write(0, &w)
		if d := diffBytes(buf[:1<<v.wqeShift], v.want); d != "" || rq.wrid[0] != 77 {
			t.Errorf("receive %q: %s (wrid %d)", v.name, d, rq.wrid[0])
		}
	}
	for _, v := range srqVectors {
		size := 1 << v.wqeShift
		buf := make([]byte, 2*size)
		prefillPattern(buf[:size], v.prefill)
		s := srqRing{start: unsafe.Pointer(&buf[0]), wqeShift: v.wqeShift, nwqe: 2, maxGS: uint32(size-srqNextSegSize) / dataSegSize,
			wrid: make([]uint64, 2)}
		next := srqNext(s.wqe(0))
		w := wr.RecvWR{ID: 78}
		for _, g := range v.sges {
			w.SGList = append(w.SGList, wr.SGE{Addr: g.addr, Length: g.length, LKey: g.lkey})
		}
		s.write(&w)
		if d := diffBytes(buf[:size], v.want); d != "" || s.wrid[0] != 78 || s.head != uint32(next)&1 {
			t.Errorf("SRQ receive %q: %s (wrid %d, head %d)", v.name, d, s.wrid[0], s.head)
		}
	}
	buf := make([]byte, srqLinkVector.nwqe<<srqLinkVector.wqeShift)
	s := srqRing{start: unsafe.Pointer(&buf[0]), wqeShift: srqLinkVector.wqeShift, nwqe: srqLinkVector.nwqe}
	s.link()
	if d := diffBytes(buf, srqLinkVector.want); d != "" || s.head != 0 || s.tail != s.nwqe-1 {
		t.Errorf("SRQ free list: %s (head %d tail %d)", d, s.head, s.tail)
	}
}

// cqeFixture is the QP and SRQ the CQE vectors name.
func cqeFixture(t *testing.T) (*resources, *QP, *SRQ) {
	tb := new(tables)
	qp := &QP{num: fixQPN,
		sq: &sendQueue{wqeCnt: fixSQCnt, recs: make([]wqeRecord, fixSQCnt)},
		rq: &recvQueue{wqeCnt: fixRQCnt, wrid: make([]uint64, fixRQCnt)}}
	for i := range fixSQCnt {
		qp.sq.recs[i] = wqeRecord{id: fixSQID + uint64(i), head: fixWQEHead + uint32(i)}
	}
	for i := range fixRQCnt {
		qp.rq.wrid[i] = fixRQID + uint64(i)
	}
	qp.rq.tail.Store(fixRQTail)
	mem := make([]byte, fixSRQCnt*32)
	srq := &SRQ{num: fixSRQN, mem: mem, ring: srqRing{start: unsafe.Pointer(&mem[0]), wqeShift: 5, nwqe: fixSRQCnt, wrid: make([]uint64, fixSRQCnt)}}
	srq.ring.link()
	for i := range fixSRQCnt {
		srq.ring.wrid[i] = fixSRQID + uint64(i)
	}
	tb.qps.set(fixQPN, qp)
	tb.srqs.set(fixSRQN, srq)
	t.Cleanup(func() { runtime.KeepAlive(mem) })
	return &resources{t: tb}, qp, srq
}

// TestCQEVectors decodes every CQE as a CQ without timestamps does and
// as one with them (which copies the CQE's timestamp as rdma-core's
// read_completion_ts reads it); nothing else may differ.
func TestCQEVectors(t *testing.T) {
	for _, ts := range []bool{false, true} {
		testCQEVectors(t, ts)
	}
}

func testCQEVectors(t *testing.T, ts bool) {
	for _, v := range cqeVectors {
		r, qp, srq := cqeFixture(t)
		r.ts = ts
		tailBefore := srq.ring.tail
		var c wr.Completion
		cqe := v.cqe
		ok := decodeCQE(unsafe.Pointer(&cqe), &c, r)
		if ok != v.ok {
			t.Errorf("%s: decoded %v, want %v", v.name, ok, v.ok)
			continue
		}
		if !ok {
			continue
		}
		want := v.want
		if ts {
			want.Timestamp = v.ts
			if v.ts == 0 {
				t.Errorf("%s: the vector has no timestamp", v.name)
			}
		}
		if c != want {
			t.Errorf("%s (timestamps %v):\n got %+v\nwant %+v", v.name, ts, c, want)
		}
		if v.sqTail != 0 && qp.sq.tail.Load() != v.sqTail {
			t.Errorf("%s: send queue tail %d, want %d", v.name, qp.sq.tail.Load(), v.sqTail)
		}
		if qp.rq.tail.Load() != v.rqTail {
			t.Errorf("%s: receive queue tail %d, want %d", v.name, qp.rq.tail.Load(), v.rqTail)
		}
		if v.srqFreed >= 0 {
			if srq.ring.tail != uint32(v.srqFreed) || srqNext(srq.ring.wqe(tailBefore)) != uint16(v.srqFreed) {
				t.Errorf("%s: SRQ WQE %d not returned to the free list (tail %d)", v.name, v.srqFreed, srq.ring.tail)
			}
		} else if srq.ring.tail != tailBefore {
			t.Errorf("%s: SRQ free list changed", v.name)
		}
		if c.Status != wr.Success && c.Err() == nil {
			t.Errorf("%s: error completion without error", v.name)
		}
	}
}

func TestCQEOwnership(t *testing.T) {
	for _, v := range ownerVectors {
		if got := swOwns(v.opOwn, v.n, v.ncqe); got != v.owned {
			t.Errorf("op_own %#x at index %#x of %d: software owns it %v, want %v", v.opOwn, v.n, v.ncqe, got, v.owned)
		}
		if v.opOwn>>cqeOpcodeShift != v.opcode || v.opOwn&cqeOwnerMask != v.owner ||
			(v.opOwn&cqeSolicitedBit)>>1 != v.se || (v.opOwn>>cqeFormatShift)&cqeFormatMask != v.format {
			t.Errorf("op_own %#x fields disagree with mlx5dv_get_cqe_*: %+v", v.opOwn, v)
		}
	}
	// On a real ring: an entry is software's only in the pass its owner
	// bit names, and the ring's view of it follows the consumer index.
	mem := make([]byte, 4*cqe64Size)
	r := newCQRing(unsafe.Pointer(&mem[0]), 4, cqe64Size)
	for i := range 4 {
		mem[i*cqe64Size+cqeOffOpOwn] = cqeInvalidOpOwn
	}
	if r.swOwned(0) != nil {
		t.Fatal("fresh CQ entry owned by software")
	}
	mem[cqeOffOpOwn] = cqeReq << cqeOpcodeShift // pass 0
	if r.swOwned(0) == nil || r.swOwned(4) != nil {
		t.Error("pass-0 entry: wrong owner")
	}
	mem[cqeOffOpOwn] |= 1 // pass 1
	if r.swOwned(0) != nil || r.swOwned(4) == nil || r.swOwned(8) != nil {
		t.Error("pass-1 entry: wrong owner")
	}
}

// TestCQE128Vectors: a new CQ of 128-byte CQEs is the ring
// mlx5_alloc_cq_buf makes, and polling a ring the device wrote finds each
// CQE in the second half of its entry in the pass its owner bit names,
// as get_sw_cqe does, and decodes it as the 64-byte vector of that CQE.
func TestCQE128Vectors(t *testing.T) {
	t.Setenv("MLX5_CQE_SIZE", "128")
	h := newHCA(t)
	c := h.openContext()
	b, err := c.NewCQ(len(cqe128Init)/cqe128Size - 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.(*cqBuilder).mem[:len(cqe128Init)]; !bytes.Equal(got, cqe128Init[:]) {
		t.Errorf("new 128-byte CQ ring:\n got %x\nwant %x", got, cqe128Init)
	}
	b.Abort()

	byName := map[string]cqeVector{}
	for _, v := range cqeVectors {
		byName[v.name] = v
	}
	mem, err := allocQueueMem(len(cqe128Ring), c.pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer freeQueueMem(mem)
	copy(mem, cqe128Ring[:])
	r := newCQRing(unsafe.Pointer(&mem[0]), uint32(len(cqe128Ring)/cqe128Size), cqe128Size)
	for _, p := range cqe128Polls {
		cqe := r.swOwned(p.n)
		off := -1
		if cqe != nil {
			off = int(uintptr(cqe) - uintptr(unsafe.Pointer(&mem[0])))
		}
		if off != p.off {
			t.Errorf("index %d: CQE at offset %d, want %d", p.n, off, p.off)
			continue
		}
		if cqe == nil {
			continue
		}
		v := byName[p.name]
		res, _, _ := cqeFixture(t)
		var wc wr.Completion
		if ok := decodeCQE(cqe, &wc, res); ok != v.ok || wc != v.want {
			t.Errorf("index %d (%s): decoded %v %+v, want %v %+v", p.n, p.name, ok, wc, v.ok, v.want)
		}
	}
}

func TestSizeVectors(t *testing.T) {
	for _, v := range sizeVectors {
		sq, err1 := calcSQ(&sizeLimits, v.qpType, v.caps)
		rq, err2 := calcRQ(&sizeLimits, v.caps, v.hasSRQ)
		if gotErr := err1 != nil || err2 != nil; gotErr != v.err {
			t.Errorf("%s: errors %v, %v; want error %v", v.name, err1, err2, v.err)
			continue
		}
		if v.err {
			if !errors.Is(err1, unix.EINVAL) && !errors.Is(err2, unix.EINVAL) {
				t.Errorf("%s: want EINVAL, got %v, %v", v.name, err1, err2)
			}
			continue
		}
		if sq != v.sq || rq != v.rq {
			t.Errorf("%s:\n got %+v %+v\nwant %+v %+v", v.name, sq, rq, v.sq, v.rq)
		}
	}
	for _, v := range srqSizeVectors {
		got, err := calcSRQ(&sizeLimits, v.attr)
		if (err != nil) != v.err || (!v.err && got != v.want) {
			t.Errorf("SRQ %+v: %+v, %v; want %+v (error %v)", v.attr, got, err, v.want, v.err)
		}
	}
}

func TestSyndromeDefault(t *testing.T) {
	if s := syndromeStatus(0xee); s != wr.GeneralErr {
		t.Errorf("unknown syndrome maps to %v", s)
	}
}
