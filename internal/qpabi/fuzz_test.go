package qpabi

// Fuzz targets for the kernel's QP attribute answers: rdma_cm's
// INIT_QP_ATTR (struct ib_uverbs_qp_attr) and QUERY_QP (struct
// ib_uverbs_query_qp_resp). Whatever the kernel answers must decode, and
// its states and mask must be safe to check and to send back in a modify.

import (
	"testing"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

func rawBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

func FuzzDecodeUverbsAttr(f *testing.F) {
	// What rdma_cm answers for RTR on RoCE: the address vector with a GRH.
	var r abi.IbUverbsQpAttr
	r.Qp_attr_mask = uint32(qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer)
	r.Qp_state, r.Path_mtu, r.Dest_qp_num, r.Rq_psn = uint32(qp.StateRTR), 3, 0x11, 0xabcdef
	r.Ah_attr = abi.IbUverbsAhAttr{Is_global: 1, Port_num: 1, Grh: abi.IbUverbsGlobalRoute{Sgid_index: 1, Hop_limit: 64}}
	r.Ah_attr.Grh.Dgid[10], r.Ah_attr.Grh.Dgid[11], r.Ah_attr.Grh.Dgid[12] = 0xff, 0xff, 10
	f.Add(append([]byte(nil), rawBytes(&r)...))
	r = abi.IbUverbsQpAttr{Qp_attr_mask: uint32(qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags | 1<<22), Port_num: 1,
		Qp_access_flags: uint32(wr.RemoteWrite | wr.RemoteRead)}
	f.Add(append([]byte(nil), rawBytes(&r)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 9, 0, 0, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r abi.IbUverbsQpAttr
		copy(rawBytes(&r), b)
		a, mask := DecodeUverbsAttr(&r)
		if uint32(mask) != r.Qp_attr_mask {
			t.Fatalf("mask %#x, the kernel said %#x", mask, r.Qp_attr_mask)
		}
		_, _, _ = a.State.String(), a.CurState.String(), mask.String()
		for _, typ := range []qp.Type{qp.RC, qp.UC, qp.UD} {
			_ = qp.Validate(typ, a.CurState, a.State, mask&^MaskReserved)
		}
		_ = EncodeModify(1, &a, mask&^MaskReserved)
		for _, k := range []*abi.IbUverbsAhAttr{&r.Ah_attr, &r.Alt_ah_attr} {
			ah := DecodeAHAttr(k)
			if back := EncodeAHAttr(&ah); DecodeAHAttr(&back) != ah {
				t.Fatalf("address vector %+v does not survive encoding", ah)
			}
		}
	})
}

func FuzzDecodeQuery(f *testing.F) {
	var r abi.IbUverbsQueryQpResp
	r.Qp_state, r.Cur_qp_state, r.Path_mtu, r.Qkey, r.Dest_qp_num = uint8(qp.StateRTS), uint8(qp.StateRTS), 3, 0x11111111, 0x12
	r.Max_send_wr, r.Max_recv_wr, r.Max_send_sge, r.Max_recv_sge, r.Max_inline_data = 64, 64, 1, 1, 64
	r.Dest = abi.IbUverbsQpDest{Is_global: 1, Port_num: 1, Sgid_index: 1, Hop_limit: 64}
	r.Timeout, r.Retry_cnt, r.Rnr_retry, r.Port_num = 14, 7, 7, 1
	f.Add(append([]byte(nil), rawBytes(&r)...))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r abi.IbUverbsQueryQpResp
		copy(rawBytes(&r), b)
		a, init := DecodeQuery(&r)
		if a.Caps != init.Caps {
			t.Fatalf("capabilities %+v and %+v differ", a.Caps, init.Caps)
		}
		_, _ = a.State.String(), a.CurState.String()
		for _, d := range []*abi.IbUverbsQpDest{&r.Dest, &r.Alt_dest} {
			ah := decodeDest(d)
			if back := encodeDest(&ah); decodeDest(&back) != ah {
				t.Fatalf("destination %+v does not survive encoding", ah)
			}
		}
	})
}
