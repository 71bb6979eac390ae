package uverbs

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// AdviseMR sends UVERBS_METHOD_ADVISE_MR, a method of the MR object, with
// the PD's handle, the advice as a constant, the flags as a u32 and the
// SGEs as an array of struct ib_uverbs_sge; bad arguments never reach the
// kernel.
func TestAdviseMRABI(t *testing.T) {
	k, c := objectContext(t)
	pd := allocPD(t, c)
	defer pd.Close()
	var got fakeCall
	var sges []byte
	k.handle(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_ADVISE_MR, func(fc *fakeCall) error {
		got = *fc
		sges = fc.in(abi.UVERBS_ATTR_ADVISE_MR_SGE_LIST)
		return nil
	})
	list := []wr.SGE{{Addr: 0x10000, Length: 4096, LKey: 7}, {Addr: 0x30000, Length: 8192, LKey: 9}}
	if err := pd.AdviseMR(AdvicePrefetchWrite, AdviseFlush, list); err != nil {
		t.Fatal(err)
	}
	for id, w := range map[uint16]struct {
		len  uint16
		data uint64
	}{
		abi.UVERBS_ATTR_ADVISE_MR_PD_HANDLE: {0, uint64(pd.handle)},
		abi.UVERBS_ATTR_ADVISE_MR_ADVICE:    {8, abi.IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE},
		abi.UVERBS_ATTR_ADVISE_MR_FLAGS:     {4, abi.IB_UVERBS_ADVISE_MR_FLAG_FLUSH},
	} {
		if a, _, ok := got.attr(id); !ok || a.Len != w.len || a.Data != w.data {
			t.Errorf("attribute %d: %+v (present %v); want length %d data %#x", id, a, ok, w.len, w.data)
		}
	}
	ne := binary.NativeEndian
	if len(sges) != 2*int(unsafe.Sizeof(abi.IbUverbsSge{})) || ne.Uint64(sges[16:]) != 0x30000 || ne.Uint32(sges[24:]) != 8192 || ne.Uint32(sges[28:]) != 9 {
		t.Errorf("SGE list % x", sges)
	}
	calls, _ := k.snapshot()
	before := len(calls)
	for name, err := range map[string]error{
		"no SGE":        pd.AdviseMR(AdvicePrefetch, 0, nil),
		"unknown":       pd.AdviseMR(3, 0, list),
		"unknown flags": pd.AdviseMR(AdvicePrefetch, 2, list),
	} {
		if !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: %v; want EINVAL", name, err)
		}
	}
	if calls, _ := k.snapshot(); len(calls) != before {
		t.Errorf("bad arguments reached the kernel: %+v", calls[before:])
	}
}
