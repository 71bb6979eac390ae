package qpabi

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// roceGID is ::ffff:192.168.1.2, a RoCE v2 GID.
var roceGID = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 2}

// fullAttr sets every field to a distinct value, so a field in the wrong
// place shows up.
func fullAttr() qp.Attr {
	return qp.Attr{
		State: qp.StateRTR, CurState: qp.StateInit, PathMTU: 5, PathMigState: qp.MigArmed,
		QKey: 0x11111111, RQPSN: 0x123456, SQPSN: 0x654321, DestQPNum: 0x000abc,
		QPAccessFlags: wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead,
		Caps:          qp.Caps{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 5},
		AHAttr: qp.AHAttr{DLID: 0x1234, SL: 3, SrcPathBits: 1, StaticRate: 7, IsGlobal: true, PortNum: 1,
			DGID: roceGID, FlowLabel: 0xabcde, SGIDIndex: 3, HopLimit: 64, TrafficClass: 0x68},
		AltAHAttr: qp.AHAttr{DLID: 0x4321, SL: 2, SrcPathBits: 2, StaticRate: 3, PortNum: 2,
			DGID: [16]byte{0: 0xfe, 1: 0x80, 15: 9}, FlowLabel: 7, SGIDIndex: 4, HopLimit: 2, TrafficClass: 5},
		PKeyIndex: 0x0102, AltPKeyIndex: 0x0304, EnSQDAsyncNotify: true, SQDraining: true,
		MaxRdAtomic: 16, MaxDestRdAtomic: 8, MinRNRTimer: 12, PortNum: 1, Timeout: 14,
		RetryCnt: 7, RNRRetry: 6, AltPortNum: 2, AltTimeout: 18, RateLimit: 100000,
	}
}

func cmdBytes(c *abi.IbUverbsExModifyQp) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(c)), unsafe.Sizeof(*c))
}

// layout writes the bytes of struct ib_uverbs_ex_modify_qp field by field,
// at the offsets of the uAPI header.
type layout []byte

func (l layout) u8(off int, v uint8)   { l[off] = v }
func (l layout) u16(off int, v uint16) { binary.NativeEndian.PutUint16(l[off:], v) }
func (l layout) u32(off int, v uint32) { binary.NativeEndian.PutUint32(l[off:], v) }

// dest writes a struct ib_uverbs_qp_dest (32 bytes).
func (l layout) dest(off int, gid [16]byte, flow uint32, dlid uint16, sgid, hop, tclass, sl, pathBits, rate, global, port uint8) {
	copy(l[off:], gid[:])
	l.u32(off+16, flow)
	l.u16(off+20, dlid)
	for i, v := range []uint8{sgid, hop, tclass, sl, pathBits, rate, global, port} {
		l.u8(off+24+i, v)
	}
}

func TestEncodeModifyLayout(t *testing.T) {
	if n := unsafe.Sizeof(abi.IbUverbsExModifyQp{}); n != 120 {
		t.Fatalf("sizeof(ib_uverbs_ex_modify_qp) = %d, want 120", n)
	}
	a := fullAttr()

	// An RC INIT→RTR over RoCE v2: only the fields of the mask travel.
	mask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	cmd := EncodeModify(0x42, &a, mask)
	want := make(layout, 120)
	want.dest(0, roceGID, 0xabcde, 0x1234, 3, 64, 0x68, 3, 1, 7, 1, 1)
	want.u32(64, 0x42)
	want.u32(68, uint32(mask))
	want.u32(76, 0x123456) // rq_psn
	want.u32(84, 0x000abc) // dest_qp_num
	want.u8(96, uint8(qp.StateRTR))
	want.u8(98, 5)   // path_mtu
	want.u8(102, 8)  // max_dest_rd_atomic
	want.u8(103, 12) // min_rnr_timer
	if got := cmdBytes(&cmd); !bytes.Equal(got, want) {
		t.Errorf("RTR command\n got % x\nwant % x", got, []byte(want))
	}

	// Every bit: every field in its place.
	mask = 0x1fffff | qp.AttrRateLimit
	cmd = EncodeModify(0x42, &a, mask)
	want = make(layout, 120)
	want.dest(0, roceGID, 0xabcde, 0x1234, 3, 64, 0x68, 3, 1, 7, 1, 1)
	want.dest(32, a.AltAHAttr.DGID, 7, 0x4321, 4, 2, 5, 2, 2, 3, 0, 2)
	want.u32(64, 0x42)
	want.u32(68, uint32(mask))
	want.u32(72, 0x11111111)
	want.u32(76, 0x123456)
	want.u32(80, 0x654321)
	want.u32(84, 0x000abc)
	want.u32(88, uint32(a.QPAccessFlags))
	want.u16(92, 0x0102)
	want.u16(94, 0x0304)
	for i, v := range []uint8{uint8(qp.StateRTR), uint8(qp.StateInit), 5, uint8(qp.MigArmed), 1, 16, 8, 12, 1, 14, 7, 6, 2, 18} {
		want.u8(96+i, v)
	}
	want.u32(112, 100000)
	if got := cmdBytes(&cmd); !bytes.Equal(got, want) {
		t.Errorf("full command\n got % x\nwant % x", got, []byte(want))
	}

	// The legacy command is the Base part; no rate limit without its bit.
	cmd = EncodeModify(7, &a, qp.AttrState)
	if cmd.Rate_limit != 0 || cmd.Base.Qp_state != uint8(qp.StateRTR) || cmd.Base.Qkey != 0 || cmd.Base.Dest.Is_global != 0 {
		t.Errorf("STATE only: %+v", cmd)
	}
}

func TestQuery(t *testing.T) {
	q := EncodeQuery(9, qp.AttrState|qp.AttrCap)
	if q != (abi.IbUverbsQueryQp{Qp_handle: 9, Attr_mask: uint32(qp.AttrState | qp.AttrCap)}) {
		t.Errorf("EncodeQuery = %+v", q)
	}

	// The response of a QP that was modified with fullAttr.
	a := fullAttr()
	m := EncodeModify(9, &a, 0x1fffff)
	resp := abi.IbUverbsQueryQpResp{
		Dest: m.Base.Dest, Alt_dest: m.Base.Alt_dest,
		Max_send_wr: 1, Max_recv_wr: 2, Max_send_sge: 3, Max_recv_sge: 4, Max_inline_data: 5,
		Qkey: 0x11111111, Rq_psn: 0x123456, Sq_psn: 0x654321, Dest_qp_num: 0xabc,
		Qp_access_flags: uint32(a.QPAccessFlags), Pkey_index: 0x0102, Alt_pkey_index: 0x0304,
		Qp_state: uint8(qp.StateRTR), Cur_qp_state: uint8(qp.StateInit), Path_mtu: 5, Path_mig_state: uint8(qp.MigArmed),
		Sq_draining: 1, Max_rd_atomic: 16, Max_dest_rd_atomic: 8, Min_rnr_timer: 12, Port_num: 1,
		Timeout: 14, Retry_cnt: 7, Rnr_retry: 6, Alt_port_num: 2, Alt_timeout: 18, Sq_sig_all: 1,
	}
	gotAttr, gotInit := DecodeQuery(&resp)
	wantAttr := a
	wantAttr.EnSQDAsyncNotify = false // not in the response
	wantAttr.RateLimit = 0            // nor this
	if d := cmp.Diff(wantAttr, gotAttr); d != "" {
		t.Errorf("Attr (-want +got):\n%s", d)
	}
	if d := cmp.Diff(qp.InitAttr{Caps: a.Caps, SQSigAll: true}, gotInit); d != "" {
		t.Errorf("InitAttr (-want +got):\n%s", d)
	}
}
