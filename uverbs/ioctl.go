package uverbs

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// The uverbs ioctl carries one method call on one object type: a 24-byte
// header (struct ib_uverbs_ioctl_hdr) followed by an array of 16-byte
// attributes (struct ib_uverbs_attr). Each attribute is either an inline value
// of up to 8 bytes, a pointer and length into caller memory, an object handle
// (IDR) or a file descriptor. The kernel validates every attribute against the
// method's schema and, with UVERBS_ATTR_F_MANDATORY set, fails the call with
// EPROTONOSUPPORT rather than ignore one it does not know. That is how a
// feature probe tells a missing method from a failed one.
const (
	ioctlHdrSize  = 24
	ioctlAttrSize = 16
	// maxAttrs bounds one call. The largest core methods (QP creation) take 15.
	maxAttrs = 24
)

// attrKind records how an attribute's data word is interpreted, so a call's
// results can be read back and a fake kernel in tests can decode the call.
type attrKind uint8

const (
	kindInline attrKind = iota // value held in the data word (len <= 8)
	kindPtrIn                  // data word points at len bytes the kernel reads
	kindPtrOut                 // data word points at len bytes the kernel writes
	kindIDR                    // data word holds an object handle (in, or out for NEW)
	kindFD                     // data word holds a file descriptor (in, or out for NEW)
)

type attr struct {
	id    uint16
	len   uint16
	flags uint16
	elem  uint8 // enum element id (UVERBS_ATTR_TYPE_ENUM_IN)
	kind  attrKind
	data  uint64
	// ptr keeps the memory behind a pointer attribute reachable, and, because
	// a command always lives on the heap (newCommand), forces that memory onto
	// the heap too, where the garbage collector never moves it.
	ptr unsafe.Pointer
}

// command is one RDMA_VERBS_IOCTL call being assembled. It is built by the
// typed fill methods below, sent with execute, and then read back with the
// out accessors. It is the only place that turns Go memory into the kernel's
// u64 pointers.
type command struct {
	object   uint16
	method   uint16
	driverID uint32
	// quick marks a command the kernel completes with CPU work alone,
	// waiting on no hardware, peer or I/O: creating and modifying the
	// objects of a software device (Context.quick). It is sent as a raw
	// system call. Everything else, destroys and memory registration
	// among them, may wait and goes through the runtime's syscall path,
	// which lets other goroutines have the P meanwhile.
	quick bool
	attrs [maxAttrs]attr
	n     int
	err   error
	// buf is the wire image sent to the kernel; after the call it holds the
	// kernel's updates (output flags, new handles and fds).
	buf [ioctlHdrSize + maxAttrs*ioctlAttrSize]byte
	// scratch holds the small request and response structs the pointer
	// attributes name (scratchOf): they come and go with the pooled
	// command instead of costing an allocation each.
	scratch [scratchWords]uint64
	used    int // words of scratch handed out
}

// scratchWords bounds scratchOf: the largest user, a QP modify request,
// is 120 bytes.
const scratchWords = 32

// scratchOf returns a zeroed T in c's scratch space, or a new one when the
// space is used up. T must hold no Go pointers: the collector does not
// look for them in scratch. The memory is c's: it must not be used after
// c's release.
func scratchOf[T any](c *command) *T {
	var zero T
	n := (int(unsafe.Sizeof(zero)) + 7) / 8
	if unsafe.Alignof(zero) > 8 || c.used+n > len(c.scratch) {
		return new(T)
	}
	p := (*T)(unsafe.Pointer(&c.scratch[c.used]))
	c.used += n
	*p = zero
	return p
}

// commands recycles commands: each is a kilobyte, most of what a
// connection's setup allocated (a heap profile of cmtime's server: 7 of
// 66 allocations and half the bytes per accepted connection).
var commands = sync.Pool{New: func() any { return new(command) }}

// newCommand returns an empty command for the method. The caller
// releases it once it has read the results.
func newCommand(object, method uint16) *command {
	c := commands.Get().(*command)
	c.object, c.method = object, method
	return c
}

// release returns c to the pool; c is not used after. It drops the
// references to caller memory, which the pool must not keep alive, and
// resets what the next command would otherwise inherit (encode rewrites
// buf).
func (c *command) release() {
	clear(c.attrs[:c.n])
	c.object, c.method, c.driverID, c.quick, c.n, c.err, c.used = 0, 0, 0, false, 0, nil, 0
	commands.Put(c)
}

func (c *command) next(id uint16) *attr {
	if c.n == maxAttrs {
		if c.err == nil {
			c.err = fmt.Errorf("uverbs: too many attributes for object %d method %d", c.object, c.method)
		}
		return &attr{}
	}
	a := &c.attrs[c.n]
	c.n++
	// Attributes default to mandatory, as in rdma-core: a kernel that does
	// not know one fails the call instead of silently ignoring it.
	*a = attr{id: id, flags: abi.UVERBS_ATTR_F_MANDATORY}
	return a
}

// optional clears the mandatory flag of the attribute added last.
func (c *command) optional() {
	if c.n > 0 {
		c.attrs[c.n-1].flags &^= abi.UVERBS_ATTR_F_MANDATORY
	}
}

// constIn adds an 8-byte inline value: UVERBS_ATTR_CONST_IN, u64 and flag
// attributes.
// The kernel reads the low bytes it expects, so the full 8 bytes are sent as
// rdma-core does.
func (c *command) constIn(id uint16, v uint64) { c.word(id, kindInline, 8, v) }

// u32In adds a 4-byte inline value, for attributes the kernel types as u32
// (UVERBS_ATTR_TYPE(u32)): their size must match exactly.
func (c *command) u32In(id uint16, v uint32) { c.word(id, kindInline, 4, uint64(v)) }

// word adds an attribute whose data word is the value itself: an inline
// value of n bytes, an object handle or a file descriptor. It returns the
// attribute's index, where the kernel leaves a new handle or descriptor.
func (c *command) word(id uint16, kind attrKind, n uint16, v uint64) int {
	a := c.next(id)
	a.kind, a.len, a.data = kind, n, v
	return c.n - 1
}

// ptrIn adds an input buffer. Buffers of up to 8 bytes travel inline, as the
// kernel expects; larger ones by pointer.
func (c *command) ptrIn(id uint16, p unsafe.Pointer, n int) {
	a := c.next(id)
	if !c.checkLen(n) {
		return
	}
	a.len = uint16(n)
	if n <= 8 {
		a.kind = kindInline
		var b [8]byte
		copy(b[:], unsafe.Slice((*byte)(p), n))
		a.data = binary.NativeEndian.Uint64(b[:])
		return
	}
	a.kind, a.ptr, a.data = kindPtrIn, p, uint64(uintptr(p))
}

// ptrOut adds an output buffer of n bytes that the kernel fills.
func (c *command) ptrOut(id uint16, p unsafe.Pointer, n int) {
	a := c.next(id)
	if !c.checkLen(n) {
		return
	}
	a.kind, a.len, a.ptr, a.data = kindPtrOut, uint16(n), p, uint64(uintptr(p))
}

// enumIn adds an input buffer selected by an enum element id.
func (c *command) enumIn(id uint16, elem uint8, p unsafe.Pointer, n int) {
	c.ptrIn(id, p, n)
	c.attrs[c.n-1].elem = elem
}

// idrIn names an existing kernel object by handle.
func (c *command) idrIn(id uint16, handle uint32) { c.word(id, kindIDR, 0, uint64(handle)) }

// idrNew asks for a new object; read its handle with outIDR after execute.
func (c *command) idrNew(id uint16) int { return c.word(id, kindIDR, 0, 0) }

// udata adds the driver's private request and response buffers
// (UVERBS_ATTR_UHW_IN and UVERBS_ATTR_UHW_OUT), when the provider has any.
func (c *command) udata(in, out []byte) {
	if len(in) > 0 {
		c.ptrIn(abi.UVERBS_ATTR_UHW_IN, unsafe.Pointer(&in[0]), len(in))
	}
	if len(out) > 0 {
		c.ptrOut(abi.UVERBS_ATTR_UHW_OUT, unsafe.Pointer(&out[0]), len(out))
	}
}

// fdIn passes an existing file descriptor.
func (c *command) fdIn(id uint16, fd int) { c.word(id, kindFD, 0, uint64(fd)) }

// fdNew asks for a new file descriptor; read it with outFD after execute.
func (c *command) fdNew(id uint16) int { return c.word(id, kindFD, 0, 0) }

func (c *command) checkLen(n int) bool {
	if n < 0 || n > 0xffff {
		if c.err == nil {
			c.err = fmt.Errorf("uverbs: attribute length %d out of range: %w", n, unix.EINVAL)
		}
		return false
	}
	return true
}

// encode writes the wire image into c.buf and returns its length.
func (c *command) encode() int {
	ne := binary.NativeEndian
	size := ioctlHdrSize + c.n*ioctlAttrSize
	b := c.buf[:size]
	clear(b)
	ne.PutUint16(b[0:], uint16(size))
	ne.PutUint16(b[2:], c.object)
	ne.PutUint16(b[4:], c.method)
	ne.PutUint16(b[6:], uint16(c.n))
	// reserved1 (u64) stays zero.
	ne.PutUint32(b[16:], c.driverID)
	// reserved2 (u32) stays zero.
	for i := 0; i < c.n; i++ {
		a := &c.attrs[i]
		o := ioctlHdrSize + i*ioctlAttrSize
		ne.PutUint16(b[o:], a.id)
		ne.PutUint16(b[o+2:], a.len)
		ne.PutUint16(b[o+4:], a.flags)
		b[o+6] = a.elem
		ne.PutUint64(b[o+8:], a.data)
	}
	return size
}

// execute sends the command on f. Kernel errors come back as *Error wrapping
// the errno.
func (c *command) execute(f cmdFile, op string) error {
	if c.err != nil {
		return c.err
	}
	c.encode()
	var err error
	if c.quick {
		err = f.quickIoctl(abi.RDMA_VERBS_IOCTL, unsafe.Pointer(&c.buf[0]))
	} else {
		err = f.ioctl(abi.RDMA_VERBS_IOCTL, unsafe.Pointer(&c.buf[0]))
	}
	// Keep every buffer the data words point at alive until the kernel is done.
	runtime.KeepAlive(c)
	if err != nil {
		return wrapErr(op, err)
	}
	return nil
}

// attrData returns the data word of attribute i as the kernel left it.
func (c *command) attrData(i int) uint64 {
	return binary.NativeEndian.Uint64(c.buf[ioctlHdrSize+i*ioctlAttrSize+8:])
}

func (c *command) outFD(i int) int     { return int(int32(c.attrData(i))) }
func (c *command) outIDR(i int) uint32 { return uint32(c.attrData(i)) }
