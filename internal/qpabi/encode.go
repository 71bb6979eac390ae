package qpabi

import (
	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// EncodeModify builds the request of IB_USER_VERBS_EX_CMD_MODIFY_QP for the
// QP with handle, as rdma-core's copy_modify_qp_fields (libibverbs/cmd.c,
// v44.0) does: the mask goes through unchanged and only the fields it names
// are copied; the others stay zero. The legacy IB_USER_VERBS_CMD_MODIFY_QP
// takes the Base part alone, and cannot carry AttrRateLimit (rdma-core
// refuses it there with EOPNOTSUPP).
func EncodeModify(handle uint32, a *qp.Attr, mask qp.AttrMask) abi.IbUverbsExModifyQp {
	cmd := new(abi.IbUverbsExModifyQp)
	EncodeModifyTo(cmd, handle, a, mask)
	return *cmd
}

// EncodeModifyTo is EncodeModify into cmd, which it overwrites: a caller
// that sends the command from the heap builds it there, where a returned
// copy would cost a second allocation (the field copiers take its address
// through a function value, so even a local one escapes).
func EncodeModifyTo(cmd *abi.IbUverbsExModifyQp, handle uint32, a *qp.Attr, mask qp.AttrMask) {
	*cmd = abi.IbUverbsExModifyQp{}
	cmd.Base.Qp_handle = handle
	cmd.Base.Attr_mask = uint32(mask)
	for _, f := range modifyFields {
		if mask&f.bit != 0 {
			f.copy(cmd, a)
		}
	}
}

// modifyFields says which fields of the modify command each mask bit
// names, and how each is copied from the attributes.
var modifyFields = []struct {
	bit  qp.AttrMask
	copy func(c *abi.IbUverbsExModifyQp, a *qp.Attr)
}{
	{qp.AttrState, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Qp_state = uint8(a.State) }},
	{qp.AttrCurState, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Cur_qp_state = uint8(a.CurState) }},
	{qp.AttrEnSQDAsyncNotify, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.En_sqd_async_notify = b2u(a.EnSQDAsyncNotify) }},
	{qp.AttrAccessFlags, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Qp_access_flags = uint32(a.QPAccessFlags) }},
	{qp.AttrPKeyIndex, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Pkey_index = a.PKeyIndex }},
	{qp.AttrPort, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Port_num = a.PortNum }},
	{qp.AttrQKey, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Qkey = a.QKey }},
	{qp.AttrAV, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Dest = encodeDest(&a.AHAttr) }},
	{qp.AttrPathMTU, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Path_mtu = uint8(a.PathMTU) }},
	{qp.AttrTimeout, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Timeout = a.Timeout }},
	{qp.AttrRetryCnt, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Retry_cnt = a.RetryCnt }},
	{qp.AttrRNRRetry, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Rnr_retry = a.RNRRetry }},
	{qp.AttrRQPSN, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Rq_psn = a.RQPSN }},
	{qp.AttrMaxQPRdAtomic, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Max_rd_atomic = a.MaxRdAtomic }},
	{qp.AttrAltPath, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) {
		c.Base.Alt_pkey_index = a.AltPKeyIndex
		c.Base.Alt_port_num = a.AltPortNum
		c.Base.Alt_timeout = a.AltTimeout
		c.Base.Alt_dest = encodeDest(&a.AltAHAttr)
	}},
	{qp.AttrMinRNRTimer, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Min_rnr_timer = a.MinRNRTimer }},
	{qp.AttrSQPSN, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Sq_psn = a.SQPSN }},
	{qp.AttrMaxDestRdAtomic, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Max_dest_rd_atomic = a.MaxDestRdAtomic }},
	{qp.AttrPathMigState, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Path_mig_state = uint8(a.PathMigState) }},
	{qp.AttrDestQPN, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Base.Dest_qp_num = a.DestQPNum }},
	{qp.AttrRateLimit, func(c *abi.IbUverbsExModifyQp, a *qp.Attr) { c.Rate_limit = a.RateLimit }},
}

func encodeDest(ah *qp.AHAttr) abi.IbUverbsQpDest {
	return abi.IbUverbsQpDest{
		Dgid:          [16]byte(ah.DGID),
		Flow_label:    ah.FlowLabel,
		Dlid:          ah.DLID,
		Sgid_index:    ah.SGIDIndex,
		Hop_limit:     ah.HopLimit,
		Traffic_class: ah.TrafficClass,
		Sl:            ah.SL,
		Src_path_bits: ah.SrcPathBits,
		Static_rate:   ah.StaticRate,
		Is_global:     b2u(ah.IsGlobal),
		Port_num:      ah.PortNum,
	}
}

func decodeDest(d *abi.IbUverbsQpDest) qp.AHAttr {
	return qp.AHAttr{
		DLID:         d.Dlid,
		SL:           d.Sl,
		SrcPathBits:  d.Src_path_bits,
		StaticRate:   d.Static_rate,
		IsGlobal:     d.Is_global != 0,
		PortNum:      d.Port_num,
		DGID:         qp.GID(d.Dgid),
		FlowLabel:    d.Flow_label,
		SGIDIndex:    d.Sgid_index,
		HopLimit:     d.Hop_limit,
		TrafficClass: d.Traffic_class,
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// EncodeQuery builds the request of IB_USER_VERBS_CMD_QUERY_QP. Its
// Response field, the legacy write() path's response address, is left zero:
// through UVERBS_METHOD_INVOKE_WRITE the response buffer is the
// UVERBS_ATTR_CORE_OUT attribute. The kernel has no extended query, so
// AttrRateLimit cannot be asked for (rdma-core refuses it with EOPNOTSUPP);
// drivers mostly ignore the mask and report everything.
func EncodeQuery(handle uint32, mask qp.AttrMask) abi.IbUverbsQueryQp {
	return abi.IbUverbsQueryQp{Qp_handle: handle, Attr_mask: uint32(mask)}
}

// DecodeQuery reads the kernel's answer to a query as rdma-core's
// ibv_cmd_query_qp (libibverbs/cmd.c, v44.0) does. The response carries no
// EnSQDAsyncNotify and no RateLimit; those stay zero. The capabilities come
// back both in Attr.Cap and InitAttr.Cap.
func DecodeQuery(resp *abi.IbUverbsQueryQpResp) (qp.Attr, qp.InitAttr) {
	caps := qp.InitAttr{SQSigAll: resp.Sq_sig_all != 0}
	caps.Caps.MaxSendWR = resp.Max_send_wr
	caps.Caps.MaxRecvWR = resp.Max_recv_wr
	caps.Caps.MaxSendSGE = resp.Max_send_sge
	caps.Caps.MaxRecvSGE = resp.Max_recv_sge
	caps.Caps.MaxInlineData = resp.Max_inline_data
	a := qp.Attr{
		State:           qp.State(resp.Qp_state),
		CurState:        qp.State(resp.Cur_qp_state),
		PathMTU:         qp.MTU(resp.Path_mtu),
		PathMigState:    qp.MigState(resp.Path_mig_state),
		QKey:            resp.Qkey,
		RQPSN:           resp.Rq_psn,
		SQPSN:           resp.Sq_psn,
		DestQPNum:       resp.Dest_qp_num,
		QPAccessFlags:   wr.Access(resp.Qp_access_flags),
		Caps:            caps.Caps,
		AHAttr:          decodeDest(&resp.Dest),
		AltAHAttr:       decodeDest(&resp.Alt_dest),
		PKeyIndex:       resp.Pkey_index,
		AltPKeyIndex:    resp.Alt_pkey_index,
		SQDraining:      resp.Sq_draining != 0,
		MaxRdAtomic:     resp.Max_rd_atomic,
		MaxDestRdAtomic: resp.Max_dest_rd_atomic,
		MinRNRTimer:     resp.Min_rnr_timer,
		PortNum:         resp.Port_num,
		Timeout:         resp.Timeout,
		RetryCnt:        resp.Retry_cnt,
		RNRRetry:        resp.Rnr_retry,
		AltPortNum:      resp.Alt_port_num,
		AltTimeout:      resp.Alt_timeout,
	}
	return a, caps
}
