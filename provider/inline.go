package provider

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/wr"
)

// SGLength returns the total length of an SGE list, or EINVAL when it does
// not fit the 32 bits a work request's length has: the device would
// otherwise send the sum modulo 2^32 and report success.
func SGLength(sges []wr.SGE) (uint32, error) {
	var n uint64
	for _, s := range sges {
		n += uint64(s.Length)
	}
	if n > math.MaxUint32 {
		return 0, errSGLength
	}
	return uint32(n), nil
}

// errSGLength is SGLength's error, made once: a call to build it would put
// SGLength past the inliner's budget, and the posting loops call it for
// every request.
var errSGLength = fmt.Errorf("SGE lengths sum past 2^32: %w", unix.EINVAL)

// ProbeInline makes sure the memory an inline send names can be read: the
// provider copies it in user space, from addresses the caller gave as
// plain numbers, which nothing else checks (the device checks the lkeys
// of other requests; inline data has none). A range that is not mapped
// gives EFAULT instead of a fault that would end the process. The probe
// reads one byte of each page of each element; data of an inline send is
// small, so that is a few reads.
func ProbeInline(sges []wr.SGE) (err error) {
	if len(sges) == 0 {
		return nil
	}
	old := debug.SetPanicOnFault(true)
	defer func() {
		if e := endRead(old, recover()); e != nil {
			err = e
		}
	}()
	var sink byte
	for i := range sges {
		s := &sges[i]
		if s.Length == 0 {
			continue
		}
		if s.Addr+uint64(s.Length) < s.Addr {
			return fmt.Errorf("inline SGE %d wraps around the address space: %w", i, unix.EFAULT)
		}
		const page = 4096
		for a := s.Addr; a < s.Addr+uint64(s.Length); a = (a + page) &^ (page - 1) {
			sink |= readByte(a)
		}
		sink |= readByte(s.Addr + uint64(s.Length) - 1)
	}
	// The reads must not be dropped; KeepAlive keeps them without a
	// shared variable, which posts probing at once would race on.
	runtime.KeepAlive(sink)
	return nil
}

// CopyInline copies the memory an inline send names into dst, which must
// have room for the SGEs' sum, and returns how many bytes it copied. It is
// ProbeInline and the copy in one pass: a range that cannot be read gives
// EFAULT, with dst perhaps written in part, and the caller publishes
// nothing. One pass also leaves no moment between the probe and the copy
// in which another goroutine could unmap the memory.
func CopyInline(dst unsafe.Pointer, sges []wr.SGE) (n int, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		if e := endRead(old, recover()); e != nil {
			n, err = 0, e
		}
	}()
	for i := range sges {
		s := &sges[i]
		if s.Length == 0 {
			continue
		}
		if s.Addr+uint64(s.Length) < s.Addr {
			return 0, fmt.Errorf("inline SGE %d wraps around the address space: %w", i, unix.EFAULT)
		}
		if s.Addr == 0 {
			// unsafe.Slice of nil would panic, and under checkptr
			// (-race) throw, before any read could fault.
			return 0, fmt.Errorf("inline SGE %d has a nil address: %w", i, unix.EFAULT)
		}
		src := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&s.Addr))), s.Length)
		n += copy(unsafe.Slice((*byte)(unsafe.Add(dst, n)), s.Length), src)
	}
	return n, nil
}

// endRead ends a read of caller-named memory under SetPanicOnFault: it
// restores the setting the read began with (old) and turns the fault's
// panic, r from the deferred function's recover, into EFAULT. A fault at
// a low address is the runtime's ordinary nil dereference panic; any other
// carries the address. A panic that is no fault goes on.
func endRead(old bool, r any) error {
	debug.SetPanicOnFault(old)
	if r == nil {
		return nil
	}
	if _, ok := r.(runtime.Error); !ok {
		panic(r)
	}
	return errNotReadable
}

var errNotReadable = fmt.Errorf("inline data is not readable memory: %w", unix.EFAULT)

// readByte reads the byte at a caller-given address. The address is not
// converted from a uintptr, which vet and checkptr would flag: it is memory
// outside the Go heap's knowledge, as a device sees it.
//
//go:noinline
func readByte(addr uint64) byte {
	return *(*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr)))
}
