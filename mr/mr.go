// Package mr provides memory for RDMA: page-aligned buffers mapped outside
// the Go heap, and regions that pair such a buffer with its registration.
//
// Any memory can be registered (uverbs.PD.RegMR takes a []byte), but memory
// from this package has properties devices and peers like: it starts on a
// page boundary, is a whole number of pages, is never touched by the garbage
// collector, and stays valid until Free, however the Go program uses it.
package mr

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Memory is a page-aligned anonymous mapping.
type Memory struct {
	mu  sync.Mutex
	mem []byte // the whole mapping
	n   int    // the size asked for
}

// Alloc maps at least n bytes of zeroed, page-aligned memory.
func Alloc(n int) (*Memory, error) {
	if n <= 0 {
		return nil, fmt.Errorf("mr: alloc %d bytes: %w", n, unix.EINVAL)
	}
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mr: alloc %d bytes: %w", n, err)
	}
	return &Memory{mem: mem, n: n}, nil
}

// Bytes returns the n bytes asked for; nil after Free.
func (m *Memory) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil
	}
	return m.mem[:m.n]
}

// Free unmaps the memory. It is idempotent. Deregister any region over it
// first: the device may otherwise still write to the pages.
func (m *Memory) Free() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
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
		m.Free()
		return nil, err
	}
	return &Region{MR: r, mem: m}, nil
}

// Bytes returns the region's memory.
func (r *Region) Bytes() []byte { return r.mem.Bytes() }

// Close deregisters the region and frees its memory. It is idempotent.
func (r *Region) Close() error {
	if err := r.MR.Close(); err != nil {
		return err
	}
	return r.mem.Free()
}
