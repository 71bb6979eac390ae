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

// A released command keeps nothing of its use: no attribute (so no caller
// memory stays reachable from the pool), error, flag or scratch space; and
// scratchOf hands out zeroed space until it is used up, then heap memory.
func TestCommandRelease(t *testing.T) {
	c := newCommand(abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE)
	c.driverID, c.quick = 3, true
	buf := make([]byte, 8)
	c.ptrIn(1, unsafe.Pointer(&buf[0]), len(buf))
	scratchOf[abi.IbUverbsQpCap](c).Max_send_wr = 7
	for i := 0; i <= maxAttrs; i++ {
		c.constIn(uint16(i), 0)
	}
	if c.err == nil {
		t.Fatal("no error for too many attributes")
	}
	n := c.n
	// The test reads c after its release: nothing else in this package
	// runs in parallel to take it from the pool.
	c.release()
	if c.n != 0 || c.err != nil || c.quick || c.driverID != 0 || c.used != 0 || c.object != 0 || c.method != 0 {
		t.Errorf("released command: n %d err %v quick %v driver %d used %d object %d method %d",
			c.n, c.err, c.quick, c.driverID, c.used, c.object, c.method)
	}
	for i := range n {
		if c.attrs[i] != (attr{}) {
			t.Fatalf("attribute %d survives the release: %+v", i, c.attrs[i])
		}
	}

	if p := scratchOf[abi.IbUverbsQpCap](c); *p != (abi.IbUverbsQpCap{}) {
		t.Errorf("scratch space not zeroed: %+v", *p)
	}
	lo := uintptr(unsafe.Pointer(&c.scratch[0]))
	hi := lo + unsafe.Sizeof(c.scratch)
	in := func(p unsafe.Pointer) bool { return uintptr(p) >= lo && uintptr(p) < hi }
	for c.used < scratchWords {
		if p := scratchOf[uint64](c); !in(unsafe.Pointer(p)) {
			t.Fatal("scratch space handed out outside the command")
		}
	}
	if p := scratchOf[uint64](c); in(unsafe.Pointer(p)) {
		t.Fatal("scratch space handed out twice")
	}
	c.used = 0 // c is in the pool
}
