package rxe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Where the scatter-gather list (or the inline data) of a WQE starts: right
// after the fixed part, in struct rxe_dma_info's flexible array.
const (
	sendSGEOffset = abi.SizeofRxeSendWqe
	recvSGEOffset = abi.SizeofRxeRecvWqe
)

type qpBuilder struct {
	response[abi.RxeCreateQpResp]
	k    provider.Kernel
	attr provider.QPInitAttr
}

// NewQP prepares a queue pair.
func (c *Context) NewQP(attr provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	switch attr.Type {
	case qp.RC, qp.UC, qp.UD:
	default:
		return nil, fmt.Errorf("rxe: QP type %d: %w", attr.Type, unix.EOPNOTSUPP)
	}
	if attr.CreateFlags != 0 {
		// As rdma-core's rxe, which supports none.
		return nil, fmt.Errorf("rxe: QP create flags %#x: %w", attr.CreateFlags, unix.EOPNOTSUPP)
	}
	return &qpBuilder{k: c.k, attr: attr}, nil
}

func (b *qpBuilder) Finish(c provider.Created) (provider.QP, error) {
	p := &QP{k: b.k, typ: b.attr.Type, caps: c.Caps}
	var err error
	if !b.attr.HasSRQ {
		if p.rq, err = mapQueue(b.k, b.resp.Rq_mi); err != nil {
			return nil, fmt.Errorf("rxe: mapping the receive queue: %w", err)
		}
		if err := checkElem(p.rq, recvSGEOffset, c.Caps.MaxRecvSGE*abi.SizeofRxeSge); err != nil {
			p.Close()
			return nil, err
		}
	}
	if p.sq, err = mapQueue(b.k, b.resp.Sq_mi); err != nil {
		p.Close()
		return nil, fmt.Errorf("rxe: mapping the send queue: %w", err)
	}
	if err := checkElem(p.sq, sendSGEOffset, max(c.Caps.MaxSendSGE*abi.SizeofRxeSge, c.Caps.MaxInlineData)); err != nil {
		p.Close()
		return nil, err
	}
	for op, types := range fastOps {
		if types&(1<<b.attr.Type) != 0 && c.Caps.MaxSendSGE > 0 {
			p.plainOps[op] = 1 | types&fastAtomic
		}
	}
	p.db.hdr.Command = abi.IB_USER_VERBS_CMD_POST_SEND
	p.db.hdr.In_words = uint16((unsafe.Sizeof(p.db.hdr) + unsafe.Sizeof(p.db.cmd)) / 4)
	p.db.hdr.Out_words = uint16(unsafe.Sizeof(p.dbResp) / 4)
	p.db.cmd.Response = uint64(uintptr(unsafe.Pointer(&p.dbResp)))
	p.db.cmd.Qp_handle = c.Handle
	p.db.cmd.Wqe_size = abi.SizeofIbUverbsSendWr
	return p, nil
}

// checkElem makes sure the kernel's ring elements hold what the granted
// capabilities allow us to write.
func checkElem(q *queue, fixed, payload uint32) error {
	if uint32(q.elemSize()) < fixed+payload {
		return fmt.Errorf("rxe: ring element of %d bytes cannot hold %d: %w", q.elemSize(), fixed+payload, unix.EINVAL)
	}
	return nil
}

// QP is an rxe queue pair.
type QP struct {
	k    provider.Kernel
	typ  qp.Type
	caps qp.Caps

	sqMu queueLock
	sq   *queue
	ssn  uint32
	// plainOps says, per opcode, whether plain may accept a request
	// (fastAtomic: with the atomics' checks); set once, at creation.
	plainOps [len(fastOps)]uint8
	// db is the doorbell: a zero-work-request IB_USER_VERBS_CMD_POST_SEND,
	// built once; its response field points at dbResp in the same heap
	// object, so ringing it allocates nothing.
	db struct {
		hdr abi.IbUverbsCmdHdr
		cmd abi.IbUverbsPostSend
	}
	dbResp abi.IbUverbsPostSendResp

	rqMu queueLock
	rq   *queue

	// stopped: posts are refused (Stop, Close); set under both rings'
	// locks.
	stopped bool

	// The open batch (provider.SendBatcher), under sqMu: the producer
	// index its next request goes to, how many it has, and the send
	// sequence number it started from, which AbortBatch restores.
	batchProd uint32
	batchN    int
	batchSSN  uint32
}

// PostSend writes each work request into the send ring, publishes them
// together and rings the doorbell once.
//
// The doorbell is rung before the lock is released: Stop, which takes the
// lock, then knows that no doorbell with this QP's handle is still to come
// (provider.Kernel.Doorbell).
//
// One request of the common kinds (plain: no inline data, at most one
// SGE), or an inline one of the same opcodes (plainInline), is posted here
// with no loop and no call but the WQE's writers and the doorbell; in Go's
// register ABI every call spills the values a loop keeps in registers.
// Anything else, and every request those turn away, goes through postList,
// which gives the errors.
func (p *QP) PostSend(wrs []wr.SendWR) (int, error) {
	if len(wrs) != 1 {
		return p.postList(wrs)
	}
	w := &wrs[0]
	inline := false
	if !p.plain(w) {
		if !p.plainInline(w) {
			return p.postList(wrs)
		}
		inline = true
	}
	p.sqMu.Lock()
	if p.stopped {
		p.sqMu.Unlock()
		return 0, provider.ErrStopped
	}
	var length uint32
	if inline {
		// validateSend's checks for such a request: the length.
		var err error
		length, err = provider.SGLength(w.SGList)
		if err == nil && length > p.caps.MaxInlineData {
			err = unix.EINVAL
		}
		if err != nil {
			p.sqMu.Unlock()
			return 0, err
		}
	}
	q := p.sq
	prod := q.producer()
	if q.full(prod, p.caps.MaxSendWR) {
		p.sqMu.Unlock()
		return 0, unix.ENOMEM
	}
	wqe := (*abi.RxeSendWqe)(q.elem(prod))
	if !inline {
		p.writePlain(wqe, w, w.SGList)
	} else if err := p.writeInline(wqe, w, length); err != nil {
		p.sqMu.Unlock()
		return 0, err
	}
	q.publish(prod + 1)
	err := p.k.Doorbell(bytesOf(&p.db))
	p.sqMu.Unlock()
	if err != nil {
		return 1, err
	}
	return 1, nil
}

// plain reports whether w is a request of the common kinds (QP.plainOps:
// no inline data, at most one SGE), which needs none of validateSend's
// checks but those it makes here. Within the inliner's budget.
func (p *QP) plain(w *wr.SendWR) bool {
	sg, op := w.SGList, w.Opcode
	if len(sg) > 1 || w.Flags&wr.Inline != 0 || uint(op) >= uint(len(p.plainOps)) {
		return false
	}
	k := p.plainOps[op]
	return k != 0 && (k&fastAtomic == 0 || len(sg) == 1 && sg[0].Length >= 8 && w.Remote.Addr&7 == 0)
}

// plainInline reports whether w is an inline request of the common kinds:
// an opcode plain accepts on this QP, not an atomic (which cannot be
// inline), with no more SGEs than the QP allows. PostSend checks the
// length, with the same errors as validateSend.
func (p *QP) plainInline(w *wr.SendWR) bool {
	op := w.Opcode
	if w.Flags&wr.Inline == 0 || uint(op) >= uint(len(p.plainOps)) {
		return false
	}
	k := p.plainOps[op]
	return k != 0 && k&fastAtomic == 0 && uint(len(w.SGList)) <= uint(p.caps.MaxSendSGE)
}

// writeInline is writePlain for a request plainInline accepted, of length
// bytes: the data is copied in the same pass that makes sure it can be
// read (provider.CopyInline), first, so that a fault leaves the header as
// it was and the caller publishes nothing.
func (p *QP) writeInline(wqe *abi.RxeSendWqe, w *wr.SendWR, length uint32) error {
	if _, err := provider.CopyInline(unsafe.Add(unsafe.Pointer(wqe), sendSGEOffset), w.SGList); err != nil {
		return err
	}
	p.writePlain(wqe, w, nil) // no SGE over the data
	wqe.Dma.Length, wqe.Dma.Resid, wqe.Dma.Num_sge = length, length, uint32(len(w.SGList))
	return nil
}

// writePlain is writeSendWQE for a request plain accepted, whose SGEs are
// sg (w.SGList).
//
// writeInline calls it for an inline request too, with no SGEs, and then
// sets the data's length: one writer of the header for both.
func (p *QP) writePlain(wqe *abi.RxeSendWqe, w *wr.SendWR, sg []wr.SGE) {
	op := w.Opcode
	var length uint32
	*wqe = abi.RxeSendWqe{}
	wqe.Wr.Wr_id, wqe.Wr.Opcode, wqe.Wr.Send_flags = w.ID, uint32(op), uint32(w.Flags)
	switch op {
	case wr.OpSend:
	case wr.OpSendWithImm:
		binary.BigEndian.PutUint32(wqe.Wr.Ex[:], w.Imm)
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		a := wqe.Wr.Atomic()
		a.Remote_addr, a.Compare_add, a.Swap, a.Rkey = w.Remote.Addr, w.CompareAdd, w.Swap, w.Remote.RKey
		wqe.Iova = w.Remote.Addr
	default: // the RDMA writes and the read
		if op == wr.OpRDMAWriteWithImm {
			binary.BigEndian.PutUint32(wqe.Wr.Ex[:], w.Imm)
		}
		r := wqe.Wr.Rdma()
		r.Remote_addr, r.Rkey = w.Remote.Addr, w.Remote.RKey
		wqe.Iova = w.Remote.Addr
	}
	if len(sg) == 1 {
		e := (*abi.RxeSge)(unsafe.Add(unsafe.Pointer(wqe), sendSGEOffset))
		e.Addr, e.Length, e.Lkey = sg[0].Addr, sg[0].Length, sg[0].LKey
		length = sg[0].Length
	}
	wqe.Dma.Length, wqe.Dma.Resid, wqe.Dma.Num_sge = length, length, uint32(len(sg))
	wqe.Ssn = p.ssn
	p.ssn++
}

// fastOps marks, per opcode, the QP types (bit 1<<type) whose requests of
// that opcode plain may accept; fastAtomic adds the atomics' length and
// alignment. A QP keeps its own row (QP.plainOps), empty if it has no send
// SGE, which plain then need not check.
var fastOps = [...]uint8{
	wr.OpRDMAWrite:        1<<qp.RC | 1<<qp.UC,
	wr.OpRDMAWriteWithImm: 1<<qp.RC | 1<<qp.UC,
	wr.OpSend:             1<<qp.RC | 1<<qp.UC,
	wr.OpSendWithImm:      1<<qp.RC | 1<<qp.UC,
	wr.OpRDMARead:         1 << qp.RC,
	wr.OpAtomicCmpAndSwp:  1<<qp.RC | fastAtomic,
	wr.OpAtomicFetchAdd:   1<<qp.RC | fastAtomic,
}

const fastAtomic = 1 << 7

// postList is PostSend of any list: each request checked (plain, or
// validateSend) and written at the next producer index, all published
// together, one doorbell.
func (p *QP) postList(wrs []wr.SendWR) (int, error) {
	p.sqMu.Lock()
	if p.stopped {
		p.sqMu.Unlock()
		return 0, provider.ErrStopped
	}
	q := p.sq
	prod := q.producer()
	n := 0
	var err error
	for i := range wrs {
		w := &wrs[i]
		plain := p.plain(w)
		var length uint32
		if !plain {
			if length, err = p.validateSend(w); err != nil {
				break
			}
		}
		if q.full(prod, p.caps.MaxSendWR) {
			err = unix.ENOMEM // as rdma-core's rxe: the ring is full
			break
		}
		if plain {
			p.writePlain((*abi.RxeSendWqe)(q.elem(prod)), w, w.SGList)
		} else {
			p.writeSendWQE((*abi.RxeSendWqe)(q.elem(prod)), w, length)
		}
		prod = (prod + 1) & q.mask
		n++
	}
	if n > 0 {
		q.publish(prod)
		if dbErr := p.k.Doorbell(bytesOf(&p.db)); dbErr != nil && err == nil {
			// The WQEs are in the ring; the kernel refused to run them
			// (for instance, the QP is not ready to send).
			err = dbErr
		}
	}
	p.sqMu.Unlock()
	return n, err
}

// BeginBatch opens a batch: the send ring's lock stays held until
// EndBatch or AbortBatch.
func (p *QP) BeginBatch() error {
	p.sqMu.Lock()
	if p.stopped {
		p.sqMu.Unlock()
		return provider.ErrStopped
	}
	p.batchProd, p.batchN, p.batchSSN = p.sq.producer(), 0, p.ssn
	return nil
}

// AddToBatch writes w into the ring after the batch's earlier requests,
// unpublished: the kernel reads the ring only up to the producer index.
func (p *QP) AddToBatch(w *wr.SendWR) error {
	length, err := p.validateSend(w)
	if err != nil {
		return err
	}
	if p.sq.full(p.batchProd, p.caps.MaxSendWR) {
		return unix.ENOMEM
	}
	p.writeSendWQE((*abi.RxeSendWqe)(p.sq.elem(p.batchProd)), w, length)
	p.batchProd = (p.batchProd + 1) & p.sq.mask
	p.batchN++
	return nil
}

// EndBatch publishes the batch's requests and rings the doorbell once, as
// PostSend does, and closes the batch.
func (p *QP) EndBatch() (int, error) {
	n := p.batchN
	var err error
	if n > 0 {
		p.sq.publish(p.batchProd)
		err = p.k.Doorbell(bytesOf(&p.db))
	}
	p.batchN = 0
	p.sqMu.Unlock()
	return n, err
}

// AbortBatch closes the batch without publishing: its requests stay beyond
// the producer index, where the next post overwrites them.
func (p *QP) AbortBatch() {
	p.ssn, p.batchN = p.batchSSN, 0
	p.sqMu.Unlock()
}

func (p *QP) validateSend(w *wr.SendWR) (uint32, error) {
	if uint32(len(w.SGList)) > p.caps.MaxSendSGE {
		return 0, unix.EINVAL
	}
	length, err := provider.SGLength(w.SGList)
	if err != nil {
		return 0, err
	}
	switch w.Opcode {
	case wr.OpSend, wr.OpSendWithImm:
		if p.typ == qp.UD {
			if w.AH == nil {
				return 0, unix.EINVAL
			}
			if ah, ok := udAH(w); !ok || ah == nil {
				return 0, unix.EINVAL
			}
		}
	case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm:
		if p.typ == qp.UD {
			return 0, unix.EINVAL
		}
	case wr.OpRDMARead:
		if p.typ != qp.RC {
			return 0, unix.EINVAL
		}
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		if p.typ != qp.RC || length < 8 || w.Remote.Addr&7 != 0 || w.Flags&wr.Inline != 0 {
			return 0, unix.EINVAL
		}
	case wr.OpSendWithInv:
		// Send with invalidate exists on RC only (IBA 9.4.1.1).
		if p.typ != qp.RC {
			return 0, unix.EINVAL
		}
	case wr.OpLocalInv:
		if len(w.SGList) != 0 || w.Flags&wr.Inline != 0 {
			return 0, unix.EINVAL
		}
	case wr.OpBindMW:
		// As rdma-core's rxe: no data, on a connected QP; the kernel
		// checks the window, the region and the rights, and fails the
		// request in its completion (MWBindErr).
		if w.Bind == nil || len(w.SGList) != 0 || w.Flags&wr.Inline != 0 || (p.typ != qp.RC && p.typ != qp.UC) {
			return 0, unix.EINVAL
		}
	default:
		return 0, unix.EOPNOTSUPP
	}
	if w.Flags&wr.Inline != 0 {
		if length > p.caps.MaxInlineData {
			return 0, unix.EINVAL
		}
		if err := provider.ProbeInline(w.SGList); err != nil {
			return 0, err
		}
	}
	return length, nil
}

// writeSendWQE fills a send queue entry (struct rxe_send_wqe) as rdma-core's
// rxe provider does.
func (p *QP) writeSendWQE(wqe *abi.RxeSendWqe, w *wr.SendWR, length uint32) {
	*wqe = abi.RxeSendWqe{}
	wqe.Wr.Wr_id = w.ID
	wqe.Wr.Opcode = uint32(w.Opcode)
	wqe.Wr.Send_flags = uint32(w.Flags)
	if w.Opcode == wr.OpSendWithImm || w.Opcode == wr.OpRDMAWriteWithImm {
		binary.BigEndian.PutUint32(wqe.Wr.Ex[:], w.Imm)
	}
	switch w.Opcode {
	case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm, wr.OpRDMARead:
		r := wqe.Wr.Rdma()
		r.Remote_addr, r.Rkey = w.Remote.Addr, w.Remote.RKey
		wqe.Iova = w.Remote.Addr
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		a := wqe.Wr.Atomic()
		a.Remote_addr, a.Compare_add, a.Swap, a.Rkey = w.Remote.Addr, w.CompareAdd, w.Swap, w.Remote.RKey
		wqe.Iova = w.Remote.Addr
	case wr.OpSend, wr.OpSendWithImm:
		if p.typ == qp.UD {
			u := wqe.Wr.Ud()
			u.Remote_qpn, u.Remote_qkey = w.RemoteQPN, w.RemoteQKey
			// validateSend checked it; uverbs.AH.Close waits for the
			// UD sends under way, so it is still there.
			if ah, ok := udAH(w); ok && ah != nil {
				u.Ah_num = ah.num
			}
		}
	case wr.OpLocalInv, wr.OpSendWithInv:
		// ex.invalidate_rkey, in host order.
		binary.NativeEndian.PutUint32(wqe.Wr.Ex[:], w.Imm)
	case wr.OpBindMW:
		b, m := w.Bind, wqe.Wr.Mw()
		m.Addr, m.Length, m.Mr_lkey, m.Mw_rkey, m.Rkey, m.Access = b.Addr, b.Length, b.LKey, b.MWRKey, b.NewRKey, uint32(b.Access)
	}
	payload := unsafe.Add(unsafe.Pointer(wqe), sendSGEOffset)
	if w.Flags&wr.Inline != 0 {
		dst := unsafe.Slice((*byte)(payload), length)
		off := 0
		for _, s := range w.SGList {
			off += copy(dst[off:], userBytes(s.Addr, s.Length))
		}
	} else {
		writeSGEs(payload, w.SGList)
	}
	wqe.Dma.Length = length
	wqe.Dma.Resid = length
	wqe.Dma.Num_sge = uint32(len(w.SGList))
	wqe.Ssn = p.ssn
	p.ssn++
}

// userBytes views memory the caller named by address, as the device would
// read it: the source of inline data.
func userBytes(addr uint64, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

// writeSGEs copies a scatter-gather list into a WQE (struct rxe_sge, which
// has the layout of wr.SGE).
func writeSGEs(dst unsafe.Pointer, sges []wr.SGE) {
	for i := range sges {
		e := (*abi.RxeSge)(unsafe.Add(dst, uintptr(i)*abi.SizeofRxeSge))
		e.Addr, e.Length, e.Lkey = sges[i].Addr, sges[i].Length, sges[i].LKey
	}
}

// PostRecv writes receive requests into the receive ring. The kernel reads
// the ring when a message arrives: no doorbell.
func (p *QP) PostRecv(wrs []wr.RecvWR) (int, error) {
	if p.rq == nil {
		return 0, unix.EINVAL // receives go to the SRQ
	}
	p.rqMu.Lock()
	if p.stopped {
		p.rqMu.Unlock()
		return 0, provider.ErrStopped
	}
	n, err := postRecv(p.rq, p.caps.MaxRecvSGE, p.caps.MaxRecvWR, wrs)
	p.rqMu.Unlock()
	return n, err
}

// postRecv fills receive queue entries (struct rxe_recv_wqe) on a QP's
// receive ring or an SRQ.
//
// The room is counted once, before the loop: the kernel only frees slots
// meanwhile, so the count can be short, never long.
func postRecv(q *queue, maxSGE, maxWR uint32, wrs []wr.RecvWR) (int, error) {
	prod := q.producer()
	room := q.room(prod, maxWR)
	n := 0
	var err error
	for i := range wrs {
		w := &wrs[i]
		if uint32(len(w.SGList)) > maxSGE {
			err = unix.EINVAL
			break
		}
		if uint32(n) >= room {
			err = unix.ENOMEM
			break
		}
		var length uint32
		if length, err = provider.SGLength(w.SGList); err != nil {
			break
		}
		wqe := (*abi.RxeRecvWqe)(q.elem(prod))
		*wqe = abi.RxeRecvWqe{Wr_id: w.ID}
		writeSGEs(unsafe.Add(unsafe.Pointer(wqe), recvSGEOffset), w.SGList)
		wqe.Dma.Length, wqe.Dma.Resid, wqe.Dma.Num_sge = length, length, uint32(len(w.SGList))
		prod = (prod + 1) & q.mask
		n++
	}
	if n > 0 {
		q.publish(prod)
	}
	return n, err
}

// SendsRetired returns the send ring's consumer index, which rxe's
// completer advances as it retires acknowledged requests.
func (p *QP) SendsRetired() uint32 { return p.sq.consumer() }

// Drained reports whether the kernel has consumed every posted request (in
// the error state it does so by flushing them into the CQs).
func (p *QP) Drained() bool {
	p.sqMu.Lock()
	done := p.sq.empty(p.sq.consumer())
	p.sqMu.Unlock()
	if !done {
		return false
	}
	p.rqMu.Lock()
	defer p.rqMu.Unlock()
	return p.rq == nil || p.rq.empty(p.rq.consumer())
}

// Stop refuses every later post (provider.QP); taking both rings' locks
// waits for the posts under way.
func (p *QP) Stop() { p.setStopped(true) }

// Resume undoes Stop.
func (p *QP) Resume() { p.setStopped(false) }

func (p *QP) setStopped(v bool) {
	p.sqMu.Lock()
	p.rqMu.Lock()
	if p.sq != nil && p.sq.mem != nil {
		p.stopped = v
	}
	p.rqMu.Unlock()
	p.sqMu.Unlock()
}

// Close stops the QP and unmaps its rings.
func (p *QP) Close() error {
	p.sqMu.Lock()
	defer p.sqMu.Unlock()
	p.rqMu.Lock()
	defer p.rqMu.Unlock()
	p.stopped = true // written under both locks: each post reads it under one
	err := p.sq.unmap(p.k)
	if e := p.rq.unmap(p.k); e != nil && err == nil {
		err = e
	}
	return err
}

// udAH is the rxe AH a UD send names (uverbs.AH.Dest); false when it names
// none of this provider's.
func udAH(w *wr.SendWR) (*AH, bool) {
	ah, ok := provider.AHValue(w.AH.Dest()).(*AH)
	return ah, ok
}
