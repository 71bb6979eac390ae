// Package mr provides memory for RDMA: page-aligned buffers, and regions
// that pair such a buffer with its registration.
//
// Any memory can be registered (uverbs.PD.RegMR takes a []byte), but memory
// from this package has properties devices and peers like: it starts on a
// page boundary and is a whole number of pages.
//
// The memory is Go memory, so it follows Go's rules: it stays valid for as
// long as anything refers to it, a slice kept after Close included,
// and the device can reach it only while a registration covers it (a
// registration keeps it alive). Nothing a program does with this package's
// values can make an access fault or let a peer write into memory the
// runtime has reused. The garbage collector never moves it and does not
// scan it: it holds no pointers.
package mr

import (
	"fmt"
	"math"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Memory is page-aligned memory.
type Memory struct {
	mu  sync.Mutex
	mem []byte // whole pages
	n   int    // the size asked for
}

// Alloc allocates at least n bytes of zeroed, page-aligned memory. A size
// beyond the machine's memory is refused with ENOMEM rather than left to
// the runtime, which would end the process.
func Alloc(n int) (*Memory, error) {
	if n <= 0 {
		return nil, fmt.Errorf("mr: alloc %d bytes: %w", n, unix.EINVAL)
	}
	page := os.Getpagesize()
	if n > math.MaxInt-2*page || uint64(n) > physicalMemory() {
		return nil, fmt.Errorf("mr: alloc %d bytes: more than the machine has: %w", n, unix.ENOMEM)
	}
	size := (n + page - 1) / page * page
	// One page more than needed, so that a page boundary falls inside:
	// large Go allocations are aligned to the runtime's pages, which need
	// not be the system's.
	raw := make([]byte, size+page)
	off := (page - int(uintptr(unsafe.Pointer(&raw[0])))%page) % page
	return &Memory{mem: raw[off : off+size : off+size], n: n}, nil
}

// Bytes returns the n bytes asked for; nil after Close.
func (m *Memory) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil
	}
	return m.mem[:m.n]
}

// Close gives the memory back. It is idempotent. Slices obtained from Bytes
// stay valid (the runtime frees the memory once nothing refers to it), and
// so does a registration over it, which keeps it alive until it is closed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mem = nil
	return nil
}

// Region is page-aligned memory registered with a protection domain.
type Region struct {
	*uverbs.MR
	mem *Memory
}

// New allocates n bytes and registers them with pd for access.
func New(pd *uverbs.PD, n int, access wr.Access) (*Region, error) {
	m, err := Alloc(n)
	if err != nil {
		return nil, err
	}
	r, err := pd.RegMR(m.Bytes(), access)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &Region{MR: r, mem: m}, nil
}

// Close deregisters the region and frees its memory. It is idempotent.
func (r *Region) Close() error {
	if err := r.MR.Close(); err != nil {
		return err
	}
	return r.mem.Close()
}
