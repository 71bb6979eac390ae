package uverbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/qpabi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/mlx5"
	"github.com/rdmago/rdma/provider/rxe"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// QPInitAttr describes a queue pair to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   qp.Type
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, if set, supplies the receives; the QP then has no receive queue.
	SRQ  *SRQ
	Caps qp.Caps
	// SignalAll makes every send work request complete with a completion,
	// whatever its Signaled flag (sq_sig_all).
	SignalAll bool
	// SingleThreaded promises that PostSend is never called by two
	// goroutines at once, nor PostRecv, and neither runs concurrently with
	// Close (PostSend and PostRecv may run at the same time as each
	// other). Posting then takes no lock, as rdma-core's providers do for
	// a QP in a thread domain. Breaking the promise corrupts the queue.
	SingleThreaded bool
	// CreateFlags ask the device for more (ibv_qp_init_attr_ex's
	// create_flags). rxe has none: it refuses any with EOPNOTSUPP, as
	// rdma-core's rxe does; on mlx5 the kernel decides.
	CreateFlags QPCreateFlags
}

// QPCreateFlags are a QP's creation flags (enum ibv_qp_create_flags; the
// kernel's enum ib_uverbs_qp_create_flags has the same bits).
type QPCreateFlags uint32

// QP creation flags.
const (
	// QPCreateBlockSelfMcastLB: the QP does not receive the multicast
	// datagrams it sends itself.
	QPCreateBlockSelfMcastLB QPCreateFlags = 1 << 1
	// QPCreateScatterFCS: raw packet QPs receive each packet's frame
	// check sequence (DeviceRawScatterFCS).
	QPCreateScatterFCS QPCreateFlags = 1 << 8
	// QPCreateCVLANStripping: raw packet QPs receive packets with their
	// customer VLAN tag removed, and its value in the completion.
	QPCreateCVLANStripping QPCreateFlags = 1 << 9
	// QPCreatePCIWriteEndPadding: the device pads the end of each
	// scattered write to a whole cache line (DevicePCIWriteEndPadding).
	QPCreatePCIWriteEndPadding QPCreateFlags = 1 << 11
)

const qpCreateFlagsKnown = QPCreateBlockSelfMcastLB | QPCreateScatterFCS | QPCreateCVLANStripping | QPCreatePCIWriteEndPadding

// kernelQPCreateFlags are the flags of the create command: the caller's,
// which have the kernel's values, and sq_sig_all.
func kernelQPCreateFlags(attr *QPInitAttr) uint64 {
	flags := uint64(attr.CreateFlags)
	if attr.SignalAll {
		flags |= abi.IB_UVERBS_QP_CREATE_SQ_SIG_ALL
	}
	return flags
}

// QP is a queue pair (struct ibv_qp).
type QP struct {
	*object
	pd     *PD
	typ    qp.Type
	num    uint32
	caps   qp.Caps
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	// xrcd is the domain of an XRC receive QP (XRCD.CreateRecvQP,
	// XRCD.OpenQP); opened: this context opened the QP another made, and
	// has no provider side for it.
	xrcd   *XRCD
	opened bool
	prov   provider.QP
	// rxe and mlx5 are prov as its concrete type, for the providers this
	// library carries: the post calls go to them directly, a call the
	// compiler sees through, instead of through the interface.
	rxe  *rxe.QP
	mlx5 *mlx5.QP

	// single: the user serializes posting and Close (SingleThreaded), so
	// posting skips rw.
	single bool

	state atomic.Uint32 // qp.State as last set by Modify
	// failed: a completion of this RC QP had an error status, so the
	// device moved it to the error state (whatever state says).
	failed atomic.Bool

	// ka is the running liveness check (SetKeepAlive); kaMu serializes
	// SetKeepAlive.
	kaMu sync.Mutex
	ka   atomic.Pointer[keepAlive]

	batch SendBatch // BeginSend's
}

// CreateQP creates a queue pair in the protection domain (ibv_create_qp).
// The capabilities the device granted, which may exceed those asked for, are
// in QP.Caps.
//
// An XRC send QP (qp.XRCSend) has a send queue only: as in libibverbs, a
// receive CQ and receive capacities are ignored, and an SRQ gets EINVAL.
// XRC receive QPs are made on their domain (XRCD.CreateRecvQP); asked for
// here, they get EINVAL.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	switch attr.Type {
	case qp.XRCRecv:
		return nil, &Error{Op: "create QP", Err: fmt.Errorf("an XRC receive QP belongs to an XRC domain (XRCD.CreateRecvQP), not a PD: %w", unix.EINVAL)}
	case qp.XRCSend:
		if attr.SendCQ == nil || attr.SRQ != nil {
			return nil, &Error{Op: "create QP", Err: fmt.Errorf("an XRC send QP takes a send CQ and no SRQ: %w", unix.EINVAL)}
		}
		attr.RecvCQ = nil
		attr.Caps.MaxRecvWR, attr.Caps.MaxRecvSGE = 0, 0
	default:
		if attr.SendCQ == nil || (attr.RecvCQ == nil && attr.SRQ == nil) {
			return nil, &Error{Op: "create QP", Err: fmt.Errorf("a send CQ and a receive CQ are required: %w", unix.EINVAL)}
		}
		if attr.RecvCQ == nil {
			attr.RecvCQ = attr.SendCQ
		}
	}
	if f := attr.CreateFlags &^ qpCreateFlagsKnown; f != 0 {
		return nil, &Error{Op: "create QP", Err: fmt.Errorf("unknown create flags %#x: %w", uint32(f), unix.EINVAL)}
	}
	var srqObj, recvObj *object
	if attr.SRQ != nil {
		srqObj = attr.SRQ.object
	}
	if attr.RecvCQ != nil {
		recvObj = attr.RecvCQ.object
	}
	// Every handle the command names stays valid until it is done.
	done, err := useAll("create QP", []*object{pd.pdObject(), attr.SendCQ.object, recvObj, srqObj},
		[]string{"PD", "send CQ", "receive CQ", "SRQ"})
	if err != nil {
		return nil, err
	}
	defer done()
	c := pd.ctx
	for _, o := range []*object{attr.SendCQ.object, recvObj, srqObj} {
		if o != nil && o.ctx != c {
			return nil, &Error{Op: "create QP", Err: fmt.Errorf("CQ or SRQ of another context: %w", unix.EINVAL)}
		}
	}
	if attr.SRQ != nil && attr.SRQ.pd != pd {
		return nil, &Error{Op: "create QP", Err: fmt.Errorf("SRQ of another PD: %w", unix.EINVAL)}
	}
	pc, err := c.providerContext("create QP")
	if err != nil {
		return nil, err
	}
	pattr := provider.QPInitAttr{Type: attr.Type, Caps: attr.Caps, HasSRQ: attr.SRQ != nil, SignalAll: attr.SignalAll,
		CreateFlags: uint32(attr.CreateFlags)}
	if attr.SRQ != nil {
		pattr.SRQ = attr.SRQ.prov
	}
	b, err := pc.NewQP(pattr)
	if err != nil {
		return nil, wrapErr("create QP", err)
	}
	q := &QP{pd: pd, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ}
	id := c.nextID.Add(1)

	flags := kernelQPCreateFlags(&attr)
	cmd := newCommand(abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE)
	defer cmd.release()
	capIn, capOut, qpNum := scratchOf[abi.IbUverbsQpCap](cmd), scratchOf[abi.IbUverbsQpCap](cmd), scratchOf[uint32](cmd)
	kcaps := attr.Caps
	if s, ok := b.(provider.CapsSizer); ok {
		kcaps = s.KernelCaps(kcaps)
	}
	*capIn = abi.IbUverbsQpCap{
		Max_send_wr:     kcaps.MaxSendWR,
		Max_recv_wr:     kcaps.MaxRecvWR,
		Max_send_sge:    kcaps.MaxSendSGE,
		Max_recv_sge:    kcaps.MaxRecvSGE,
		Max_inline_data: kcaps.MaxInlineData,
	}
	cmd.driverID = c.dev.DriverID
	h := cmd.idrNew(abi.UVERBS_ATTR_CREATE_QP_HANDLE)
	cmd.idrIn(abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE, pd.handle)
	cmd.idrIn(abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, attr.SendCQ.handle)
	deps := []any{pd, attr.SendCQ}
	if attr.RecvCQ != nil {
		cmd.idrIn(abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, attr.RecvCQ.handle)
		deps = append(deps, attr.RecvCQ)
	}
	if attr.SRQ != nil {
		cmd.idrIn(abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, attr.SRQ.handle)
	}
	cmd.constIn(abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE, id)
	cmd.ptrIn(abi.UVERBS_ATTR_CREATE_QP_CAP, unsafe.Pointer(capIn), int(unsafe.Sizeof(*capIn)))
	cmd.constIn(abi.UVERBS_ATTR_CREATE_QP_TYPE, uint64(attr.Type))
	if flags != 0 {
		// Only when asked for, as libibverbs sends it: the kernel reads
		// an absent attribute as no flags.
		cmd.constIn(abi.UVERBS_ATTR_CREATE_QP_FLAGS, flags)
	}
	if c.asyncFD >= 0 {
		cmd.fdIn(abi.UVERBS_ATTR_CREATE_QP_EVENT_FD, c.asyncFD)
	}
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, unsafe.Pointer(capOut), int(unsafe.Sizeof(*capOut)))
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, unsafe.Pointer(qpNum), 4)
	if q.object, err = c.createObject(cmd, h, b, kindQP, id, "create QP", deps...); err != nil {
		return nil, err
	}
	q.qpn = *qpNum
	if attr.SRQ != nil {
		q.deps = append(q.deps, attr.SRQ)
	}
	q.num = *qpNum
	q.caps = qp.Caps{
		MaxSendWR:     capOut.Max_send_wr,
		MaxRecvWR:     capOut.Max_recv_wr,
		MaxSendSGE:    capOut.Max_send_sge,
		MaxRecvSGE:    capOut.Max_recv_sge,
		MaxInlineData: capOut.Max_inline_data,
	}
	q.single = attr.SingleThreaded
	if err := finishCreate(&q.prov, q.object, b, provider.Created{Handle: q.handle, QPNum: q.num, Caps: q.caps}, "create QP", q.single); err != nil {
		return nil, err
	}
	if s, ok := q.prov.(provider.QueueSizer); ok {
		q.caps = s.GrantedCaps()
	}
	q.rxe, q.mlx5 = concrete[*rxe.QP, *mlx5.QP](q.prov)
	if err := registered(registerQP(c, q), q.object, "create QP"); err != nil {
		return nil, err
	}
	return q, nil
}

// Num returns the QP number peers address it by.
func (q *QP) Num() uint32 { return q.num }

// Type returns the QP's transport.
func (q *QP) Type() qp.Type { return q.typ }

// Caps returns the queue sizes the device granted.
func (q *QP) Caps() qp.Caps { return q.caps }

// State returns the state the QP was last moved to by Modify. A QP can also
// enter the error state on its own; Query asks the kernel.
func (q *QP) State() qp.State { return qp.State(q.state.Load()) }

// Modify changes the QP's attributes and state (ibv_modify_qp). The mask is
// checked against the transition's required and allowed attributes first,
// so a wrong one fails with a message naming the attributes, before the
// kernel sees it.
func (q *QP) Modify(attr qp.Attr, mask qp.AttrMask) error {
	if q == nil {
		return &Error{Op: "modify QP", Err: errNil}
	}
	a := &attr
	if err := q.use(); err != nil {
		return err
	}
	defer q.done()
	cur := q.State()
	if mask&qp.AttrCurState != 0 {
		cur = a.CurState
	}
	next := cur
	if mask&qp.AttrState != 0 {
		next = a.State
	}
	if err := qp.Validate(q.typ, cur, next, mask); err != nil {
		return &Error{Op: "modify QP", Err: err}
	}
	return q.modify(a, mask)
}

// modify sends the modify command, unchecked, and records the new state;
// the caller holds rw.
func (q *QP) modify(a *qp.Attr, mask qp.AttrMask) error {
	// The extended command only adds the rate limit, which the state table
	// allows for raw packet QPs alone: the base command carries the rest.
	cmd := q.ctx.writeCommand(abi.IB_USER_VERBS_CMD_MODIFY_QP, q.ctx.quick)
	defer cmd.release()
	req := scratchOf[abi.IbUverbsExModifyQp](cmd)
	qpabi.EncodeModifyTo(req, q.handle, a, mask)
	cmd.ptrIn(abi.UVERBS_ATTR_CORE_IN, unsafe.Pointer(&req.Base), int(unsafe.Sizeof(req.Base)))
	if err := cmd.execute(q.ctx.f, "modify QP"); err != nil {
		return err
	}
	if mask&qp.AttrState != 0 {
		q.state.Store(uint32(a.State))
		if a.State == qp.StateReset {
			q.failed.Store(false) // RESET is the way out of the error state
		}
	}
	return nil
}

// Query returns the attributes named by mask and the creation attributes
// (ibv_query_qp).
func (q *QP) Query(mask qp.AttrMask) (qp.Attr, qp.InitAttr, error) {
	if q == nil {
		return qp.Attr{}, qp.InitAttr{}, errNil
	}
	if err := q.use(); err != nil {
		return qp.Attr{}, qp.InitAttr{}, err
	}
	defer q.done()
	req := new(abi.IbUverbsQueryQp)
	*req = qpabi.EncodeQuery(q.handle, mask)
	resp, err := writeCmd[abi.IbUverbsQueryQpResp](q.ctx, abi.IB_USER_VERBS_CMD_QUERY_QP, req, "query QP")
	if err != nil {
		return qp.Attr{}, qp.InitAttr{}, err
	}
	a, ia := qpabi.DecodeQuery(resp)
	return a, ia, nil
}

// PostError is a post that stopped at a work request: Index is the first
// one that did not reach the queue (ibv_post_send's bad_wr); the ones
// before it were posted.
type PostError struct {
	Op    string
	Index int
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("uverbs: %s: work request %d: %v", e.Op, e.Index, e.Err)
}
func (e *PostError) Unwrap() error { return e.Err }

// PostSend posts send work requests (ibv_post_send). It returns how many
// were posted: all of them, or, with an error, those before the refused one.
// A QP that is not ready to send (RESET, INIT, RTR) gets EINVAL and nothing
// reaches its queue; a full queue gets ENOMEM.
func (q *QP) PostSend(wrs []wr.SendWR) (int, error) {
	if q == nil {
		return 0, errNil
	}
	// No lock: the provider's queue lock is the only one a post takes.
	// Close stops the provider's QP before it destroys the kernel object
	// (Stop waits for the posts under way and refuses later ones), so a
	// post that passes this check and loses the race gets ErrClosed from
	// the provider.
	if q.dead.Load() {
		return 0, ErrClosed
	}
	// One test for the common case; the refusals and UD's address
	// handles are checked out of line, so that this path keeps its
	// values in registers.
	if q.State() <= qp.StateRTR || q.typ == qp.XRCRecv || q.typ == qp.UD || len(wrs) == 0 {
		return q.postSendChecked(wrs)
	}
	// post, by hand: one call fewer per request.
	var n int
	var err error
	switch {
	case q.rxe != nil:
		n, err = q.rxe.PostSend(wrs)
	case q.mlx5 != nil:
		n, err = q.mlx5.PostSend(wrs)
	default:
		n, err = q.prov.PostSend(wrs)
	}
	if err != nil {
		return n, postErr("post send", n, err)
	}
	return n, nil
}

// postSendChecked is PostSend for a QP that cannot send or a UD QP.
func (q *QP) postSendChecked(wrs []wr.SendWR) (int, error) {
	switch q.State() {
	case qp.StateReset, qp.StateInit, qp.StateRTR:
		return 0, &PostError{Op: "post send", Err: fmt.Errorf("QP %d is in state %v: %w", q.num, q.State(), unix.EINVAL)}
	}
	if q.typ == qp.XRCRecv {
		return 0, &PostError{Op: "post send", Err: fmt.Errorf("an XRC receive QP has no send queue: %w", unix.EINVAL)}
	}
	if q.typ == qp.UD {
		// The AHs' numbers go into the queue: hold off their Close.
		q.pd.ahMu.RLock()
		defer q.pd.ahMu.RUnlock()
		for i := range wrs {
			if err := q.checkAH(&wrs[i]); err != nil {
				n, perr := q.post(wrs[:i])
				if perr != nil {
					return n, perr
				}
				return n, &PostError{Op: "post send", Index: i, Err: err}
			}
		}
	}
	return q.post(wrs)
}

func (q *QP) post(wrs []wr.SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	var n int
	var err error
	switch {
	case q.rxe != nil:
		n, err = q.rxe.PostSend(wrs)
	case q.mlx5 != nil:
		n, err = q.mlx5.PostSend(wrs)
	default:
		n, err = q.prov.PostSend(wrs)
	}
	if err != nil {
		return n, postErr("post send", n, err)
	}
	return n, nil
}

// postErr is the error of a post the provider refused at index n; a
// stopped provider QP means a closed one.
func postErr(op string, n int, err error) error {
	if err == provider.ErrStopped {
		return ErrClosed
	}
	return &PostError{Op: op, Index: n, Err: err}
}

// checkAH checks the address handle of a UD send (under pd.ahMu): the
// provider reads its number, which must belong to a live AH of the QP's
// PD.
func (q *QP) checkAH(w *wr.SendWR) error {
	if w.Opcode != wr.OpSend && w.Opcode != wr.OpSendWithImm {
		return nil // the provider refuses other opcodes on UD
	}
	if w.AH == nil {
		return fmt.Errorf("UD send without an address handle: %w", unix.EINVAL)
	}
	ah, ok := w.AH.(*AH)
	switch {
	case !ok:
		return fmt.Errorf("address handle of type %T, not *uverbs.AH: %w", w.AH, unix.EINVAL)
	case ah == nil:
		return fmt.Errorf("nil address handle: %w", unix.EINVAL)
	case ah.dead.Load():
		return fmt.Errorf("address handle: %w", ErrClosed)
	case ah.pd != q.pd:
		return fmt.Errorf("address handle of another PD: %w", unix.EINVAL)
	}
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv). A QP in RESET, or
// one that receives through an SRQ, gets EINVAL; a full queue ENOMEM.
//
// A receive posted to a QP the library knows to be in the error state
// (moved there by Modify, or shown there by an error completion polled
// from one of its CQs) completes at once with WRFlushErr on the receive
// CQ, as the verbs specification asks. The library does it itself because
// some kernels never flush such a receive (rxe on 6.1 leaves it in the
// queue, which libibverbs programs see as a hang). The completion comes
// from Poll; it raises no event on a completion channel, so a waiter must
// poll after arming, as ibv_req_notify_cq requires anyway.
func (q *QP) PostRecv(wrs []wr.RecvWR) (int, error) {
	if q == nil {
		return 0, errNil
	}
	if q.dead.Load() {
		return 0, ErrClosed // and the provider's Stop, as in PostSend
	}
	if q.State() == qp.StateReset {
		return 0, &PostError{Op: "post recv", Err: fmt.Errorf("QP %d is in state RESET: %w", q.num, unix.EINVAL)}
	}
	if q.typ == qp.XRCSend || q.typ == qp.XRCRecv {
		// XRC receives go to the target domain's XRC SRQs.
		return 0, &PostError{Op: "post recv", Err: fmt.Errorf("an %v QP has no receive queue (post to an XRC SRQ): %w", q.typ, unix.EINVAL)}
	}
	if q.srq == nil && (q.State() == qp.StateErr || q.failed.Load()) {
		return q.flushRecvs(wrs)
	}
	var n int
	var err error
	switch {
	case q.rxe != nil:
		n, err = q.rxe.PostRecv(wrs)
	case q.mlx5 != nil:
		n, err = q.mlx5.PostRecv(wrs)
	default:
		n, err = q.prov.PostRecv(wrs)
	}
	if err != nil {
		return n, postErr("post recv", n, err)
	}
	return n, nil
}

// flushRecvs completes receives posted in the error state with
// WRFlushErr, through the receive CQ's own queue of completions.
func (q *QP) flushRecvs(wrs []wr.RecvWR) (int, error) {
	// The slow path takes the close lock that posts do without: the
	// completions go to the CQ only while the QP is open.
	if !q.single {
		q.rw.RLock()
		defer q.rw.RUnlock()
	}
	if q.dead.Load() {
		return 0, ErrClosed
	}
	cq := q.recvCQ
	cq.softMu.Lock()
	defer cq.softMu.Unlock()
	for i := range wrs {
		w := &wrs[i]
		var err error
		switch {
		case uint32(len(w.SGList)) > q.caps.MaxRecvSGE:
			err = fmt.Errorf("%d SGEs, the QP takes %d: %w", len(w.SGList), q.caps.MaxRecvSGE, unix.EINVAL)
		case len(cq.soft) >= cq.cqe:
			err = unix.ENOMEM // as a full CQ would overflow
		}
		if err == nil {
			_, err = provider.SGLength(w.SGList)
		}
		if err != nil {
			return i, &PostError{Op: "post recv", Index: i, Err: err}
		}
		cq.soft = append(cq.soft, wr.Completion{ID: w.ID, Status: wr.WRFlushErr, Opcode: wr.WCRecv, QPNum: q.num})
		cq.softN.Store(int32(len(cq.soft)))
	}
	return len(wrs), nil
}

// drainTimeout bounds how long Close waits for outstanding work to flush.
const drainTimeout = 2 * time.Second

// Close destroys the QP (ibv_destroy_qp). Unlike ibv_destroy_qp, it first
// moves a QP that may hold work to the error state, so outstanding work
// requests complete with WRFlushErr on its CQs and a program sees every
// request it posted come back.
func (q *QP) Close() error {
	if q == nil {
		return errNil
	}
	q.rw.Lock()
	defer q.rw.Unlock()
	if q.dead.Load() {
		return nil
	}
	q.stopKeepAlive()
	// An XRC receive QP has nothing of its own to flush, and moving it to
	// the error state would break it for the other processes that opened
	// it (OpenQP).
	if s := q.State(); s != qp.StateReset && s != qp.StateErr && q.typ != qp.XRCRecv {
		// Best effort: destroying works whatever the state.
		err := q.modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		// The device flushes asynchronously; destroying first would drop
		// the flush completions. Wait for them, but not forever.
		if d, ok := q.prov.(provider.Drainer); ok && err == nil {
			for deadline := time.Now().Add(drainTimeout); !d.Drained() && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	// Posts take no lock of ours (PostSend): stop them in the provider,
	// which waits for those under way, before the handle they ring the
	// doorbell with is destroyed.
	if q.prov != nil {
		q.prov.Stop()
	}
	err := q.closeLocked()
	if err != nil && q.prov != nil && !q.dead.Load() {
		q.prov.Resume() // the QP lives on
	}
	return err
}
