package mlx5

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdma/wr"
)

// cqRing is a completion queue's buffer: a power-of-two ring of 64- or
// 128-byte CQEs that the device produces and the library consumes. In a
// 128-byte entry the CQE proper (struct mlx5_cqe64) is the second half;
// the first is room for data the device scatters into the CQE, which this
// provider never asks for (rdma-core's get_sw_cqe and mlx5_alloc_cq_buf).
// The device owns an entry until it writes it with the owner bit of the
// current pass over the ring: bit log2(ncqe) of the free-running producer
// index. So entry n (free-running consumer index) is software's when its
// opcode is not "invalid" (the value every entry starts with) and its
// owner bit equals !!(n & ncqe).
type cqRing struct {
	buf       unsafe.Pointer
	ncqe      uint32 // entries, a power of two
	consIndex uint32 // free-running
	shift     uint8  // log2 of the entry size: 6 or 7
	off64     uint8  // where the 64-byte CQE is in an entry: 0 or 64
}

// newCQRing describes a ring of ncqe entries of size bytes (64 or 128).
func newCQRing(buf unsafe.Pointer, ncqe uint32, size int) cqRing {
	r := cqRing{buf: buf, ncqe: ncqe, shift: 6}
	if size == cqe128Size {
		r.shift, r.off64 = 7, cqe128Size-cqe64Size
	}
	return r
}

// size is the entry size in bytes.
func (r *cqRing) size() uintptr { return 1 << r.shift }

// entry returns entry n, the whole 64 or 128 bytes.
func (r *cqRing) entry(n uint32) unsafe.Pointer {
	return unsafe.Add(r.buf, uintptr(n&(r.ncqe-1))<<(r.shift&7))
}

// cqe64 returns the 64-byte CQE of an entry.
func (r *cqRing) cqe64(entry unsafe.Pointer) unsafe.Pointer {
	return unsafe.Add(entry, r.off64)
}

// loadOpOwn reads a CQE's op_own byte (the last one) with an atomic load
// of the word that holds it: the device writes it last, and the load must
// happen anew on every poll.
func loadOpOwn(cqe unsafe.Pointer) uint8 {
	// The word's last byte in memory is its low byte read big-endian.
	return uint8(toBE32(atomic.LoadUint32((*uint32)(at(cqe, cqeOffWQECounter)))))
}

// swOwned returns the 64-byte CQE of entry n if software owns it, else
// nil.
func (r *cqRing) swOwned(n uint32) unsafe.Pointer {
	cqe := unsafe.Add(r.buf, uintptr(n&(r.ncqe-1))<<(r.shift&7)+uintptr(r.off64)) // &7: no check for a shift past 63
	if swOwns(loadOpOwn(cqe), n, r.ncqe) {
		return cqe
	}
	return nil
}

// swOwns reports whether a CQE with op_own at free-running index n of a
// ring of ncqe entries is software's: valid, and written in this pass.
func swOwns(opOwn uint8, n, ncqe uint32) bool {
	var pass uint8
	if n&ncqe != 0 {
		pass = 1
	}
	return opOwn>>cqeOpcodeShift != cqeInvalid && opOwn&cqeOwnerMask == pass
}

// syndromeStatus maps an error CQE's syndrome to a work completion status
// as rdma-core's mlx5_handle_error_cqe does.
func syndromeStatus(synd uint8) wr.Status {
	switch synd {
	case syndLocalLengthErr:
		return wr.LocLenErr
	case syndLocalQPOpErr:
		return wr.LocQPOpErr
	case syndLocalProtErr:
		return wr.LocProtErr
	case syndWRFlushErr:
		return wr.WRFlushErr
	case syndMWBindErr:
		return wr.MWBindErr
	case syndBadRespErr:
		return wr.BadRespErr
	case syndLocalAccessErr:
		return wr.LocAccessErr
	case syndRemoteInvalReqErr:
		return wr.RemInvReqErr
	case syndRemoteAccessErr:
		return wr.RemAccessErr
	case syndRemoteOpErr:
		return wr.RemOpErr
	case syndTransportRetryErr:
		return wr.RetryExcErr
	case syndRNRRetryErr:
		return wr.RNRRetryExcErr
	case syndRemoteAbortedErr:
		return wr.RemAbortErr
	}
	return wr.GeneralErr
}

// resources finds the QP or SRQ a CQE names, remembering the last ones
// found, as rdma-core's cur_rsc and cur_srq do within one poll. With CQE
// version 1 a CQE names its QP by user index (srqn_uidx), and a receive on
// an SRQ names the QP, whose SRQ holds the WQE, except a receive through
// an XRC SRQ, which names the SRQ by its own user index (the XRC receive
// QP has none); with version 0 it names the QP by number and, for
// receives on any SRQ, the SRQ by number.
type resources struct {
	t   *tables
	v1  bool
	ts  bool // copy the CQE's timestamp into the completion
	qp  *QP
	srq *SRQ
	// onError is the CQ's (CQ.onError).
	onError func(qpn uint32)
}

// qpByRsn finds a QP by its resource number: the user index with CQE
// version 1, the QP number with version 0.
//
// The check of the last QP found is inlined into the callers, the table
// lookup is not: a poll's completions mostly name the QP the one before
// named.
func (r *resources) qpByRsn(rsn uint32) *QP {
	if q := r.qp; q != nil && q.rsn == rsn {
		return q
	}
	return r.lookupQP(rsn)
}

// lookupQP is qpByRsn's table lookup.
func (r *resources) lookupQP(rsn uint32) *QP {
	if r.v1 {
		r.qp = r.t.uidx.get(rsn)
	} else {
		r.qp = r.t.qps.get(rsn)
	}
	return r.qp
}

func (r *resources) srqByNum(srqn uint32) *SRQ {
	if r.srq == nil || r.srq.num != srqn {
		r.srq = r.t.srqs.get(srqn)
	}
	return r.srq
}

// xsrqByUidx finds an XRC SRQ by its user index (CQE version 1).
func (r *resources) xsrqByUidx(uidx uint32) *SRQ {
	if r.srq == nil || r.srq.uidx != uidx {
		r.srq = r.t.xsrqs.get(uidx)
	}
	return r.srq
}

// reqRsn is the resource number of the QP a requester CQE names: its user
// index with CQE version 1, else its number.
func (r *resources) reqRsn(cqe unsafe.Pointer, qpn uint32) uint32 {
	if r.v1 {
		return getBE32(at(cqe, cqeOffSrqnUidx)) & cqeSrqnUidxMask
	}
	return qpn
}

// reqCompletion is what a requester CQE's opcode (the WQE's, in
// sop_drop_qpn's top byte) makes of a completion: rdma-core's
// handle_good_req as a table, which costs a load where its switch costs a
// chain of compares. Opcodes it does not name complete as sends with no
// flags, as there.
type reqCompletion struct {
	opcode  wr.WCOpcode
	flags   wr.WCFlags
	byteLen uint32 // the atomics' operand size
	byteCnt uint32 // all ones where byte_cnt is the length (a read)
}

var reqCompletions = [256]reqCompletion{
	opRDMAWriteImm: {opcode: wr.WCRDMAWrite, flags: wr.WCWithImm},
	opRDMAWrite:    {opcode: wr.WCRDMAWrite},
	opSendImm:      {opcode: wr.WCSend, flags: wr.WCWithImm},
	opSend:         {opcode: wr.WCSend},
	opSendInval:    {opcode: wr.WCSend},
	opRDMARead:     {opcode: wr.WCRDMARead, byteCnt: ^uint32(0)},
	opAtomicCS:     {opcode: wr.WCCompSwap, byteLen: atomicOperandSz},
	opAtomicFA:     {opcode: wr.WCFetchAdd, byteLen: atomicOperandSz},
	opTSO:          {opcode: wr.WCTSO},
}

// decodeCQE turns the software-owned CQE at cqe into c, and retires the
// work request it completes from its queue (the send queue's tail moves
// past the WQE, a receive queue's tail by one, an SRQ WQE returns to the
// free list). It follows rdma-core's mlx5_parse_cqe for both CQE
// versions (see resources). It reports false for a CQE that completes nothing the
// caller should see: a QP or SRQ this context does not know (destroyed),
// and CQE kinds this provider never asks for (resize, tag matching,
// signature errors).
func decodeCQE(cqe unsafe.Pointer, c *wr.Completion, r *resources) bool {
	opOwn := *(*uint8)(at(cqe, cqeOffOpOwn))
	sopDropQPN := getBE32(at(cqe, cqeOffSopDropQPN))
	qpn := sopDropQPN & cqeQPNMask
	*c = wr.Completion{QPNum: qpn}

	switch opcode := opOwn >> cqeOpcodeShift; opcode {
	case cqeReq:
		qp := r.qpByRsn(r.reqRsn(cqe, qpn))
		if qp == nil || qp.sq == nil {
			return false
		}
		decodeReq(cqe, c, qp.sq, sopDropQPN)

	case cqeRespWrImm, cqeRespSend, cqeRespSendIm, cqeRespSendIn:
		c.ByteLen = getBE32(at(cqe, cqeOffByteCnt))
		if !completeRecv(cqe, c, r, qpn) {
			return false
		}
		immInvalPkey := getBE32(at(cqe, cqeOffImmInvalPkey))
		switch opcode {
		case cqeRespWrImm:
			c.Opcode = wr.WCRecvRDMAWithImm
			c.Flags |= wr.WCWithImm
			c.Imm = immInvalPkey
		case cqeRespSend:
			c.Opcode = wr.WCRecv
		case cqeRespSendIm:
			c.Opcode = wr.WCRecv
			c.Flags |= wr.WCWithImm
			c.Imm = immInvalPkey
		case cqeRespSendIn:
			c.Opcode = wr.WCRecv
			c.Flags |= wr.WCWithInv
			c.Imm = immInvalPkey
		}
		flagsRQPN := getBE32(at(cqe, cqeOffFlagsRQPN))
		c.SLID = getBE16(at(cqe, cqeOffSLID))
		c.SL = uint8(flagsRQPN>>24) & 0xf
		c.SrcQP = flagsRQPN & 0xffffff
		c.DLIDPathBits = *(*uint8)(at(cqe, cqeOffMLPath)) & 0x7f
		if (flagsRQPN>>28)&3 != 0 {
			c.Flags |= wr.WCGRH
		}
		c.PKeyIndex = uint16(immInvalPkey)

	case cqeReqErr, cqeRespErr:
		c.Status = syndromeStatus(*(*uint8)(at(cqe, errOffSyndrome)))
		c.VendorErr = uint32(*(*uint8)(at(cqe, errOffVendorSynd)))
		if opcode == cqeReqErr {
			qp := r.qpByRsn(r.reqRsn(cqe, qpn))
			if qp == nil || qp.sq == nil {
				return false
			}
			completeSend(qp.sq, cqe, c)
		} else if !completeRecv(cqe, c, r, qpn) {
			return false
		}
		if r.onError != nil {
			r.onError(qpn)
		}

	default:
		return false
	}
	if r.ts {
		// Error CQEs too, as rdma-core's read_completion_ts reads the
		// field whatever the opcode, though there its last two bytes are
		// the vendor syndrome and syndrome (struct mlx5_err_cqe).
		c.Timestamp = getBE64(at(cqe, cqeOffTimestamp))
	}
	return true
}

// decodeReq fills c, already cleared and holding the QP number, from a
// successful requester CQE of sq's.
func decodeReq(cqe unsafe.Pointer, c *wr.Completion, sq *sendQueue, sopDropQPN uint32) {
	k := &reqCompletions[uint8(sopDropQPN>>24)]
	c.Opcode, c.Flags = k.opcode, k.flags
	c.ByteLen = k.byteLen | getBE32(at(cqe, cqeOffByteCnt))&k.byteCnt
	completeSend(sq, cqe, c)
}

// completeSend takes the ID of the send WQE a CQE names and moves the
// send queue's tail past it: a completion retires every unsignaled WQE
// before it too.
func completeSend(sq *sendQueue, cqe unsafe.Pointer, c *wr.Completion) {
	id, head := sq.retired(uint32(getBE16(at(cqe, cqeOffWQECounter))))
	c.ID = id
	sq.tail.Store(head + 1)
}

// completeRecv takes the ID of the receive a responder CQE completes: the
// SRQ WQE it names, which returns to the SRQ's free list, or the oldest
// outstanding WQE of the QP's receive queue.
func completeRecv(cqe unsafe.Pointer, c *wr.Completion, r *resources, qpn uint32) bool {
	srqnUidx := getBE32(at(cqe, cqeOffSrqnUidx)) & cqeSrqnUidxMask
	var qp *QP
	if r.v1 {
		// get_resp_ctx_v1: the QP by user index; its SRQ, if it has one.
		// An index that names no QP may name an XRC SRQ: the user indexes
		// of both come from one allocator, as rdma-core keeps both in
		// one table (MLX5_RSC_TYPE_XSRQ).
		if qp = r.qpByRsn(srqnUidx); qp == nil {
			srq := r.xsrqByUidx(srqnUidx)
			if srq == nil {
				return false
			}
			srq.complete(getBE16(at(cqe, cqeOffWQECounter)), c)
			return true
		}
		if qp.srq != nil {
			qp.srq.complete(getBE16(at(cqe, cqeOffWQECounter)), c)
			return true
		}
	} else if srqnUidx != 0 {
		srq := r.srqByNum(srqnUidx)
		if srq == nil {
			return false
		}
		srq.complete(getBE16(at(cqe, cqeOffWQECounter)), c)
		return true
	} else {
		qp = r.qpByRsn(qpn)
	}
	if qp == nil || qp.rq == nil {
		return false
	}
	rq := qp.rq
	t := rq.tail.Load()
	c.ID = rq.id(t)
	rq.tail.Store(t + 1)
	return true
}

// table maps 24-bit QP and SRQ numbers to objects without locks on the
// lookup path: two levels of 4096 atomic pointers, the second allocated
// when first needed (rdma-core's qp_table and srq_table).
type table[T any] struct {
	mu  sync.Mutex
	top [1 << 12]atomic.Pointer[[1 << 12]atomic.Pointer[T]]
}

func (t *table[T]) get(n uint32) *T {
	l := t.top[(n>>12)&0xfff].Load()
	if l == nil {
		return nil
	}
	return l[n&0xfff].Load()
}

func (t *table[T]) set(n uint32, v *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := (n >> 12) & 0xfff
	l := t.top[i].Load()
	if l == nil {
		l = new([1 << 12]atomic.Pointer[T])
		t.top[i].Store(l)
	}
	l[n&0xfff].Store(v)
}

// remove clears n if it still maps to v.
func (t *table[T]) remove(n uint32, v *T) {
	if l := t.top[(n>>12)&0xfff].Load(); l != nil {
		l[n&0xfff].CompareAndSwap(v, nil)
	}
}

// tables are a context's QP and SRQ maps: QPs by number (CQE version 0)
// or by user index (version 1), SRQs by number, and XRC SRQs by user
// index (version 1). rdma-core keeps QPs and XRC SRQs in one table of
// typed resources; two tables over one index space keep a QP's lookup a
// single load.
type tables struct {
	qps   table[QP]
	uidx  table[QP]
	srqs  table[SRQ]
	xsrqs table[SRQ]
}

// uidxAllocator hands out the 24-bit user indexes that QPs and SRQs carry
// under CQE version 1 (rdma-core's mlx5_store_uidx), reusing freed ones
// first and never MLX5_IB_DEFAULT_UIDX, which the kernel refuses.
type uidxAllocator struct {
	mu   sync.Mutex
	free []uint32
	next uint32
}

func (a *uidxAllocator) alloc() (uint32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.free); n > 0 {
		u := a.free[n-1]
		a.free = a.free[:n-1]
		return u, true
	}
	if a.next >= defaultUIDX {
		return 0, false
	}
	a.next++
	return a.next - 1, true
}

func (a *uidxAllocator) release(u uint32) {
	a.mu.Lock()
	a.free = append(a.free, u)
	a.mu.Unlock()
}
