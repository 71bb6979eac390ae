package qpabi

import (
	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// DecodeUverbsAttr reads a struct ib_uverbs_qp_attr, the answer of rdma_cm's
// RDMA_USER_CM_CMD_INIT_QP_ATTR, as rdma-core's ibv_copy_qp_attr_from_kern
// (libibverbs/marshall.c, v44.0) does, and returns the attributes with the
// mask the kernel set. Every field is copied whatever the mask says; a
// modify reads only those the mask names.
func DecodeUverbsAttr(r *abi.IbUverbsQpAttr) (qp.Attr, qp.AttrMask) {
	a := qp.Attr{
		State:        qp.State(r.Qp_state),
		CurState:     qp.State(r.Cur_qp_state),
		PathMTU:      qp.MTU(r.Path_mtu),
		PathMigState: qp.MigState(r.Path_mig_state),
		QKey:         r.Qkey,
		RQPSN:        r.Rq_psn,
		SQPSN:        r.Sq_psn,
		DestQPNum:    r.Dest_qp_num,
		// The kernel's access flags are the ibv_access_flags bits.
		QPAccessFlags: wr.Access(r.Qp_access_flags),
		Caps: qp.Caps{MaxSendWR: r.Max_send_wr, MaxRecvWR: r.Max_recv_wr,
			MaxSendSGE: r.Max_send_sge, MaxRecvSGE: r.Max_recv_sge, MaxInlineData: r.Max_inline_data},
		AHAttr:           DecodeAHAttr(&r.Ah_attr),
		AltAHAttr:        DecodeAHAttr(&r.Alt_ah_attr),
		PKeyIndex:        r.Pkey_index,
		AltPKeyIndex:     r.Alt_pkey_index,
		EnSQDAsyncNotify: r.En_sqd_async_notify != 0,
		SQDraining:       r.Sq_draining != 0,
		MaxRdAtomic:      r.Max_rd_atomic,
		MaxDestRdAtomic:  r.Max_dest_rd_atomic,
		MinRNRTimer:      r.Min_rnr_timer,
		PortNum:          r.Port_num,
		Timeout:          r.Timeout,
		RetryCnt:         r.Retry_cnt,
		RNRRetry:         r.Rnr_retry,
		AltPortNum:       r.Alt_port_num,
		AltTimeout:       r.Alt_timeout,
	}
	return a, qp.AttrMask(r.Qp_attr_mask)
}

// DecodeAHAttr reads a struct ib_uverbs_ah_attr (in rdma_cm's UD event
// parameters and in ib_uverbs_qp_attr) as ibv_copy_ah_attr_from_kern does.
// The GRH fields are copied whether or not IsGlobal is set.
func DecodeAHAttr(k *abi.IbUverbsAhAttr) qp.AHAttr {
	return qp.AHAttr{
		DGID:         qp.GID(k.Grh.Dgid),
		FlowLabel:    k.Grh.Flow_label,
		SGIDIndex:    k.Grh.Sgid_index,
		HopLimit:     k.Grh.Hop_limit,
		TrafficClass: k.Grh.Traffic_class,
		DLID:         k.Dlid,
		SL:           k.Sl,
		SrcPathBits:  k.Src_path_bits,
		StaticRate:   k.Static_rate,
		IsGlobal:     k.Is_global != 0,
		PortNum:      k.Port_num,
	}
}

// EncodeAHAttr is the inverse of DecodeAHAttr.
func EncodeAHAttr(a *qp.AHAttr) abi.IbUverbsAhAttr {
	var k abi.IbUverbsAhAttr
	k.Grh.Dgid = [16]byte(a.DGID)
	k.Grh.Flow_label = a.FlowLabel
	k.Grh.Sgid_index = a.SGIDIndex
	k.Grh.Hop_limit = a.HopLimit
	k.Grh.Traffic_class = a.TrafficClass
	k.Dlid = a.DLID
	k.Sl = a.SL
	k.Src_path_bits = a.SrcPathBits
	k.Static_rate = a.StaticRate
	k.Is_global = b2u(a.IsGlobal)
	k.Port_num = a.PortNum
	return k
}

// MaskReserved are the attribute mask bits 21 to 24, which the kernel keeps
// for itself. Old kernels' rdma_cm set some of them in INIT_QP_ATTR answers
// on RoCE; librdmacm clears them before modifying, and so should callers of
// DecodeUverbsAttr (Validate refuses them).
const MaskReserved qp.AttrMask = 0xf << 21
