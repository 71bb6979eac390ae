package uverbs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/seal"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// SRQAttr sizes a shared receive queue (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  uint32
	MaxSGE uint32
	// Limit arms the limit event: when fewer than Limit receives remain,
	// the SRQ raises an SRQLimitReached event and disarms. 0 leaves it off.
	Limit uint32
}

// SRQ is a shared receive queue (struct ibv_srq): one pool of receive
// requests serving several queue pairs.
type SRQ struct {
	*object
	pd   *PD
	prov provider.SRQ
	attr SRQAttr
	// xrcd is the domain of an XRC SRQ (CreateXRCSRQ), num its number;
	// nil for a basic SRQ.
	xrcd *XRCD
	num  uint32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	if err := pd.pdObject().use(); err != nil {
		return nil, &Error{Op: "create SRQ", Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	return pd.createSRQ("create SRQ", attr, nil, nil)
}

// createSRQ creates a basic SRQ, or with xrcd an XRC SRQ of that domain
// whose completions go to cq. The caller holds pd, xrcd and cq.
func (pd *PD) createSRQ(op string, attr SRQAttr, xrcd *XRCD, cq *CQ) (*SRQ, error) {
	c := pd.ctx
	if attr.MaxWR == 0 || attr.MaxSGE == 0 {
		return nil, &Error{Op: op, Err: fmt.Errorf("max_wr and max_sge must be positive: %w", unix.EINVAL)}
	}
	pc, err := c.providerContext(op)
	if err != nil {
		return nil, err
	}
	b, err := pc.NewSRQ(provider.SRQInitAttr{MaxWR: attr.MaxWR, MaxSGE: attr.MaxSGE, Limit: attr.Limit, XRC: xrcd != nil})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	s := &SRQ{pd: pd, xrcd: xrcd}
	id := c.nextID.Add(1)
	resp := new(struct{ maxWR, maxSGE, num uint32 })
	cmd := newCommand(abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_CREATE)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	h := cmd.idrNew(abi.UVERBS_ATTR_CREATE_SRQ_HANDLE)
	cmd.idrIn(abi.UVERBS_ATTR_CREATE_SRQ_PD_HANDLE, pd.handle)
	cmd.constIn(abi.UVERBS_ATTR_CREATE_SRQ_USER_HANDLE, id)
	cmd.u32In(abi.UVERBS_ATTR_CREATE_SRQ_MAX_WR, uint32(attr.MaxWR))
	cmd.u32In(abi.UVERBS_ATTR_CREATE_SRQ_MAX_SGE, uint32(attr.MaxSGE))
	cmd.u32In(abi.UVERBS_ATTR_CREATE_SRQ_LIMIT, uint32(attr.Limit))
	deps := []any{pd}
	if xrcd != nil {
		cmd.constIn(abi.UVERBS_ATTR_CREATE_SRQ_TYPE, abi.IB_UVERBS_SRQT_XRC)
		cmd.idrIn(abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE, xrcd.handle)
		cmd.idrIn(abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE, cq.handle)
		cmd.ptrOut(abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM, unsafe.Pointer(&resp.num), 4)
		deps = append(deps, xrcd, cq)
	} else {
		cmd.constIn(abi.UVERBS_ATTR_CREATE_SRQ_TYPE, abi.IB_UVERBS_SRQT_BASIC)
	}
	if c.asyncFD >= 0 {
		cmd.fdIn(abi.UVERBS_ATTR_CREATE_SRQ_EVENT_FD, c.asyncFD)
	}
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, unsafe.Pointer(&resp.maxWR), 4)
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, unsafe.Pointer(&resp.maxSGE), 4)
	if s.object, err = c.createObject(cmd, h, b, kindSRQ, id, op, deps...); err != nil {
		return nil, err
	}
	s.attr = SRQAttr{MaxWR: resp.maxWR, MaxSGE: resp.maxSGE, Limit: attr.Limit}
	s.num = resp.num
	if err := finishCreate(&s.prov, s.object, b, provider.Created{Handle: s.handle, SRQNum: resp.num,
		Caps: qp.Caps{MaxRecvWR: resp.maxWR, MaxRecvSGE: resp.maxSGE}}, op, false); err != nil {
		return nil, err
	}
	if err := registered(registerSRQ(c, s), s.object, op); err != nil {
		return nil, err
	}
	return s, nil
}

// Attr returns the sizes the device granted and the limit last set.
func (s *SRQ) Attr() SRQAttr { return s.attr }

// PostRecv posts receive requests to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs []wr.RecvWR) (int, error) {
	if s == nil {
		return 0, errNil
	}
	s.rw.RLock()
	defer s.rw.RUnlock()
	if s.dead.Load() {
		return 0, ErrClosed
	}
	n, err := s.prov.PostRecv(wrs)
	if err != nil {
		return n, &PostError{Op: "post SRQ recv", Index: n, Err: err}
	}
	return n, nil
}

// SRQAttrMask says which SRQAttr fields a Modify sets (enum
// ibv_srq_attr_mask).
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // resize
	SRQLimit SRQAttrMask = 1 << 1 // arm the limit event
)

// Modify resizes the SRQ or arms its limit event (ibv_modify_srq).
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	if s == nil {
		return errNil
	}
	s.rw.Lock()
	defer s.rw.Unlock()
	if s.dead.Load() {
		return ErrClosed
	}
	req := &abi.IbUverbsModifySrq{Srq_handle: s.handle, Attr_mask: uint32(mask), Max_wr: attr.MaxWR, Srq_limit: attr.Limit}
	var in []byte
	m, hasModifier := s.prov.(provider.SRQModifier)
	if hasModifier {
		in = m.ModifyUdata()
	}
	if err := s.ctx.invokeWriteUdata(abi.IB_USER_VERBS_CMD_MODIFY_SRQ, s.ctx.quick, unsafe.Pointer(req), int(unsafe.Sizeof(*req)),
		nil, 0, in, nil, "modify SRQ"); err != nil {
		return err
	}
	if mask&SRQLimit != 0 {
		s.attr.Limit = attr.Limit
	}
	if mask&SRQMaxWR != 0 {
		s.attr.MaxWR = attr.MaxWR
		if hasModifier {
			if err := m.Resized(); err != nil {
				return wrapErr("modify SRQ", err)
			}
		}
	}
	return nil
}

// Query returns the SRQ's current attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	if s == nil {
		return SRQAttr{}, errNil
	}
	if err := s.use(); err != nil {
		return SRQAttr{}, err
	}
	defer s.done()
	resp, err := writeCmd[abi.IbUverbsQuerySrqResp](s.ctx, abi.IB_USER_VERBS_CMD_QUERY_SRQ, &abi.IbUverbsQuerySrq{Srq_handle: s.handle}, "query SRQ")
	if err != nil {
		return SRQAttr{}, err
	}
	return SRQAttr{MaxWR: resp.Max_wr, MaxSGE: resp.Max_sge, Limit: resp.Srq_limit}, nil
}

// Close destroys the SRQ (ibv_destroy_srq). QPs using it must be closed first.
func (s *SRQ) Close() error {
	if s == nil {
		return errNil
	}
	return s.close()
}

// AH is an address handle (struct ibv_ah): the destination of UD sends.
// It implements wr.AddressHandle.
type AH struct {
	*object
	pd   *PD
	prov provider.AH
	dest wr.AH // prov, as UD sends carry it (Dest)
	attr qp.AHAttr
}

// CreateAH creates an address handle (ibv_create_ah). For RoCE, set
// IsGlobal with the destination GID and the local SGID index.
func (pd *PD) CreateAH(attr qp.AHAttr) (*AH, error) {
	if err := pd.pdObject().use(); err != nil {
		return nil, &Error{Op: "create AH", Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	c := pd.ctx
	pc, err := c.providerContext("create AH")
	if err != nil {
		return nil, err
	}
	b, err := pc.NewAH(attr)
	if err != nil {
		return nil, wrapErr("create AH", err)
	}
	in, out := b.Udata()
	req := &abi.IbUverbsCreateAh{Pd_handle: pd.handle}
	a := &req.Attr
	a.Dlid, a.Sl, a.Src_path_bits, a.Static_rate, a.Port_num = attr.DLID, attr.SL, attr.SrcPathBits, attr.StaticRate, attr.PortNum
	if attr.IsGlobal {
		a.Is_global = 1
		a.Grh.Dgid = attr.DGID
		a.Grh.Flow_label = attr.FlowLabel
		a.Grh.Sgid_index = attr.SGIDIndex
		a.Grh.Hop_limit = attr.HopLimit
		a.Grh.Traffic_class = attr.TrafficClass
	}
	resp := new(abi.IbUverbsCreateAhResp)
	if err := c.invokeWriteUdata(abi.IB_USER_VERBS_CMD_CREATE_AH, c.quick, unsafe.Pointer(req), int(unsafe.Sizeof(*req)),
		unsafe.Pointer(resp), int(unsafe.Sizeof(*resp)), in, out, "create AH"); err != nil {
		b.Abort()
		return nil, err
	}
	ah := &AH{object: newObject(c, kindAH, resp.Ah_handle, pd), pd: pd, attr: attr}
	p, err := b.Finish(provider.Created{Handle: ah.handle})
	if err != nil {
		ah.object.close()
		return nil, wrapErr("create AH", err)
	}
	ah.prov, ah.dest = p, seal.NewAH[wr.AH](p)
	track(ah, ah.object)
	return ah, nil
}

// Dest returns where the handle sends, as a UD send's wr.SendWR.AH
// carries it (wr.AddressHandle); the zero wr.AH, which names nothing and
// which providers refuse, for a nil or closed AH.
func (ah *AH) Dest() wr.AH {
	if ah == nil || ah.prov == nil || ah.dead.Load() {
		return wr.AH{}
	}
	return ah.dest
}

// Close destroys the address handle (ibv_destroy_ah). It waits for UD
// posts on the AH's PD in progress, so no send is posted with the handle
// after Close returns.
func (ah *AH) Close() error {
	if ah == nil {
		return errNil
	}
	ah.pd.ahMu.Lock()
	defer ah.pd.ahMu.Unlock()
	return ah.close()
}
