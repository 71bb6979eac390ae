package mlx5

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Segment builders. Each writes exactly the bytes the matching mlx5dv.h
// helper (or, where mlx5dv.h has none, rdma-core's qp.c) writes, and no
// others: tests compare them byte for byte with vectors the C helpers
// produce (hack/mlx5gen).

// setCtrlSeg fills a control segment as mlx5dv_set_ctrl_seg does: the WQE
// index pi (the send queue's BB counter, wrapping at 0xffff), the opcode
// and its modifier, the QP number, the WQE's size ds in 16-byte units, the
// fence/completion/solicited bits and the immediate (host order, written
// big-endian). Bytes 9 and 10 (the DCI stream channel) are not touched.
func setCtrlSeg(p unsafe.Pointer, pi uint16, opcode, opmod uint8, qpn uint32, fmCeSe, ds, signature uint8, imm uint32) {
	putBE32(p, uint32(opmod)<<24|uint32(pi)<<8|uint32(opcode))
	putBE32(at(p, 4), qpn<<8|uint32(ds))
	*(*uint8)(at(p, 8)) = signature
	*(*uint8)(at(p, 11)) = fmCeSe
	putBE32(at(p, 12), imm)
}

// setDataSeg fills a data (gather or scatter) segment: mlx5dv_set_data_seg.
func setDataSeg(p unsafe.Pointer, length, lkey uint32, addr uint64) {
	putBE64(p, uint64(length)<<32|uint64(lkey))
	putBE64(at(p, 8), addr)
}

// setDataSegEnd writes the entry that ends a receive scatter list before
// its last slot: zero length, the invalid lkey, address zero.
func setDataSegEnd(p unsafe.Pointer) { setDataSeg(p, 0, invalidLKey, 0) }

// setRaddrSeg fills a remote address segment (RDMA and atomics).
func setRaddrSeg(p unsafe.Pointer, raddr uint64, rkey uint32) {
	putBE64(p, raddr)
	putBE64(at(p, 8), uint64(rkey)<<32)
}

// setAtomicSeg fills an atomic segment: compare-and-swap carries the swap
// and compare operands; fetch-and-add only the addend, in swap_add, and
// leaves compare as it was (the device ignores it), as rdma-core does.
func setAtomicSeg(p unsafe.Pointer, op wr.Opcode, swap, compareAdd uint64) {
	if op == wr.OpAtomicCmpAndSwp {
		putBE64(p, swap)
		putBE64(at(p, 8), compareAdd)
	} else {
		putBE64(p, compareAdd)
	}
}

// addressVector is the 48-byte address of a UD destination (struct
// mlx5_wqe_av), which a UD WQE's datagram segment carries.
type addressVector [datagramSize]byte

// Offsets in an address vector.
const (
	avOffKey      = 0  // key: qkey (be32) + reserved, or a 64-bit DC key
	avOffDQP      = 8  // dqp_dct, be32: extended-AV bit 31 | destination QPN
	avOffRateSL   = 12 // stat_rate_sl
	avOffFlMLID   = 13 // fl_mlid
	avOffRLID     = 14 // rlid, be16 (RoCE v2: the UDP source port)
	avOffRMAC     = 20 // rmac[6]
	avOffTClass   = 26
	avOffHopLimit = 27
	avOffGrhGidFl = 28 // grh_gid_fl, be32: grh<<30 | sgid_index<<20 | flow label
	avOffRGID     = 32 // rgid[16]
)

// setDgramSeg fills a datagram segment from its parts, as
// mlx5dv_set_dgram_seg does (reserved bytes 16..19 are not touched).
func setDgramSeg(p unsafe.Pointer, key uint64, dqpDct uint32, ext, statRateSL, flMLID uint8, rlid uint16,
	rmac *[6]byte, tclass, hopLimit uint8, grhGidFl uint32, rgid *[16]byte) {
	putBE64(at(p, avOffKey), key)
	putBE32(at(p, avOffDQP), uint32(ext)<<31|dqpDct)
	*(*uint8)(at(p, avOffRateSL)) = statRateSL
	*(*uint8)(at(p, avOffFlMLID)) = flMLID
	putBE16(at(p, avOffRLID), rlid)
	*(*[6]byte)(at(p, avOffRMAC)) = *rmac
	*(*uint8)(at(p, avOffTClass)) = tclass
	*(*uint8)(at(p, avOffHopLimit)) = hopLimit
	putBE32(at(p, avOffGrhGidFl), grhGidFl)
	*(*[16]byte)(at(p, avOffRGID)) = *rgid
}

// setDatagramSeg puts a UD destination into a WQE: the handle's address
// vector, with the destination QP (flagged as an extended AV) and Q_Key.
func setDatagramSeg(p unsafe.Pointer, v *addressVector, remoteQPN, remoteQKey uint32) {
	// Word by word: a Go copy of the array may overlap as far as the
	// compiler knows and becomes a call to memmove.
	d, s := (*[datagramSize / 8]uint64)(p), (*[datagramSize / 8]uint64)(unsafe.Pointer(v))
	d[0], d[1], d[2], d[3], d[4], d[5] = s[0], s[1], s[2], s[3], s[4], s[5]
	putBE32(at(p, avOffDQP), remoteQPN|extendedUDAV)
	putBE32(at(p, avOffKey), remoteQKey)
}

// setSRQNextSeg links an SRQ WQE to the next free one.
func setSRQNextSeg(p unsafe.Pointer, next uint16) { putBE16(at(p, 2), next) }

func srqNext(p unsafe.Pointer) uint16 { return getBE16(at(p, 2)) }

// mlx5Opcodes is rdma-core's mlx5_ib_opcode table for the work requests
// this provider posts, by wr.Opcode (check refuses the others).
var mlx5Opcodes = [8]uint8{
	wr.OpRDMAWrite:        opRDMAWrite,
	wr.OpRDMAWriteWithImm: opRDMAWriteImm,
	wr.OpSend:             opSend,
	wr.OpSendWithImm:      opSendImm,
	wr.OpRDMARead:         opRDMARead,
	wr.OpAtomicCmpAndSwp:  opAtomicCS,
	wr.OpAtomicFetchAdd:   opAtomicFA,
}

// userMem views memory the caller named by address: the source of inline
// data (and, in tests, the model's view of registered memory).
func userMem(addr uint64) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}

func memmove(dst, src unsafe.Pointer, n uintptr) {
	if n == 0 {
		return
	}
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}

// sendQueue is a QP's send queue: a ring of 64-byte basic blocks in the QP
// buffer. A WQE takes one or more consecutive BBs and may run past the end
// of the ring, continuing at its start: only the first BB of a WQE is
// guaranteed contiguous, which is why a WQE's fixed segments (at most 64
// bytes: control, then remote address and atomic, or the datagram) never
// wrap, and every later segment checks for the end.
type sendQueue struct {
	start  unsafe.Pointer // BB 0
	qend   unsafe.Pointer // just past the last BB
	wqeCnt uint32         // BBs in the ring, a power of two
	// curPost counts BBs posted; its low 16 bits are the WQE index the
	// device sees in the control segment and the doorbell record.
	curPost uint32
	head    uint32        // work requests posted
	tail    atomic.Uint32 // work requests completed, advanced by CQ polls
	maxPost uint32        // work requests outstanding at most
	maxGS   uint32
	maxInl  uint32
	qpn     uint32
	typ     qp.Type
	sigBits uint8 // ctrlCQUpdate when every request signals (sq_sig_all)
	// Per WQE, indexed by its first BB: the caller's ID and the head count
	// after it, which a completion makes the new tail (rdma-core's wrid and
	// wqe_head, one slice here so that a completion finds both with one
	// address computation).
	recs []wqeRecord
}

// wqeRecord is what a send WQE leaves for its completion.
type wqeRecord struct {
	id   uint64 // the work request's ID
	head uint32 // the send queue's head count after the WQE
}

func (sq *sendQueue) bb(idx uint32) unsafe.Pointer {
	return unsafe.Add(sq.start, uintptr(idx)<<sendWQEShift)
}

// overflow reports whether nreq more requests beyond those outstanding
// would exceed the queue's depth (mlx5_wq_overflow).
func (sq *sendQueue) overflow(nreq uint32) bool {
	return sq.head-sq.tail.Load()+nreq >= sq.maxPost
}

// plain reports, cheaply enough to inline, that a request needs no more
// checking: a send or RDMA write from a gather list that fits, on RC or UC.
func (sq *sendQueue) plain(w *wr.SendWR) bool {
	return w.Opcode <= wr.OpSendWithImm && w.Flags&wr.Inline == 0 && sq.typ != qp.UD && uint32(len(w.SGList)) <= sq.maxGS
}

// check refuses a work request the queue cannot carry, before anything of
// it is written, and finds a UD request's address vector.
func (sq *sendQueue) check(w *wr.SendWR) (*addressVector, error) {
	if uint32(len(w.SGList)) > sq.maxGS {
		return nil, unix.EINVAL
	}
	var av *addressVector
	switch w.Opcode {
	case wr.OpSend, wr.OpSendWithImm:
		if sq.typ == qp.UD {
			if w.AH == nil {
				return nil, unix.EINVAL
			}
			ah, ok := provider.AHValue(w.AH.Dest()).(*AH)
			if !ok || ah == nil {
				return nil, unix.EINVAL
			}
			av = &ah.av
		}
	case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm:
		if sq.typ == qp.UD {
			return nil, unix.EINVAL
		}
	case wr.OpRDMARead:
		if (sq.typ != qp.RC && sq.typ != qp.XRCSend) || w.Flags&wr.Inline != 0 {
			return nil, unix.EINVAL
		}
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		if (sq.typ != qp.RC && sq.typ != qp.XRCSend) || len(w.SGList) != 1 || w.SGList[0].Length < atomicOperandSz ||
			w.Remote.Addr&7 != 0 || w.Flags&wr.Inline != 0 {
			return nil, unix.EINVAL
		}
	default:
		return nil, unix.EOPNOTSUPP
	}
	if w.Flags&wr.Inline != 0 {
		n, err := provider.SGLength(w.SGList)
		if err != nil {
			return nil, err
		}
		if n > sq.maxInl {
			return nil, unix.EINVAL
		}
		if err := provider.ProbeInline(w.SGList); err != nil {
			return nil, err
		}
	}
	return av, nil
}

// write builds the WQE of one checked work request at the current post
// position, as rdma-core's _mlx5_post_send does, and advances the
// position. nreq is how many requests this post wrote before this one. It
// returns the control segment and the WQE's size in 16-byte units, which
// the doorbell needs, and whether the data went inline.
//
// Memory windows and local invalidation, which set a fence for the next
// WQE in rdma-core (fm_cache), are not posted by this provider, so a WQE's
// fence is only its own.
func (sq *sendQueue) write(w *wr.SendWR, av *addressVector, nreq uint32) (ctrl unsafe.Pointer, ds uint32, inl bool) {
	// UD (4) and XRC_SEND (9) start with a transport segment: the general
	// path writes it.
	if sq.typ >= qp.UD || w.Flags&wr.Inline != 0 || w.Opcode == wr.OpSendWithImm {
		return sq.writeGeneral(w, av, nreq)
	}
	// RC and UC with a gather list: the common case; with one SGE it makes
	// no calls, so nothing is spilled. Locals: the stores into the queue could alias
	// *w as far as the compiler knows, and would make it reload fields.
	op, sgl := w.Opcode, w.SGList
	idx := sq.curPost & (sq.wqeCnt - 1)
	ctrl = sq.bb(idx)
	seg := at(ctrl, ctrlSegSize)
	ds = ctrlSegSize / 16
	switch op {
	case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm, wr.OpRDMARead:
		setRaddrSeg(seg, w.Remote.Addr, w.Remote.RKey)
		seg = at(seg, raddrSegSize)
		ds += raddrSegSize / 16
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		setRaddrSeg(seg, w.Remote.Addr, w.Remote.RKey)
		setAtomicSeg(at(seg, raddrSegSize), op, w.Swap, w.CompareAdd)
		seg = at(seg, raddrSegSize+atomicSegSize)
		ds += (raddrSegSize + atomicSegSize) / 16
	}
	atomicOp := op == wr.OpAtomicCmpAndSwp || op == wr.OpAtomicFetchAdd
	if len(sgl) == 1 { // the usual request; the fixed segments never end a ring
		if n := sgl[0].Length; n != 0 {
			if atomicOp {
				n = atomicOperandSz
			}
			setDataSeg(seg, n, sgl[0].LKey, sgl[0].Addr)
			ds += dataSegSize / 16
		}
	} else {
		ds += sq.writeGather(seg, sgl, atomicOp)
	}
	// finish, by hand: the one-SGE path makes no calls (fmCeSe,
	// putCtrl and record inline).
	var imm uint32
	if op == wr.OpRDMAWriteWithImm {
		imm = w.Imm
	}
	sq.putCtrl(ctrl, op, ds, sq.fmCeSe(w.Flags), imm)
	sq.record(idx, w.ID, sq.head+nreq)
	sq.curPost += (ds*16 + sendWQEBB - 1) / sendWQEBB
	return ctrl, ds, false
}

// fmCeSe is the fm_ce_se byte of a request with flags: fence,
// completion and solicited event, and the queue's signalling.
func (sq *sendQueue) fmCeSe(flags wr.SendFlags) uint32 {
	f := uint32(sq.sigBits)
	if flags&wr.Fence != 0 && !mutant {
		f |= ctrlFence
	}
	if flags&wr.Signaled != 0 {
		f |= ctrlCQUpdate
	}
	if flags&wr.Solicited != 0 {
		f |= ctrlSolicited
	}
	return f
}

// putCtrl writes the control segment of a WQE ds units long, at the
// current post position, in two 8-byte stores: what setCtrlSeg writes,
// with the signature, DCI stream channel and fm_ce_se word zeroed first,
// as _mlx5_post_send does. It and fmCeSe are small enough to inline.
func (sq *sendQueue) putCtrl(ctrl unsafe.Pointer, op wr.Opcode, ds, fmCeSe, imm uint32) {
	putBE64(ctrl, uint64(uint32(uint16(sq.curPost))<<8|uint32(mlx5Opcodes[op&7]))<<32|uint64(sq.qpn<<8|ds))
	putBE64(at(ctrl, 8), uint64(fmCeSe)<<32|uint64(imm))
}

// record keeps the ID and head count of the WQE at BB idx.
func (sq *sendQueue) record(idx uint32, id uint64, head uint32) {
	r := sq.recordAt(idx)
	if raceEnabled {
		atomic.StoreUint64(&r.id, id)
		atomic.StoreUint32(&r.head, head)
		return
	}
	r.id, r.head = id, head
}

// recordAt returns the record of the WQE at BB idx, which is below wqeCnt,
// the length of recs, by construction (masked): no bounds check.
func (sq *sendQueue) recordAt(idx uint32) *wqeRecord {
	return (*wqeRecord)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(sq.recs)), uintptr(idx)*unsafe.Sizeof(wqeRecord{})))
}

// writeGather writes a data segment for each non-empty SGE (8 bytes for
// an atomic's result), continuing at the start of the ring at its end,
// and returns the units written.
func (sq *sendQueue) writeGather(seg unsafe.Pointer, sgl []wr.SGE, atomicOp bool) (ds uint32) {
	qend, start := sq.qend, sq.start
	for i := range sgl {
		if seg == qend {
			seg = start
		}
		s := &sgl[i]
		n := s.Length
		if n == 0 {
			continue
		}
		if atomicOp {
			n = atomicOperandSz
		}
		setDataSeg(seg, n, s.LKey, s.Addr)
		seg = at(seg, dataSegSize)
		ds += dataSegSize / 16
	}
	return ds
}

// finish writes the control segment of the WQE at BB idx, ds units long,
// records its request and advances the post position.
func (sq *sendQueue) finish(ctrl unsafe.Pointer, idx uint32, w *wr.SendWR, ds, nreq uint32) {
	op := w.Opcode
	var imm uint32
	if op == wr.OpSendWithImm || op == wr.OpRDMAWriteWithImm {
		imm = w.Imm
	}
	sq.putCtrl(ctrl, op, ds, sq.fmCeSe(w.Flags), imm)
	sq.record(idx, w.ID, sq.head+nreq)
	sq.curPost += (ds*16 + sendWQEBB - 1) / sendWQEBB
}

// writeGeneral is write for every request: UD datagrams and inline data
// too.
func (sq *sendQueue) writeGeneral(w *wr.SendWR, av *addressVector, nreq uint32) (ctrl unsafe.Pointer, ds uint32, inl bool) {
	op, sgl := w.Opcode, w.SGList
	idx := sq.curPost & (sq.wqeCnt - 1)
	ctrl = sq.bb(idx)
	seg := at(ctrl, ctrlSegSize)
	ds = ctrlSegSize / 16
	if sq.typ == qp.UD {
		setDatagramSeg(seg, av, w.RemoteQPN, w.RemoteQKey)
		seg = at(seg, datagramSize)
		ds += datagramSize / 16
		if seg == sq.qend {
			seg = sq.start
		}
	} else {
		if sq.typ == qp.XRCSend {
			// struct mlx5_wqe_xrc_seg: the number of the SRQ at the
			// target the message lands in, then 12 reserved bytes. The
			// segment ends inside the WQE's first BB, never the ring.
			putBE32(seg, w.RemoteSRQN)
			clear(unsafe.Slice((*byte)(at(seg, 4)), xrcSegSize-4))
			seg = at(seg, xrcSegSize)
			ds += xrcSegSize / 16
		}
		switch op {
		case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm, wr.OpRDMARead:
			setRaddrSeg(seg, w.Remote.Addr, w.Remote.RKey)
			seg = at(seg, raddrSegSize)
			ds += raddrSegSize / 16
		case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
			setRaddrSeg(seg, w.Remote.Addr, w.Remote.RKey)
			setAtomicSeg(at(seg, raddrSegSize), op, w.Swap, w.CompareAdd)
			seg = at(seg, raddrSegSize+atomicSegSize)
			ds += (raddrSegSize + atomicSegSize) / 16
		}
	}
	if w.Flags&wr.Inline != 0 && len(sgl) > 0 {
		ds += sq.writeInline(seg, sgl)
		inl = true
	} else {
		ds += sq.writeGather(seg, sgl, op == wr.OpAtomicCmpAndSwp || op == wr.OpAtomicFetchAdd)
	}
	sq.finish(ctrl, idx, w, ds, nreq)
	return ctrl, ds, inl
}

// writeInline copies the data of an inline request into the WQE after a
// 4-byte header, continuing at the start of the ring when it reaches the
// end, and returns the 16-byte units it took (none when there is no data).
func (sq *sendQueue) writeInline(seg unsafe.Pointer, sges []wr.SGE) uint32 {
	dst := at(seg, inlineHdrSize)
	var inl uint32
	for i := range sges {
		src := userMem(sges[i].Addr)
		n := uintptr(sges[i].Length)
		inl += sges[i].Length
		if room := uintptr(sq.qend) - uintptr(dst); n > room {
			memmove(dst, src, room)
			src = unsafe.Add(src, room)
			n -= room
			dst = sq.start
		}
		memmove(dst, src, n)
		dst = unsafe.Add(dst, n)
	}
	if inl == 0 {
		return 0
	}
	putBE32(seg, inl|inlineSeg)
	return (inl + inlineHdrSize + 15) / 16
}

// recvQueue is a QP's receive queue: fixed-size WQEs of data segments at
// the start of the QP buffer. Receives complete in order, so the tail is a
// plain counter.
type recvQueue struct {
	start    unsafe.Pointer
	wqeCnt   uint32
	wqeShift uint32
	head     uint32
	tail     atomic.Uint32
	maxPost  uint32
	maxGS    uint32 // data segments a WQE holds, and SGEs a request may carry
	wrid     []uint64
}

func (rq *recvQueue) overflow(nreq uint32) bool {
	return rq.head-rq.tail.Load()+nreq >= rq.maxPost
}

// write builds the receive WQE of request w in slot idx: one data segment
// per non-empty SGE and, when the WQE has room left, the end marker.
func (rq *recvQueue) write(idx uint32, w *wr.RecvWR) {
	scat := unsafe.Add(rq.start, uintptr(idx)<<rq.wqeShift)
	var j uint32
	for i := range w.SGList {
		s := &w.SGList[i]
		if s.Length == 0 {
			continue
		}
		setDataSeg(unsafe.Add(scat, uintptr(j)*dataSegSize), s.Length, s.LKey, s.Addr)
		j++
	}
	if j < rq.maxGS {
		setDataSegEnd(unsafe.Add(scat, uintptr(j)*dataSegSize))
	}
	if raceEnabled {
		atomic.StoreUint64(&rq.wrid[idx], w.ID)
	} else {
		rq.wrid[idx] = w.ID
	}
}

// id returns the ID of the receive in slot idx (masked).
func (rq *recvQueue) id(idx uint32) uint64 {
	idx &= rq.wqeCnt - 1
	if raceEnabled {
		return atomic.LoadUint64(&rq.wrid[idx])
	}
	return rq.wrid[idx]
}

// srqRing is a shared receive queue's buffer: WQEs of a next segment and
// data segments, kept in a free list through the next segments. Posting
// takes the head of the list; a completion returns its WQE to the tail.
// The list always keeps one WQE (the tail) that cannot be posted.
type srqRing struct {
	start    unsafe.Pointer
	wqeShift uint32
	nwqe     uint32 // WQEs in the buffer, a power of two
	maxGS    uint32 // data segments a WQE holds
	limitGS  uint32 // SGEs a request may carry
	head     uint32 // next WQE to post
	tail     uint32 // last free WQE
	counter  uint32 // WQEs posted; its low 16 bits go into the doorbell record
	wrid     []uint64
}

func (s *srqRing) wqe(i uint32) unsafe.Pointer {
	return unsafe.Add(s.start, uintptr(i)<<s.wqeShift)
}

// link builds the initial free list 0 → 1 → … → nwqe-1.
func (s *srqRing) link() {
	for i := uint32(0); i+1 < s.nwqe; i++ {
		setSRQNextSeg(s.wqe(i), uint16(i+1))
	}
	s.head, s.tail = 0, s.nwqe-1
}

func (s *srqRing) full() bool { return s.head == s.tail }

// write posts w in the head WQE, as mlx5_post_srq_recv does: every SGE
// becomes a data segment (empty ones too), then the end marker if there
// is room.
func (s *srqRing) write(w *wr.RecvWR) {
	next := s.wqe(s.head)
	s.wrid[s.head] = w.ID
	s.head = uint32(srqNext(next)) & (s.nwqe - 1)
	scat := at(next, srqNextSegSize)
	i := 0
	for ; i < len(w.SGList); i++ {
		g := &w.SGList[i]
		setDataSeg(unsafe.Add(scat, uintptr(i)*dataSegSize), g.Length, g.LKey, g.Addr)
	}
	if uint32(i) < s.maxGS {
		setDataSegEnd(unsafe.Add(scat, uintptr(i)*dataSegSize))
	}
}

// free returns WQE ind to the tail of the free list (mlx5_free_srq_wqe).
func (s *srqRing) free(ind uint16) {
	i := uint32(ind) & (s.nwqe - 1) // a corrupt counter must not reach outside the buffer
	setSRQNextSeg(s.wqe(s.tail), uint16(i))
	s.tail = i
}
