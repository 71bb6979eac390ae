//go:build linux

package abi

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// Known values, checked against the linux-libc-dev headers and a C program
// built with them (sizeof, offsetof, printf of the constants).
func TestKnownValues(t *testing.T) {
	checkValues(t, []valueCase[uint64]{
		{"sizeof(struct ib_uverbs_ioctl_hdr)", SizeofIbUverbsIoctlHdr, 24},
		{"sizeof(struct ib_uverbs_attr)", SizeofIbUverbsAttr, 16},
		{"sizeof(struct ib_uverbs_cmd_hdr)", SizeofIbUverbsCmdHdr, 8},
		{"sizeof(struct ib_uverbs_ex_cmd_hdr)", SizeofIbUverbsExCmdHdr, 16},
		{"sizeof(struct ib_uverbs_query_port_resp)", SizeofIbUverbsQueryPortResp, 40},
		{"sizeof(struct ib_uverbs_query_port_resp_ex)", SizeofIbUverbsQueryPortRespEx, 48},
		{"sizeof(struct ib_uverbs_gid_entry)", SizeofIbUverbsGidEntry, 32},
		{"sizeof(struct rxe_send_wqe)", SizeofRxeSendWqe, 208},
		{"offsetof(struct ib_uverbs_attr, data)", uint64(unsafe.Offsetof(IbUverbsAttr{}.Data)), 8},
		{"offsetof(struct ib_uverbs_ioctl_hdr, driver_id)", uint64(unsafe.Offsetof(IbUverbsIoctlHdr{}.Driver_id)), 16},
		{"RDMA_VERBS_IOCTL", RDMA_VERBS_IOCTL, 0xc0181b01},
		{"IB_USER_VERBS_CMD_GET_CONTEXT", IB_USER_VERBS_CMD_GET_CONTEXT, 0},
		{"IB_USER_VERBS_CMD_QUERY_PORT", IB_USER_VERBS_CMD_QUERY_PORT, 2},
		{"IB_USER_VERBS_CMD_FLAG_EXTENDED", IB_USER_VERBS_CMD_FLAG_EXTENDED, 0x80000000},
		{"IB_USER_VERBS_EX_CMD_QUERY_DEVICE", IB_USER_VERBS_EX_CMD_QUERY_DEVICE, 1},
		{"RDMA_USER_CM_CMD_CREATE_ID", RDMA_USER_CM_CMD_CREATE_ID, 0},
		{"UVERBS_METHOD_INVOKE_WRITE", UVERBS_METHOD_INVOKE_WRITE, 0},
		{"UVERBS_ID_NS_SHIFT", UVERBS_ID_NS_SHIFT, 12},
		{"RDMA_NLDEV_ATTR_DEV_INDEX", RDMA_NLDEV_ATTR_DEV_INDEX, 1},
		{"RDMA_NL_NLDEV", RDMA_NL_NLDEV, 5},
		{"RXE_NETWORK_TYPE_IPV4", RXE_NETWORK_TYPE_IPV4, 1},
		{"IB_USER_VERBS_ABI_VERSION", IB_USER_VERBS_ABI_VERSION, 6},
	})
}

// TestSizes checks the generated table of every generated type's size.
func TestSizes(t *testing.T) { checkValues(t, sizes) }

// valueCase is a value as Go computes it and as C (or the headers) gave it.
type valueCase[V uint64 | uintptr] struct {
	name      string
	got, want V
}

func checkValues[V uint64 | uintptr](t *testing.T, cases []valueCase[V]) {
	t.Helper()
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// The field names follow the C names verbatim (godefs would have turned
// ib_uverbs_create_cq_resp's cq_handle into Handle).
var _ = IbUverbsCreateCqResp{Cq_handle: 1, Cqe: 2}
var _ = IbUverbsIoctlHdr{Length: 1, Object_id: 2, Method_id: 3, Num_attrs: 4, Driver_id: 5}

func TestUnionAccessors(t *testing.T) {
	var a IbUverbsAttr
	a.EnumData().Elem_id = 7
	a.Data = 0x1122334455667788
	b := (*[SizeofIbUverbsAttr]byte)(unsafe.Pointer(&a))
	if b[6] != 7 || binary.NativeEndian.Uint64(b[8:]) != 0x1122334455667788 {
		t.Errorf("IbUverbsAttr bytes = % x", b)
	}

	var w RxeSendWr
	w.Rdma().Rkey = 0xabcdef01 // offsetof(struct rxe_send_wr, wr.rdma.rkey) = 32
	wb := (*[SizeofRxeSendWr]byte)(unsafe.Pointer(&w))
	if got := binary.NativeEndian.Uint32(wb[32:]); got != 0xabcdef01 {
		t.Errorf("RxeSendWr.Rdma().Rkey landed wrong: % x", wb)
	}

	// Each variant fits its union and is aligned within the struct.
	for _, c := range []struct {
		name               string
		off, align         uintptr
		unionSize, variant uintptr
	}{
		{"IbUverbsAttr.EnumData", unsafe.Offsetof(a.Attr_data), unsafe.Alignof(IbUverbsAttrAttrDataEnumData{}), unsafe.Sizeof(a.Attr_data), SizeofIbUverbsAttrAttrDataEnumData},
		{"IbUverbsSendWr.Rdma", unsafe.Offsetof(IbUverbsSendWr{}.Wr), unsafe.Alignof(IbUverbsSendWrWrRdma{}), unsafe.Sizeof(IbUverbsSendWr{}.Wr), SizeofIbUverbsSendWrWrRdma},
		{"IbUverbsSendWr.Atomic", unsafe.Offsetof(IbUverbsSendWr{}.Wr), unsafe.Alignof(IbUverbsSendWrWrAtomic{}), unsafe.Sizeof(IbUverbsSendWr{}.Wr), SizeofIbUverbsSendWrWrAtomic},
		{"IbUverbsSendWr.Ud", unsafe.Offsetof(IbUverbsSendWr{}.Wr), unsafe.Alignof(IbUverbsSendWrWrUd{}), unsafe.Sizeof(IbUverbsSendWr{}.Wr), SizeofIbUverbsSendWrWrUd},
		{"RxeSendWr.Flush", unsafe.Offsetof(w.Wr), unsafe.Alignof(RxeSendWrWrFlush{}), unsafe.Sizeof(w.Wr), SizeofRxeSendWrWrFlush},
		{"RxeSendWr.Rdma", unsafe.Offsetof(w.Wr), unsafe.Alignof(RxeSendWrWrRdma{}), unsafe.Sizeof(w.Wr), SizeofRxeSendWrWrRdma},
		{"RxeSendWr.Atomic", unsafe.Offsetof(w.Wr), unsafe.Alignof(RxeSendWrWrAtomic{}), unsafe.Sizeof(w.Wr), SizeofRxeSendWrWrAtomic},
		{"RxeSendWr.Ud", unsafe.Offsetof(w.Wr), unsafe.Alignof(RxeSendWrWrUd{}), unsafe.Sizeof(w.Wr), SizeofRxeSendWrWrUd},
		{"RxeSendWr.Mw", unsafe.Offsetof(w.Wr), unsafe.Alignof(RxeSendWrWrMw{}), unsafe.Sizeof(w.Wr), SizeofRxeSendWrWrMw},
	} {
		if c.off%c.align != 0 || c.variant > c.unionSize {
			t.Errorf("%s: union at offset %d size %d, variant align %d size %d", c.name, c.off, c.unionSize, c.align, c.variant)
		}
	}
}
