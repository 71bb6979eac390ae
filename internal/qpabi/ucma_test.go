package qpabi

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

func TestDecodeUverbsAttr(t *testing.T) {
	var r abi.IbUverbsQpAttr
	r.Qp_attr_mask = uint32(qp.AttrState | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrSQPSN | qp.AttrMaxQPRdAtomic)
	r.Qp_state = uint32(qp.StateRTS)
	r.Cur_qp_state = uint32(qp.StateRTR)
	r.Path_mtu = 3
	r.Qkey = 0x01234567
	r.Rq_psn, r.Sq_psn, r.Dest_qp_num = 1, 2, 3
	r.Qp_access_flags = uint32(wr.RemoteWrite | wr.RemoteRead)
	r.Ah_attr = abi.IbUverbsAhAttr{Dlid: 5, Sl: 1, Is_global: 1, Port_num: 1}
	r.Ah_attr.Grh = abi.IbUverbsGlobalRoute{Flow_label: 9, Sgid_index: 1, Hop_limit: 64, Traffic_class: 2}
	r.Ah_attr.Grh.Dgid[15] = 7
	r.Max_send_wr, r.Max_recv_wr, r.Max_send_sge, r.Max_recv_sge, r.Max_inline_data = 10, 11, 12, 13, 14
	r.Pkey_index, r.Alt_pkey_index = 1, 2
	r.Max_rd_atomic, r.Max_dest_rd_atomic, r.Min_rnr_timer = 4, 5, 12
	r.Port_num, r.Timeout, r.Retry_cnt, r.Rnr_retry = 1, 14, 7, 6
	a, mask := DecodeUverbsAttr(&r)
	want := qp.Attr{
		State: qp.StateRTS, CurState: qp.StateRTR, PathMTU: 3, QKey: 0x01234567, RQPSN: 1, SQPSN: 2, DestQPNum: 3,
		QPAccessFlags: wr.RemoteWrite | wr.RemoteRead,
		Caps:          a.Caps,
		AHAttr: qp.AHAttr{DLID: 5, SL: 1, IsGlobal: true, PortNum: 1, DGID: [16]byte{15: 7}, FlowLabel: 9,
			SGIDIndex: 1, HopLimit: 64, TrafficClass: 2},
		PKeyIndex: 1, AltPKeyIndex: 2, MaxRdAtomic: 4, MaxDestRdAtomic: 5, MinRNRTimer: 12,
		PortNum: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 6,
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if a.Caps.MaxSendWR != 10 || a.Caps.MaxInlineData != 14 {
		t.Errorf("caps %+v", a.Caps)
	}
	if mask != qp.AttrMask(r.Qp_attr_mask) {
		t.Errorf("mask %v", mask)
	}
	if err := qp.Validate(qp.RC, qp.StateRTR, qp.StateRTS, mask); err != nil {
		t.Error(err)
	}
	if k := EncodeAHAttr(&a.AHAttr); k != r.Ah_attr {
		t.Errorf("EncodeAHAttr: %+v, want %+v", k, r.Ah_attr)
	}
	if MaskReserved != 0x1e00000 {
		t.Errorf("MaskReserved %#x", uint32(MaskReserved))
	}
}
