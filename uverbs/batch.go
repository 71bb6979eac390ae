package uverbs

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// SendBatch writes send work requests straight into a QP's send queue, one
// call per field group, and posts them together: libibverbs' extended post
// API (ibv_wr_start, ibv_wr_rdma_write, ibv_wr_set_sge, …,
// ibv_wr_complete). Where PostSend takes a slice of work requests the
// caller filled, a batch needs none: each request is checked and written
// into the queue as soon as its last setter is called, and nothing of the
// batch reaches the device before Complete.
//
// A request starts with an opcode method (Send, RDMAWrite, …), which takes
// the request's ID and flags; then comes its data, with exactly one of
// SetSGE, SetSGEList or SetInlineData (none for LocalInv and BindMW), and
// on a UD QP its destination, SetUDAddr, before or after the data. The
// first refused call makes the batch fail: the calls after it do nothing,
// and Complete posts none of the batch's requests and returns that error,
// a *PostError whose Index is the refused request's. Every request of a
// batch is posted, or none is.
//
// A QP has one batch at a time: BeginSend while one is open returns
// EBUSY. The batch holds the send queue's lock from BeginSend until
// Complete or Abort, so PostSend on the same QP waits for it (never call
// it from the batch's goroutine before the batch ends), and so does Close.
// Keep a batch short and use it from one goroutine. A batch's methods
// after its end do nothing, and its Complete returns an error.
type SendBatch struct {
	q    *QP
	open atomic.Bool
	prov provider.SendBatcher
	ud   bool // the QP is UD: requests need SetUDAddr, pd.ahMu is held
	xrc  bool // the QP is an XRC send QP: requests need SetXRCSRQN

	cur  wr.SendWR // the request being built
	need uint8     // setters it still needs (needData, needAddr)
	sgl  []wr.SGE  // SetSGE's and SetSGEList's copy: the caller's stays theirs
	bind wr.BindInfo
	n    int // requests written
	err  error
}

const (
	needData = 1 << iota
	needAddr
)

// BeginSend opens a batch of send requests on the QP (ibv_wr_start). The
// QP must be ready to send (RTS or SQD, as for PostSend); a provider that
// cannot write requests one at a time answers EOPNOTSUPP.
func (q *QP) BeginSend() (*SendBatch, error) {
	if q == nil {
		return nil, errNil
	}
	if q.dead.Load() {
		return nil, ErrClosed
	}
	switch q.State() {
	case qp.StateReset, qp.StateInit, qp.StateRTR:
		return nil, &PostError{Op: "begin send batch", Err: fmt.Errorf("QP %d is in state %v: %w", q.num, q.State(), unix.EINVAL)}
	}
	if q.typ == qp.XRCRecv {
		return nil, &PostError{Op: "begin send batch", Err: fmt.Errorf("an XRC receive QP has no send queue: %w", unix.EINVAL)}
	}
	sb, ok := q.prov.(provider.SendBatcher)
	if !ok {
		return nil, &PostError{Op: "begin send batch", Err: fmt.Errorf("the provider writes no batches: %w", unix.EOPNOTSUPP)}
	}
	b := &q.batch
	if b.open.Load() {
		// The queue's lock is held by that batch: waiting for it from
		// the goroutine that holds it would never end.
		return nil, &PostError{Op: "begin send batch", Err: fmt.Errorf("a batch is open on QP %d: %w", q.num, unix.EBUSY)}
	}
	ud := q.typ == qp.UD
	if ud {
		// As in PostSend: the AHs' numbers go into the queue.
		q.pd.ahMu.RLock()
	}
	if err := sb.BeginBatch(); err != nil {
		if ud {
			q.pd.ahMu.RUnlock()
		}
		if err == provider.ErrStopped {
			return nil, ErrClosed
		}
		return nil, &PostError{Op: "begin send batch", Err: err}
	}
	if b.sgl == nil {
		// Once per QP, so that the batch allocates nothing afterwards.
		b.sgl = make([]wr.SGE, max(q.caps.MaxSendSGE, 1))
	}
	b.q, b.prov, b.ud, b.xrc = q, sb, ud, q.typ == qp.XRCSend
	b.need, b.n, b.err = 0, 0, nil
	b.open.Store(true)
	return b, nil
}

// start begins a request, after checking that the one before it is whole.
func (b *SendBatch) start(id uint64, flags wr.SendFlags, op wr.Opcode) bool {
	if !b.open.Load() || b.err != nil {
		return false
	}
	if b.need != 0 {
		b.fail(fmt.Errorf("request %v started before the one before it had its %s: %w", op, b.missing(), unix.EINVAL))
		return false
	}
	b.cur = wr.SendWR{ID: id, Opcode: op, Flags: flags}
	b.need = needData
	if b.ud || b.xrc {
		b.need |= needAddr
	}
	return true
}

func (b *SendBatch) missing() string {
	switch b.need {
	case needData:
		return "data (SetSGE, SetSGEList or SetInlineData)"
	case needAddr:
		if b.xrc {
			return "target SRQ (SetXRCSRQN)"
		}
		return "destination (SetUDAddr)"
	}
	if b.xrc {
		return "data and target SRQ"
	}
	return "data and destination"
}

func (b *SendBatch) fail(err error) {
	b.err = &PostError{Op: "send batch", Index: b.n, Err: err}
}

// done marks setters as called, and writes the request once it has all.
func (b *SendBatch) done(set uint8) {
	b.need &^= set
	if b.need != 0 {
		return
	}
	if err := b.prov.AddToBatch(&b.cur); err != nil {
		b.fail(err)
		return
	}
	b.n++
}

// Send starts a send (IBV_WR_SEND).
func (b *SendBatch) Send(id uint64, flags wr.SendFlags) {
	b.start(id, flags, wr.OpSend)
}

// SendWithImm starts a send with immediate data (IBV_WR_SEND_WITH_IMM);
// imm is in host byte order.
func (b *SendBatch) SendWithImm(id uint64, flags wr.SendFlags, imm uint32) {
	if b.start(id, flags, wr.OpSendWithImm) {
		b.cur.Imm = imm
	}
}

// SendWithInv starts a send that invalidates the peer's rkey when it
// arrives (IBV_WR_SEND_WITH_INV).
func (b *SendBatch) SendWithInv(id uint64, flags wr.SendFlags, rkey uint32) {
	if b.start(id, flags, wr.OpSendWithInv) {
		b.cur.Imm = rkey
	}
}

// RDMAWrite starts an RDMA write to the peer's remoteAddr under rkey
// (IBV_WR_RDMA_WRITE).
func (b *SendBatch) RDMAWrite(id uint64, flags wr.SendFlags, rkey uint32, remoteAddr uint64) {
	if b.start(id, flags, wr.OpRDMAWrite) {
		b.cur.Remote.RKey, b.cur.Remote.Addr = rkey, remoteAddr
	}
}

// RDMAWriteWithImm starts an RDMA write whose immediate data completes a
// receive at the peer (IBV_WR_RDMA_WRITE_WITH_IMM).
func (b *SendBatch) RDMAWriteWithImm(id uint64, flags wr.SendFlags, rkey uint32, remoteAddr uint64, imm uint32) {
	if b.start(id, flags, wr.OpRDMAWriteWithImm) {
		b.cur.Remote.RKey, b.cur.Remote.Addr, b.cur.Imm = rkey, remoteAddr, imm
	}
}

// RDMARead starts an RDMA read from the peer's remoteAddr under rkey
// (IBV_WR_RDMA_READ); the data goes where SetSGE or SetSGEList say.
func (b *SendBatch) RDMARead(id uint64, flags wr.SendFlags, rkey uint32, remoteAddr uint64) {
	if b.start(id, flags, wr.OpRDMARead) {
		b.cur.Remote.RKey, b.cur.Remote.Addr = rkey, remoteAddr
	}
}

// AtomicCmpSwp starts an 8-byte compare-and-swap at the peer's remoteAddr
// (IBV_WR_ATOMIC_CMP_AND_SWP); the old value goes to the 8-byte buffer
// SetSGE names.
func (b *SendBatch) AtomicCmpSwp(id uint64, flags wr.SendFlags, rkey uint32, remoteAddr, compare, swap uint64) {
	if b.start(id, flags, wr.OpAtomicCmpAndSwp) {
		b.cur.Remote.RKey, b.cur.Remote.Addr, b.cur.CompareAdd, b.cur.Swap = rkey, remoteAddr, compare, swap
	}
}

// AtomicFetchAdd starts an 8-byte fetch-and-add at the peer's remoteAddr
// (IBV_WR_ATOMIC_FETCH_AND_ADD).
func (b *SendBatch) AtomicFetchAdd(id uint64, flags wr.SendFlags, rkey uint32, remoteAddr, add uint64) {
	if b.start(id, flags, wr.OpAtomicFetchAdd) {
		b.cur.Remote.RKey, b.cur.Remote.Addr, b.cur.CompareAdd = rkey, remoteAddr, add
	}
}

// LocalInv invalidates the local rkey (IBV_WR_LOCAL_INV). It has no data:
// the request is written at once.
func (b *SendBatch) LocalInv(id uint64, flags wr.SendFlags, rkey uint32) {
	if b.start(id, flags, wr.OpLocalInv) {
		b.cur.Imm = rkey
		b.done(needData | needAddr)
	}
}

// BindMW binds a type 2 memory window (IBV_WR_BIND_MW; see
// wr.BindInfo). It has no data: the request is written at once.
func (b *SendBatch) BindMW(id uint64, flags wr.SendFlags, bind wr.BindInfo) {
	if b.start(id, flags, wr.OpBindMW) {
		b.bind = bind
		b.cur.Bind = &b.bind
		b.done(needData | needAddr)
	}
}

// SetSGE gives the request one buffer (ibv_wr_set_sge).
func (b *SendBatch) SetSGE(lkey uint32, addr uint64, length uint32) {
	if !b.setting(needData) {
		return
	}
	b.sgl[0] = wr.SGE{Addr: addr, Length: length, LKey: lkey}
	b.cur.SGList = b.sgl[:1]
	b.done(needData)
}

// SetSGEList gives the request a gather (or scatter) list
// (ibv_wr_set_sge_list). The list is copied: the caller may reuse it.
func (b *SendBatch) SetSGEList(sges []wr.SGE) {
	if !b.setting(needData) {
		return
	}
	if len(sges) > len(b.sgl) {
		b.fail(fmt.Errorf("%d SGEs, the QP takes %d: %w", len(sges), len(b.sgl), unix.EINVAL))
		return
	}
	b.cur.SGList = b.sgl[:copy(b.sgl, sges)]
	b.done(needData)
}

// SetInlineData makes p the request's data, copied into the queue
// (ibv_wr_set_inline_data): p need not be registered, and is the caller's
// again when SetInlineData returns.
func (b *SendBatch) SetInlineData(p []byte) {
	if !b.setting(needData) {
		return
	}
	b.cur.Flags |= wr.Inline
	b.cur.SGList = b.sgl[:0]
	if len(p) > 0 {
		b.sgl[0] = wr.SGE{Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))), Length: uint32(len(p))}
		if uint64(len(p)) > uint64(^uint32(0)) {
			b.fail(fmt.Errorf("%d bytes of inline data: %w", len(p), unix.EINVAL))
			return
		}
		b.cur.SGList = b.sgl[:1]
	}
	b.done(needData)
	runtime.KeepAlive(p) // the provider copied it
}

// SetUDAddr gives a UD request its destination (ibv_wr_set_ud_addr): the
// address handle, which must be of the QP's PD, and the remote QP's number
// and Q_Key.
func (b *SendBatch) SetUDAddr(ah *AH, remoteQPN, remoteQKey uint32) {
	if b.open.Load() && b.err == nil && b.xrc {
		b.fail(fmt.Errorf("SetUDAddr on an XRC send QP (its requests take SetXRCSRQN): %w", unix.EINVAL))
		return
	}
	if !b.setting(needAddr) {
		return
	}
	b.cur.AH, b.cur.RemoteQPN, b.cur.RemoteQKey = ah, remoteQPN, remoteQKey
	if ah == nil {
		// A nil *AH in the interface would look set.
		b.cur.AH = nil
	}
	if err := b.q.checkAH(&b.cur); err != nil {
		b.fail(err)
		return
	}
	b.done(needAddr)
}

// SetXRCSRQN gives a request of an XRC send QP the number of the XRC SRQ
// at the target it lands in (ibv_wr_set_xrc_srqn): SRQ.Num there. Every
// request of an XRC send QP that has data needs it; LocalInv and BindMW,
// written at once, carry none.
func (b *SendBatch) SetXRCSRQN(srqn uint32) {
	if b.open.Load() && b.err == nil && !b.xrc {
		b.fail(fmt.Errorf("SetXRCSRQN on a QP that is not an XRC send QP: %w", unix.EINVAL))
		return
	}
	if !b.setting(needAddr) {
		return
	}
	b.cur.RemoteSRQN = srqn
	b.done(needAddr)
}

// setting checks that a setter is due: the batch is open and has not
// failed, and the request still needs what it sets.
func (b *SendBatch) setting(set uint8) bool {
	if !b.open.Load() || b.err != nil {
		return false
	}
	if b.need&set == 0 {
		var what string
		switch {
		case set == needAddr && !b.ud && !b.xrc:
			what = "SetUDAddr or SetXRCSRQN on a QP that is neither UD nor XRC send"
		case b.need == 0 && b.n > 0 && (b.cur.Opcode == wr.OpLocalInv || b.cur.Opcode == wr.OpBindMW):
			what = "a setter for " + b.cur.Opcode.String() + ", which has none"
		case b.need == 0:
			what = "a setter without a request started, or one called twice"
		case set == needData:
			what = "a second data setter"
		case b.xrc:
			what = "a second SetXRCSRQN"
		default:
			what = "a second SetUDAddr"
		}
		b.fail(fmt.Errorf("%s: %w", what, unix.EINVAL))
		return false
	}
	return true
}

// Complete posts the batch's requests with one doorbell and ends the
// batch (ibv_wr_complete). It returns how many were posted: all, or none
// with the error of the first refused call. A request left without its
// data or destination is an error too.
func (b *SendBatch) Complete() (int, error) {
	if b == nil || !b.open.Load() {
		return 0, &PostError{Op: "complete send batch", Err: fmt.Errorf("no batch open: %w", unix.EINVAL)}
	}
	if b.err == nil && b.need != 0 {
		b.fail(fmt.Errorf("request %v without its %s: %w", b.cur.Opcode, b.missing(), unix.EINVAL))
	}
	err := b.err
	n := 0
	if err != nil {
		b.prov.AbortBatch()
	} else {
		var dbErr error
		if n, dbErr = b.prov.EndBatch(); dbErr != nil {
			// The requests are in the queue; the kernel refused to
			// start them (as PostSend reports it).
			err = &PostError{Op: "complete send batch", Index: n, Err: dbErr}
		}
	}
	b.end()
	return n, err
}

// Abort ends the batch and posts none of its requests (ibv_wr_abort).
func (b *SendBatch) Abort() {
	if b == nil || !b.open.Load() {
		return
	}
	b.prov.AbortBatch()
	b.end()
}

func (b *SendBatch) end() {
	b.open.Store(false)
	b.cur = wr.SendWR{} // drop the AH and the request's slices
	b.need = 0
	if b.ud {
		b.q.pd.ahMu.RUnlock()
	}
}
