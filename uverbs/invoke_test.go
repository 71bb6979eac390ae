package uverbs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
)

// kernelPort.Invoke encodes a driver method as rdma-core's execute_ioctl
// does: the driver id in the header, every attribute mandatory, constants
// inline in 8 bytes, output buffers by pointer, a new object as an IDR
// attribute whose data word the kernel replaces with the handle. The
// calls are mlx5's UAR_OBJ_ALLOC and UAR_OBJ_DESTROY as its provider
// sends them.
func TestKernelPortInvoke(t *testing.T) {
	k := newFakeKernel(t)
	port := &kernelPort{f: k, driverID: abi.RDMA_DRIVER_MLX5}
	k.handle(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, func(fc *fakeCall) error {
		if fc.DriverID != abi.RDMA_DRIVER_MLX5 {
			t.Errorf("driver id %d", fc.DriverID)
		}
		want := []fakeAttr{
			{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, Len: 0, Flags: abi.UVERBS_ATTR_F_MANDATORY, Data: 0},
			{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, Len: 8, Flags: abi.UVERBS_ATTR_F_MANDATORY, Data: abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC},
			{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, Len: 8, Flags: abi.UVERBS_ATTR_F_MANDATORY},
			{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, Len: 4, Flags: abi.UVERBS_ATTR_F_MANDATORY},
			{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, Len: 4, Flags: abi.UVERBS_ATTR_F_MANDATORY},
		}
		if len(fc.Attrs) != len(want) {
			t.Fatalf("%d attributes: %+v", len(fc.Attrs), fc.Attrs)
		}
		for i, a := range fc.Attrs {
			w := want[i]
			if a.ID != w.ID || a.Len != w.Len || a.Flags != w.Flags || a.Elem != 0 {
				t.Errorf("attribute %d: %+v, want %+v", i, a, w)
			}
			if i < 2 && a.Data != w.Data {
				t.Errorf("attribute %d data %#x, want %#x", i, a.Data, w.Data)
			}
			if i >= 2 && a.Data == 0 {
				t.Errorf("output attribute %d without a buffer", i)
			}
		}
		off, length, page := uint64(0x7f000), uint32(4096), uint32(0x123)
		fc.setData(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, 9)
		fc.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, bytesOf(&off))
		fc.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, bytesOf(&length))
		return fc.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, bytesOf(&page))
	})
	var off uint64
	var length, page uint32
	attrs := []provider.Attr{
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, Kind: provider.AttrIDRNew},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, Kind: provider.AttrConstIn, Value: abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, Kind: provider.AttrPtrOut, Out: bytesOf(&off)},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, Kind: provider.AttrPtrOut, Out: bytesOf(&length)},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, Kind: provider.AttrPtrOut, Out: bytesOf(&page)},
	}
	if err := port.Invoke(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, attrs); err != nil {
		t.Fatal(err)
	}
	if attrs[0].Value != 9 || off != 0x7f000 || length != 4096 || page != 0x123 {
		t.Errorf("handle %d, offset %#x, length %d, page id %#x", attrs[0].Value, off, length, page)
	}

	k.handle(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_DESTROY, func(fc *fakeCall) error {
		if len(fc.Attrs) != 1 || fc.Attrs[0] != (fakeAttr{ID: abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, Flags: abi.UVERBS_ATTR_F_MANDATORY, Data: 9}) {
			t.Errorf("destroy attributes %+v", fc.Attrs)
		}
		return nil
	})
	if err := port.Invoke(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_DESTROY,
		[]provider.Attr{{ID: abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, Kind: provider.AttrIDR, Value: 9}}); err != nil {
		t.Fatal(err)
	}

	// An input buffer: inline up to 8 bytes, by pointer beyond.
	k.handle(abi.MLX5_IB_OBJECT_UAR, 0x1002, func(fc *fakeCall) error {
		if len(fc.Attrs) != 2 || fc.Attrs[0].Len != 4 || fc.Attrs[0].Data != 0x04030201 || fc.Attrs[1].Len != 16 ||
			string(fc.in(0x1001)) != "0123456789abcdef" {
			t.Errorf("input attributes %+v", fc.Attrs)
		}
		return nil
	})
	if err := port.Invoke(abi.MLX5_IB_OBJECT_UAR, 0x1002, []provider.Attr{
		{ID: 0x1000, Kind: provider.AttrPtrIn, In: []byte{1, 2, 3, 4}},
		{ID: 0x1001, Kind: provider.AttrPtrIn, In: []byte("0123456789abcdef")},
	}); err != nil {
		t.Fatal(err)
	}

	// A method the kernel does not know, and malformed attributes.
	if err := port.Invoke(abi.MLX5_IB_OBJECT_UAR, 0x1fff, nil); !errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Errorf("unknown method: %v", err)
	}
	n := len(k.calls)
	for _, a := range []provider.Attr{{ID: 1, Kind: provider.AttrPtrOut}, {ID: 1, Kind: provider.AttrPtrIn}, {ID: 1, Kind: 99}} {
		if err := port.Invoke(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, []provider.Attr{a}); !errors.Is(err, unix.EINVAL) {
			t.Errorf("attribute %+v: %v", a, err)
		}
	}
	if len(k.calls) != n {
		t.Error("a malformed call reached the kernel")
	}
}
