package rxe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/wr"
)

// Where the scatter-gather list (or the inline data) of a WQE starts: right
// after the fixed part, in struct rxe_dma_info's flexible array.
const (
	sendSGEOffset = abi.SizeofRxeSendWqe
	recvSGEOffset = abi.SizeofRxeRecvWqe
)

type qpBuilder struct {
	k    provider.Kernel
	attr provider.QPInitAttr
	resp *abi.RxeCreateQpResp
}

// NewQP prepares a queue pair.
func (c *Context) NewQP(attr provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	switch attr.Type {
	case provider.QPTypeRC, provider.QPTypeUC, provider.QPTypeUD:
	default:
		return nil, fmt.Errorf("rxe: QP type %d: %w", attr.Type, unix.EOPNOTSUPP)
	}
	return &qpBuilder{k: c.k, attr: attr, resp: new(abi.RxeCreateQpResp)}, nil
}

func (b *qpBuilder) Udata() (in, out []byte) { return nil, bytesOf(b.resp) }
func (b *qpBuilder) Abort()                  {}

func (b *qpBuilder) Finish(c provider.Created) (provider.QP, error) {
	qp := &QP{k: b.k, typ: b.attr.Type, caps: c.Caps}
	var err error
	if !b.attr.HasSRQ {
		if qp.rq, err = mapQueue(b.k, b.resp.Rq_mi); err != nil {
			return nil, fmt.Errorf("rxe: mapping the receive queue: %w", err)
		}
		if err := checkElem(qp.rq, recvSGEOffset, c.Caps.MaxRecvSGE*abi.SizeofRxeSge); err != nil {
			qp.Close()
			return nil, err
		}
	}
	if qp.sq, err = mapQueue(b.k, b.resp.Sq_mi); err != nil {
		qp.Close()
		return nil, fmt.Errorf("rxe: mapping the send queue: %w", err)
	}
	if err := checkElem(qp.sq, sendSGEOffset, max(c.Caps.MaxSendSGE*abi.SizeofRxeSge, c.Caps.MaxInlineData)); err != nil {
		qp.Close()
		return nil, err
	}
	qp.db.hdr.Command = abi.IB_USER_VERBS_CMD_POST_SEND
	qp.db.hdr.In_words = uint16((unsafe.Sizeof(qp.db.hdr) + unsafe.Sizeof(qp.db.cmd)) / 4)
	qp.db.hdr.Out_words = uint16(unsafe.Sizeof(qp.dbResp) / 4)
	qp.db.cmd.Response = uint64(uintptr(unsafe.Pointer(&qp.dbResp)))
	qp.db.cmd.Qp_handle = c.Handle
	qp.db.cmd.Wqe_size = abi.SizeofIbUverbsSendWr
	return qp, nil
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
	typ  provider.QPType
	caps provider.QPCaps

	sqMu queueLock
	sq   *queue
	ssn  uint32
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
}

// PostSend writes each work request into the send ring, publishes them
// together and rings the doorbell once.
func (qp *QP) PostSend(wrs []wr.SendWR) (int, error) {
	qp.sqMu.Lock()
	q := qp.sq
	prod := q.producer()
	n := 0
	var err error
	for i := range wrs {
		w := &wrs[i]
		var length uint32
		if length, err = qp.validateSend(w); err != nil {
			break
		}
		if q.full(prod, qp.caps.MaxSendWR) {
			err = unix.ENOMEM // as rdma-core's rxe: the ring is full
			break
		}
		qp.writeSendWQE((*abi.RxeSendWqe)(q.elem(prod)), w, length)
		prod = (prod + 1) & q.mask
		n++
	}
	if n > 0 {
		q.publish(prod)
	}
	qp.sqMu.Unlock()
	if n > 0 {
		if dbErr := qp.k.Write(bytesOf(&qp.db)); dbErr != nil && err == nil {
			// The WQEs are in the ring; the kernel refused to run them
			// (for instance, the QP is not ready to send).
			return n, dbErr
		}
	}
	return n, err
}

func (qp *QP) validateSend(w *wr.SendWR) (uint32, error) {
	if uint32(len(w.SGList)) > qp.caps.MaxSendSGE {
		return 0, unix.EINVAL
	}
	length, err := provider.SGLength(w.SGList)
	if err != nil {
		return 0, err
	}
	switch w.Opcode {
	case wr.OpSend, wr.OpSendWithImm:
		if qp.typ == provider.QPTypeUD {
			if w.AH == nil {
				return 0, unix.EINVAL
			}
			if _, ok := w.AH.ProviderAH().(*AH); !ok {
				return 0, unix.EINVAL
			}
		}
	case wr.OpRDMAWrite, wr.OpRDMAWriteWithImm:
		if qp.typ == provider.QPTypeUD {
			return 0, unix.EINVAL
		}
	case wr.OpRDMARead:
		if qp.typ != provider.QPTypeRC {
			return 0, unix.EINVAL
		}
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		if qp.typ != provider.QPTypeRC || length < 8 || w.RemoteAddr&7 != 0 || w.Flags&wr.Inline != 0 {
			return 0, unix.EINVAL
		}
	default:
		return 0, unix.EOPNOTSUPP
	}
	if w.Flags&wr.Inline != 0 {
		if length > qp.caps.MaxInlineData {
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
func (qp *QP) writeSendWQE(wqe *abi.RxeSendWqe, w *wr.SendWR, length uint32) {
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
		r.Remote_addr, r.Rkey = w.RemoteAddr, w.RKey
		wqe.Iova = w.RemoteAddr
	case wr.OpAtomicCmpAndSwp, wr.OpAtomicFetchAdd:
		a := wqe.Wr.Atomic()
		a.Remote_addr, a.Compare_add, a.Swap, a.Rkey = w.RemoteAddr, w.CompareAdd, w.Swap, w.RKey
		wqe.Iova = w.RemoteAddr
	case wr.OpSend, wr.OpSendWithImm:
		if qp.typ == provider.QPTypeUD {
			u := wqe.Wr.Ud()
			u.Remote_qpn, u.Remote_qkey = w.RemoteQPN, w.RemoteQKey
			u.Ah_num = w.AH.ProviderAH().(*AH).num
		}
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
	wqe.Ssn = qp.ssn
	qp.ssn++
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
func (qp *QP) PostRecv(wrs []wr.RecvWR) (int, error) {
	if qp.rq == nil {
		return 0, unix.EINVAL // receives go to the SRQ
	}
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	return postRecv(qp.rq, qp.caps.MaxRecvSGE, qp.caps.MaxRecvWR, wrs)
}

// postRecv fills receive queue entries (struct rxe_recv_wqe) on a QP's
// receive ring or an SRQ.
func postRecv(q *queue, maxSGE, maxWR uint32, wrs []wr.RecvWR) (int, error) {
	prod := q.producer()
	n := 0
	var err error
	for i := range wrs {
		w := &wrs[i]
		if uint32(len(w.SGList)) > maxSGE {
			err = unix.EINVAL
			break
		}
		if q.full(prod, maxWR) {
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
func (qp *QP) SendsRetired() uint32 { return qp.sq.consumer() }

// Drained reports whether the kernel has consumed every posted request (in
// the error state it does so by flushing them into the CQs).
func (qp *QP) Drained() bool {
	qp.sqMu.Lock()
	done := qp.sq.empty(qp.sq.consumer())
	qp.sqMu.Unlock()
	if !done {
		return false
	}
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	return qp.rq == nil || qp.rq.empty(qp.rq.consumer())
}

// Close unmaps the rings.
func (qp *QP) Close() error {
	qp.sqMu.Lock()
	err := qp.sq.unmap(qp.k)
	qp.sqMu.Unlock()
	qp.rqMu.Lock()
	if e := qp.rq.unmap(qp.k); e != nil && err == nil {
		err = e
	}
	qp.rqMu.Unlock()
	return err
}
