package uverbs

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

func TestCommandEncoding(t *testing.T) {
	var out uint32
	big := make([]byte, 40)
	small := [3]byte{1, 2, 3}
	c := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT)
	c.driverID = abi.RDMA_DRIVER_RXE
	c.constIn(7, 0x1122334455667788)
	c.ptrIn(8, unsafe.Pointer(&small[0]), len(small))
	c.ptrIn(9, unsafe.Pointer(&big[0]), len(big))
	c.ptrOut(10, unsafe.Pointer(&out), 4)
	c.optional()
	c.idrIn(11, 42)
	c.fdIn(12, 5)
	c.enumIn(13, 3, unsafe.Pointer(&small[0]), 2)
	n := c.encode()

	if want := ioctlHdrSize + 7*ioctlAttrSize; n != want {
		t.Fatalf("encoded %d bytes, want %d", n, want)
	}
	ne := binary.NativeEndian
	b := c.buf[:n]
	hdr := []uint64{uint64(ne.Uint16(b[0:])), uint64(ne.Uint16(b[2:])), uint64(ne.Uint16(b[4:])), uint64(ne.Uint16(b[6:])), ne.Uint64(b[8:]), uint64(ne.Uint32(b[16:])), uint64(ne.Uint32(b[20:]))}
	wantHdr := []uint64{uint64(n), abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT, 7, 0, abi.RDMA_DRIVER_RXE, 0}
	if d := cmp.Diff(wantHdr, hdr); d != "" {
		t.Errorf("header (-want +got):\n%s", d)
	}
	m := uint16(abi.UVERBS_ATTR_F_MANDATORY)
	want := []fakeAttr{
		{ID: 7, Len: 8, Flags: m, Data: 0x1122334455667788},
		{ID: 8, Len: 3, Flags: m, Data: uint64(ne.Uint32([]byte{1, 2, 3, 0}))},
		{ID: 9, Len: 40, Flags: m, Data: uint64(uintptr(unsafe.Pointer(&big[0])))},
		{ID: 10, Len: 4, Flags: 0, Data: uint64(uintptr(unsafe.Pointer(&out)))},
		{ID: 11, Flags: m, Data: 42},
		{ID: 12, Flags: m, Data: 5},
		{ID: 13, Len: 2, Flags: m, Elem: 3, Data: uint64(ne.Uint16([]byte{1, 2}))},
	}
	var got []fakeAttr
	for i := 0; i < 7; i++ {
		a := b[ioctlHdrSize+i*ioctlAttrSize:]
		if a[7] != 0 {
			t.Errorf("attribute %d: reserved byte is %d", i, a[7])
		}
		got = append(got, fakeAttr{ID: ne.Uint16(a[0:]), Len: ne.Uint16(a[2:]), Flags: ne.Uint16(a[4:]), Elem: a[6], Data: ne.Uint64(a[8:])})
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("attributes (-want +got):\n%s", d)
	}
}

func TestCommandLimits(t *testing.T) {
	k := newFakeKernel(t)
	c := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT)
	for i := 0; i <= maxAttrs; i++ {
		c.constIn(uint16(i), 0)
	}
	if err := c.execute(k, "test"); err == nil {
		t.Fatal("command with too many attributes was sent")
	}
	if len(k.calls) != 0 {
		t.Fatal("a command that failed to encode reached the kernel")
	}

	c = newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT)
	big := make([]byte, 1<<16)
	c.ptrIn(1, unsafe.Pointer(&big[0]), len(big))
	if err := c.execute(k, "test"); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("oversized attribute: got %v, want EINVAL", err)
	}
	if len(k.calls) != 0 {
		t.Fatal("an oversized attribute reached the kernel")
	}
}

func TestCommandErrno(t *testing.T) {
	k := newFakeKernel(t) // no handlers: every method is unknown
	c := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT)
	c.constIn(abi.UVERBS_ATTR_QUERY_PORT_PORT_NUM, 1)
	err := c.execute(k, "query port 1")
	if !errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Fatalf("got %v, want EPROTONOSUPPORT", err)
	}
	var ue *Error
	if !errors.As(err, &ue) || ue.Op != "query port 1" {
		t.Fatalf("error %v does not name the operation", err)
	}
}
