package cm

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/qpabi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// verbsState is what CreateQP made on an ID.
type verbsState struct {
	sendCQ, recvCQ *uverbs.CQ
	// comp is the device's shared completion channel, when CreateQP made
	// a CQ; sendWake and recvWake wake the waits on the CQs it made.
	comp               *compEvents
	sendWake, recvWake chan struct{}
	// ownSend and ownRecv: the CQ was made by CreateQP and is destroyed
	// with the QP.
	ownSend, ownRecv bool
	hasSRQ           bool
	// hasXRCSRQ: the receive CQ is the one made for the ID's XRC SRQ
	// (CreateSRQ on an XRC receive ID).
	hasXRCSRQ bool
}

// CreateQP creates the ID's queue pair (rdma_create_qp) on the device the
// ID is bound to, and moves it to the state the ID's connection needs: INIT
// for an RC ID, whose Connect or Accept takes it to RTS; RTS at once for a
// UD ID, with its Q_Key. pd nil means the ID's PD. attr.Type 0 means the
// ID's QP type. Send and receive CQs that attr leaves nil are created with
// as many entries as the queue has work requests, as librdmacm does, and
// destroyed with the QP; GetSendComp and GetRecvComp wait on them. Unlike
// librdmacm, which gives each such CQ a completion channel of its own,
// package cm has one channel per device for all of them, made with the
// first, and reads it itself: a QP then costs its CQs and itself, and
// nothing more. CQs the caller gives in attr are used as they are (and
// left to the caller), which is the cheapest: many QPs may share them;
// GetSendComp and GetRecvComp cannot wait on them (they fail with EINVAL
// when nothing is there to poll). The caps the device granted are in
// QP().Caps().
func (id *ID) CreateQP(pd *uverbs.PD, attr uverbs.QPInitAttr) error {
	return id.withFile(func(ucmaFile) error {
		if id.qp.Load() != nil {
			return errf("create QP", unix.EINVAL, "the ID already has a QP")
		}
		if id.dev == nil {
			return errf("create QP", unix.EINVAL, "the ID is not bound to a device (bind or resolve its address first)")
		}
		if pd == nil {
			pd = id.pd
		} else if pd.Context() != id.dev.ctx {
			return errf("create QP", unix.EINVAL, "PD of another device context than the ID's")
		}
		if attr.Type == 0 {
			attr.Type = id.qpType
		} else if attr.Type != id.qpType {
			return errf("create QP", unix.EINVAL, "QP type %d on an ID of type %d", attr.Type, id.qpType)
		}
		if attr.SRQ == nil {
			attr.SRQ = id.srq
		}
		if attr.Type == qp.XRCRecv {
			return id.createXRCRecvQP(pd, attr)
		}
		v := verbsState{hasSRQ: attr.SRQ != nil}
		fail := func(err error) error {
			id.verbs = v
			id.destroyCQs()
			return wrapErr("create QP", err)
		}
		var err error
		if v.ownSend, err = id.cqFor(&v, &attr.SendCQ, true, attr.Caps.MaxSendWR, &v.sendCQ, &v.sendWake); err != nil {
			return fail(err)
		}
		// A QP on an SRQ without receives of its own needs no receive CQ,
		// nor does an XRC send QP, which receives nothing.
		needRecv := (attr.SRQ == nil || attr.Caps.MaxRecvWR > 0) && attr.Type != qp.XRCSend
		if v.ownRecv, err = id.cqFor(&v, &attr.RecvCQ, needRecv, attr.Caps.MaxRecvWR, &v.recvCQ, &v.recvWake); err != nil {
			return fail(err)
		}
		if attr.Type == qp.XRCSend {
			attr.RecvCQ = nil
		}
		q, err := pd.CreateQP(attr)
		if err != nil {
			return fail(err)
		}
		if id.qpType == qp.UD {
			err = id.initUDQP(q)
		} else {
			err = id.initConnQP(q)
		}
		if err != nil {
			q.Close()
			return fail(err)
		}
		id.verbs = v
		id.pd = pd
		id.scratch.reset(attr.SRQ, attr.SingleThreaded)
		id.qp.Store(q)
		return nil
	})
}

// createXRCRecvQP is CreateQP for an XRC receive ID: the QP belongs to
// the device's XRC domain, opened on first use, and has no CQs; its
// messages land in the XRC SRQ CreateSRQ makes, whose CQ GetRecvComp
// waits on. The caller holds id.mu.
func (id *ID) createXRCRecvQP(pd *uverbs.PD, attr uverbs.QPInitAttr) error {
	xrcd, err := id.dev.getXRCD()
	if err != nil {
		return wrapErr("create QP", err)
	}
	q, err := xrcd.CreateRecvQP()
	if err != nil {
		return wrapErr("create QP", err)
	}
	if err := id.initConnQP(q); err != nil {
		q.Close()
		return wrapErr("create QP", err)
	}
	id.pd = pd
	id.scratch.reset(id.srq, attr.SingleThreaded)
	id.qp.Store(q)
	return nil
}

// initConnQP moves a new RC QP to INIT with the kernel's attributes
// (ucma_init_conn_qp).
// cqFor sets cq to the CQ *given names for a queue of wrs work requests,
// or, when that is nil and want, to one of its own (at least one entry)
// on the device's shared completion channel, as librdmacm's
// ucma_create_cqs, which *given then names too; wake is what wakes its
// waits. It returns whether it made the CQ; on failure it made none (the
// shared channel stays, for the device's next CQs).
func (id *ID) cqFor(v *verbsState, given **uverbs.CQ, want bool, wrs uint32, cq **uverbs.CQ, wake *chan struct{}) (bool, error) {
	if *given != nil || !want {
		*cq = *given
		return false, nil
	}
	if v.comp == nil {
		c, err := id.dev.compEvents()
		if err != nil {
			return false, err
		}
		v.comp = c
	}
	var err error
	if *cq, err = id.dev.ctx.CreateCQ(uverbs.CQAttr{CQE: int(max(wrs, 1)), Channel: v.comp.ch}); err != nil {
		*cq = nil
		return false, err
	}
	*wake = v.comp.add(*cq)
	*given = *cq
	return true, nil
}

// initConnQP moves a new RC QP to INIT with the kernel's attributes
// (ucma_init_conn_qp).
func (id *ID) initConnQP(q *uverbs.QP) error {
	a, mask, err := id.initQPAttr(qp.StateInit)
	if err != nil {
		return err
	}
	return q.Modify(a, mask)
}

// initUDQP moves a new UD QP to RTS: INIT with the kernel's attributes
// (port, P_Key index, Q_Key), then RTR and RTS with send PSN 0
// (ucma_init_ud_qp).
func (id *ID) initUDQP(q *uverbs.QP) error {
	if err := id.initConnQP(q); err != nil {
		return err
	}
	if err := q.Modify(qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
		return err
	}
	return q.Modify(qp.Attr{State: qp.StateRTS}, qp.AttrState|qp.AttrSQPSN)
}

// modifyQPRTR moves the ID's QP, if any, through INIT to RTR with the
// kernel's attributes, and respRes responder resources unless it is
// MaxRespRes (ucma_modify_qp_rtr). The caller holds id.mu.
func (id *ID) modifyQPRTR(respRes uint8) error {
	q := id.qp.Load()
	if q == nil {
		return nil
	}
	if err := id.modifyQPKern(q, qp.StateInit, keepDepth); err != nil {
		return err
	}
	return id.modifyQPKern(q, qp.StateRTR, respRes)
}

// modifyQPRTS moves the ID's QP, if any, to RTS with the kernel's
// attributes, and initDepth outstanding reads unless it is MaxInitDepth
// (ucma_modify_qp_rts). The caller holds id.mu.
func (id *ID) modifyQPRTS(initDepth uint8) error {
	q := id.qp.Load()
	if q == nil {
		return nil
	}
	return id.modifyQPKern(q, qp.StateRTS, initDepth)
}

// keepDepth is modifyQPKern's depth that keeps the kernel's: MaxRespRes
// and MaxInitDepth, the values that ask for the device's maximum.
const keepDepth = MaxRespRes

// modifyQPKern moves q to state with the attributes the kernel gives for
// it (InitQPAttr). A depth other than keepDepth replaces the kernel's read
// depth of that state: the responder resources for RTR, the outstanding
// reads for RTS. (A value, where a function adjusting the attributes made
// them escape to the heap, one allocation per move.) The caller holds
// id.mu.
func (id *ID) modifyQPKern(q *uverbs.QP, state qp.State, depth uint8) error {
	a, mask, err := id.initQPAttr(state)
	if err != nil {
		return err
	}
	if depth != keepDepth {
		switch state {
		case qp.StateRTR:
			a.MaxDestRdAtomic = depth
		case qp.StateRTS:
			a.MaxRdAtomic = depth
		}
	}
	return q.Modify(a, mask)
}

// modifyQPErr moves the ID's QP, if any, to the error state. The caller
// holds id.mu.
func (id *ID) modifyQPErr() error { return id.modifyQPState(qp.StateErr) }

func (id *ID) modifyQPState(s qp.State) error {
	q := id.qp.Load()
	if q == nil || q.State() == s || q.State() == qp.StateReset {
		return nil
	}
	return q.Modify(qp.Attr{State: s}, qp.AttrState)
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp), and the CQs and
// completion channels CreateQP made for it. Outstanding work requests are
// flushed first (uverbs.QP.Close), but their completions go with the CQs.
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return ErrClosed
	}
	return id.destroyVerbsLocked()
}

// destroyVerbsLocked destroys the QP once no post is using it, then the
// CQs and channels CreateQP made. The caller holds id.mu.
func (id *ID) destroyVerbsLocked() error {
	id.stopPeerTimer()
	q := id.qp.Swap(nil)
	id.waitPosts()
	var err error
	if q != nil {
		err = q.Close()
	}
	if e := id.destroyVerbs(); err == nil {
		err = e
	}
	return err
}

// waitPosts waits for a post in progress, which holds the QP, and clears
// the scratch's references to caller memory.
func (id *ID) waitPosts() {
	id.scratch.reset(nil, false)
}

// destroyVerbs destroys the QP, then the CQs and completion channels
// CreateQP made: a QP before its CQs.
func (r *idRes) destroyVerbs() error {
	var err error
	if q := r.qp.Swap(nil); q != nil {
		err = q.Close()
	}
	if e := r.destroyCQs(); err == nil {
		err = e
	}
	return err
}

func (r *idRes) destroyCQs() error {
	v := &r.verbs
	var errs []error
	keepRecv := v.hasXRCSRQ && r.srq != nil // the XRC SRQ's CQ stays with it, as in librdmacm
	if v.ownRecv && !keepRecv && v.recvCQ != nil {
		v.comp.remove(v.recvCQ)
		errs = append(errs, v.recvCQ.Close())
	}
	if v.ownSend && v.sendCQ != nil {
		v.comp.remove(v.sendCQ)
		errs = append(errs, v.sendCQ.Close())
	}
	if keepRecv {
		r.verbs = verbsState{recvCQ: v.recvCQ, comp: v.comp, recvWake: v.recvWake, ownRecv: true, hasXRCSRQ: true}
	} else {
		r.verbs = verbsState{}
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// QP returns the ID's queue pair, or nil.
func (id *ID) QP() *uverbs.QP { return id.qp.Load() }

// SendCQ returns the CQ of the ID's QP's sends, RecvCQ that of its
// receives: those CreateQP made, or those the program gave it.
func (id *ID) SendCQ() *uverbs.CQ {
	return locked(id, func(id *ID) *uverbs.CQ { return id.verbs.sendCQ })
}

// RecvCQ returns the CQ of the ID's QP's receives.
func (id *ID) RecvCQ() *uverbs.CQ {
	return locked(id, func(id *ID) *uverbs.CQ { return id.verbs.recvCQ })
}

// SendCompChannel returns nil.
//
// Deprecated: the CQs CreateQP makes report to a completion channel
// package cm shares among all of them and reads itself; a program that
// read it would take other IDs' events. Wait with GetSendComp, or give
// CreateQP CQs on a channel of the program's own.
func (id *ID) SendCompChannel() *uverbs.CompChannel { return nil }

// RecvCompChannel returns nil.
//
// Deprecated: as SendCompChannel; wait with GetRecvComp.
func (id *ID) RecvCompChannel() *uverbs.CompChannel { return nil }

// CreateSRQ creates a shared receive queue for the ID's QP
// (rdma_create_srq): CreateQP then receives through it, and PostRecv posts
// to it. pd nil means the ID's PD. Close destroys it.
//
// On an XRC receive ID (qp.XRCRecv) it is an XRC SRQ of the device's XRC
// domain, before or after the QP: PostRecv posts to it, and its
// completions go to a receive CQ made with it (with its own completion
// channel), which GetRecvComp waits on. Its number (SRQ().Num()) is what
// the peer's sends must name; rdma_xserver sends it in Accept's private
// data.
func (id *ID) CreateSRQ(pd *uverbs.PD, attr uverbs.SRQAttr) error {
	return id.withFile(func(ucmaFile) error {
		if id.srq != nil {
			return errf("create SRQ", unix.EINVAL, "the ID already has an SRQ")
		}
		if pd == nil {
			pd = id.pd
		}
		if pd == nil {
			return errf("create SRQ", unix.EINVAL, "the ID is not bound to a device")
		}
		if id.qpType == qp.XRCRecv {
			return id.createXRCSRQ(pd, attr)
		}
		s, err := pd.CreateSRQ(attr)
		if err != nil {
			return wrapErr("create SRQ", err)
		}
		id.srq = s
		return nil
	})
}

// createXRCSRQ is CreateSRQ on an XRC receive ID (rdma_create_srq_ex
// with IBV_SRQT_XRC), making the receive CQ as librdmacm does. The caller
// holds id.mu.
func (id *ID) createXRCSRQ(pd *uverbs.PD, attr uverbs.SRQAttr) error {
	xrcd, err := id.dev.getXRCD()
	if err != nil {
		return wrapErr("create SRQ", err)
	}
	v := &id.verbs
	made := false
	if v.recvCQ == nil {
		var given *uverbs.CQ
		made, err = id.cqFor(v, &given, true, attr.MaxWR, &v.recvCQ, &v.recvWake)
		v.ownRecv = made
		if err != nil {
			id.destroyCQs()
			return wrapErr("create SRQ", err)
		}
	}
	s, err := pd.CreateXRCSRQ(xrcd, v.recvCQ, attr)
	if err != nil {
		if made {
			id.destroyCQs()
		}
		return wrapErr("create SRQ", err)
	}
	id.srq = s
	v.hasXRCSRQ = made
	if id.qp.Load() != nil {
		// The QP came first (rdma_xserver's order): its receives now
		// go to the SRQ.
		id.scratch.reset(s, id.scratch.recvMu.off.Load())
	}
	return nil
}

// DestroySRQ destroys the SRQ CreateSRQ made (rdma_destroy_srq).
func (id *ID) DestroySRQ() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return ErrClosed
	}
	if id.srq == nil {
		return nil
	}
	err := id.srq.Close()
	id.srq = nil
	if id.verbs.hasXRCSRQ && id.qp.Load() == nil {
		// The XRC SRQ's receive CQ outlived the QP for it: it goes now.
		if e := id.destroyCQs(); err == nil {
			err = e
		}
	}
	return err
}

// SRQ returns the SRQ CreateSRQ made, or nil.
func (id *ID) SRQ() *uverbs.SRQ {
	return locked(id, func(id *ID) *uverbs.SRQ { return id.srq })
}

// CreateAH creates an address handle on the ID's PD for UD sends to the
// peer a UD event names (its UDParam.AHAttr): the ESTABLISHED event of a
// UD Connect, or a MULTICAST_JOIN. A CONNECT_REQUEST on a UD listener
// names no peer: the kernel fills only its private data (the client's QP
// number is not known before its first datagram either), and CreateAH of
// its empty address fails with EINVAL. A UD server answers a client from
// a datagram it received, as udaddy's does with ibv_create_ah_from_wc:
// id.PD().CreateAHFromWC(&wc, buf[:uverbs.GRHSize], id.PortNum()) and
// the client's QP number wc.SrcQP. The caller closes the handle.
func (id *ID) CreateAH(attr qp.AHAttr) (*uverbs.AH, error) {
	pd, err := id.livePD()
	if err != nil {
		return nil, err
	}
	if pd == nil {
		return nil, errf("create AH", unix.EINVAL, "the ID is not bound to a device")
	}
	ah, err := pd.CreateAH(attr)
	if err != nil {
		return nil, wrapErr("create AH", err)
	}
	return ah, nil
}

// InitQPAttr asks the kernel for the attributes that move a QP of this ID
// to state (rdma_init_qp_attr), for a QP the program manages itself.
func (id *ID) InitQPAttr(state qp.State) (qp.Attr, qp.AttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.initQPAttr(state)
}

func (id *ID) initQPAttr(state qp.State) (qp.Attr, qp.AttrMask, error) {
	f, err := id.file()
	if err != nil {
		return qp.Attr{}, 0, err
	}
	c := newCall[abi.RdmaUcmInitQpAttr, abi.IbUverbsQpAttr](abi.RDMA_USER_CM_CMD_INIT_QP_ATTR)
	resp := &c.resp
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	c.body.Qp_state = uint32(state)
	if err := exec(f, &c.ucmaCmd); err != nil {
		return qp.Attr{}, 0, wrapErr(fmt.Sprintf("init QP attr %v", state), err)
	}
	a, mask := qpabi.DecodeUverbsAttr(resp)
	return a, mask &^ qpabi.MaskReserved, nil
}
