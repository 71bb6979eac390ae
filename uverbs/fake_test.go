package uverbs

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// fakeKernel stands in for /dev/infiniband/uverbsN in unit tests. It decodes
// every RDMA_VERBS_IOCTL the way the kernel does (header, then attributes),
// hands the decoded call to a handler registered for the object and method,
// and writes back what the handler answers: output buffers, new handles and
// file descriptors, and the valid-output flags.
type fakeKernel struct {
	// mu serializes calls: objects' cleanups call from the runtime's
	// cleanup goroutine.
	mu       sync.Mutex
	t        testing.TB
	handlers map[[2]uint16]func(*fakeCall) error
	calls    []fakeCall
	writes   [][]byte
	onWrite  func(b []byte) error
	closed   bool
}

type fakeAttr struct {
	ID, Len, Flags uint16
	Elem           uint8
	Data           uint64
}

type fakeCall struct {
	Object, Method uint16
	DriverID       uint32
	Attrs          []fakeAttr
	// Quick: the call came as a raw system call (command.quick).
	Quick bool
	raw   []byte // the caller's attribute array, for write-back
}

func newFakeKernel(t testing.TB) *fakeKernel {
	return &fakeKernel{t: t, handlers: map[[2]uint16]func(*fakeCall) error{}}
}

func (k *fakeKernel) handle(object, method uint16, h func(*fakeCall) error) {
	k.handlers[[2]uint16{object, method}] = h
}

func (k *fakeKernel) ioctl(req uint, arg unsafe.Pointer) error { return k.ioctlAs(req, arg, false) }

func (k *fakeKernel) quickIoctl(req uint, arg unsafe.Pointer) error { return k.ioctlAs(req, arg, true) }

func (k *fakeKernel) ioctlAs(req uint, arg unsafe.Pointer, quick bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	if req != abi.RDMA_VERBS_IOCTL {
		return unix.ENOTTY
	}
	ne := binary.NativeEndian
	hdr := unsafe.Slice((*byte)(arg), ioctlHdrSize)
	length := int(ne.Uint16(hdr[0:]))
	buf := unsafe.Slice((*byte)(arg), length)
	c := fakeCall{
		Object:   ne.Uint16(buf[2:]),
		Method:   ne.Uint16(buf[4:]),
		DriverID: ne.Uint32(buf[16:]),
		Quick:    quick,
	}
	n := int(ne.Uint16(buf[6:]))
	if length != ioctlHdrSize+n*ioctlAttrSize {
		k.t.Errorf("ioctl header length %d does not match %d attributes", length, n)
		return unix.EINVAL
	}
	if ne.Uint64(buf[8:]) != 0 || ne.Uint32(buf[20:]) != 0 {
		return unix.EPROTONOSUPPORT // reserved fields must be zero
	}
	c.raw = buf[ioctlHdrSize:]
	for i := 0; i < n; i++ {
		a := c.raw[i*ioctlAttrSize:]
		c.Attrs = append(c.Attrs, fakeAttr{
			ID: ne.Uint16(a[0:]), Len: ne.Uint16(a[2:]), Flags: ne.Uint16(a[4:]),
			Elem: a[6], Data: ne.Uint64(a[8:]),
		})
	}
	k.calls = append(k.calls, c)
	h, ok := k.handlers[[2]uint16{c.Object, c.Method}]
	if !ok {
		return unix.EPROTONOSUPPORT
	}
	return h(&c)
}

func (k *fakeKernel) write(b []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	k.writes = append(k.writes, append([]byte(nil), b...))
	if k.onWrite == nil {
		return unix.ENOSYS
	}
	return k.onWrite(b)
}

func (k *fakeKernel) fastWrite(b []byte) error { return k.write(b) }
func (k *fakeKernel) doorbell(b []byte) error  { return k.write(b) }

func (k *fakeKernel) fd() int { return -1 }

func (k *fakeKernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

// snapshot returns the calls so far and whether the file is closed.
func (k *fakeKernel) snapshot() ([]fakeCall, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]fakeCall(nil), k.calls...), k.closed
}

func (c *fakeCall) attr(id uint16) (fakeAttr, int, bool) {
	for i, a := range c.Attrs {
		if a.ID == id {
			return a, i, true
		}
	}
	return fakeAttr{}, -1, false
}

// out writes v into the caller's output buffer for attribute id, as the
// kernel's uverbs_copy_to does: never more than the caller's length.
func (c *fakeCall) out(id uint16, v []byte) error {
	a, i, ok := c.attr(id)
	if !ok {
		return fmt.Errorf("fake kernel: no attribute %d", id)
	}
	n := min(int(a.Len), len(v))
	dst := unsafe.Slice((*byte)(userPtr(a.Data)), a.Len)
	clear(dst)
	copy(dst, v[:n])
	flags := binary.NativeEndian.Uint16(c.raw[i*ioctlAttrSize+4:])
	binary.NativeEndian.PutUint16(c.raw[i*ioctlAttrSize+4:], flags|abi.UVERBS_ATTR_F_VALID_OUTPUT)
	return nil
}

// setData replaces the data word of attribute id (new handles and fds).
func (c *fakeCall) setData(id uint16, v uint64) {
	_, i, ok := c.attr(id)
	if ok {
		binary.NativeEndian.PutUint64(c.raw[i*ioctlAttrSize+8:], v)
	}
}

// in returns the bytes of an input attribute, inline or by pointer.
func (c *fakeCall) in(id uint16) []byte {
	a, _, ok := c.attr(id)
	if !ok {
		return nil
	}
	if a.Len <= 8 {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], a.Data)
		return b[:a.Len]
	}
	return append([]byte(nil), unsafe.Slice((*byte)(userPtr(a.Data)), a.Len)...)
}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// rxeLikeKernel answers context creation and queries as the rxe driver on
// kernel 6.1 does.
func rxeLikeKernel(t testing.TB) *fakeKernel {
	k := newFakeKernel(t)
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT, func(c *fakeCall) error {
		var n uint32 = 1
		var core uint64 = 0
		if err := c.out(abi.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, bytesOf(&n)); err != nil {
			return err
		}
		return c.out(abi.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, bytesOf(&core))
	})
	k.handle(abi.UVERBS_OBJECT_ASYNC_EVENT, abi.UVERBS_METHOD_ASYNC_EVENT_ALLOC, func(c *fakeCall) error {
		// A real descriptor, so that Context.Close has something to close.
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		c.setData(abi.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, uint64(fd))
		return nil
	})
	return k
}

// fakeContext opens a context on k, closed when the test ends.
func fakeContext(t testing.TB, k *fakeKernel) *Context {
	t.Helper()
	c, err := newContext(testDev, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// userPtr turns a data word the code under test filled with a user pointer
// back into a pointer, as the kernel's u64_to_user_ptr does. The memory is
// kept alive by the command being executed.
func userPtr(v uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&v)) }
