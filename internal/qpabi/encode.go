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
	// One test per mask bit, written out: a table of copy functions made
	// a and cmd escape to the heap through the indirect calls, an
	// allocation in every caller that builds a on its stack.
	*cmd = abi.IbUverbsExModifyQp{}
	cmd.Base.Qp_handle = handle
	cmd.Base.Attr_mask = uint32(mask)
	if mask&qp.AttrState != 0 {
		cmd.Base.Qp_state = uint8(a.State)
	}
	if mask&qp.AttrCurState != 0 {
		cmd.Base.Cur_qp_state = uint8(a.CurState)
	}
	if mask&qp.AttrEnSQDAsyncNotify != 0 {
		cmd.Base.En_sqd_async_notify = b2u(a.EnSQDAsyncNotify)
	}
	if mask&qp.AttrAccessFlags != 0 {
		cmd.Base.Qp_access_flags = uint32(a.QPAccessFlags)
	}
	if mask&qp.AttrPKeyIndex != 0 {
		cmd.Base.Pkey_index = a.PKeyIndex
	}
	if mask&qp.AttrPort != 0 {
		cmd.Base.Port_num = a.PortNum
	}
	if mask&qp.AttrQKey != 0 {
		cmd.Base.Qkey = a.QKey
	}
	if mask&qp.AttrAV != 0 {
		cmd.Base.Dest = encodeDest(&a.AHAttr)
	}
	if mask&qp.AttrPathMTU != 0 {
		cmd.Base.Path_mtu = uint8(a.PathMTU)
	}
	if mask&qp.AttrTimeout != 0 {
		cmd.Base.Timeout = a.Timeout
	}
	if mask&qp.AttrRetryCnt != 0 {
		cmd.Base.Retry_cnt = a.RetryCnt
	}
	if mask&qp.AttrRNRRetry != 0 {
		cmd.Base.Rnr_retry = a.RNRRetry
	}
	if mask&qp.AttrRQPSN != 0 {
		cmd.Base.Rq_psn = a.RQPSN
	}
	if mask&qp.AttrMaxQPRdAtomic != 0 {
		cmd.Base.Max_rd_atomic = a.MaxRdAtomic
	}
	if mask&qp.AttrAltPath != 0 {
		cmd.Base.Alt_pkey_index = a.AltPKeyIndex
		cmd.Base.Alt_port_num = a.AltPortNum
		cmd.Base.Alt_timeout = a.AltTimeout
		cmd.Base.Alt_dest = encodeDest(&a.AltAHAttr)
	}
	if mask&qp.AttrMinRNRTimer != 0 {
		cmd.Base.Min_rnr_timer = a.MinRNRTimer
	}
	if mask&qp.AttrSQPSN != 0 {
		cmd.Base.Sq_psn = a.SQPSN
	}
	if mask&qp.AttrMaxDestRdAtomic != 0 {
		cmd.Base.Max_dest_rd_atomic = a.MaxDestRdAtomic
	}
	if mask&qp.AttrPathMigState != 0 {
		cmd.Base.Path_mig_state = uint8(a.PathMigState)
	}
	if mask&qp.AttrDestQPN != 0 {
		cmd.Base.Dest_qp_num = a.DestQPNum
	}
	if mask&qp.AttrRateLimit != 0 {
		cmd.Rate_limit = a.RateLimit
	}
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
