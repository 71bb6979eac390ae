package mlx5

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Queue memory. mlx5 queues live in user memory that the kernel pins when
// the object is created over it (ib_umem_get) and the device reads and
// writes by DMA. It must not move and must outlive the kernel object, so
// it comes from anonymous mappings outside the Go heap, page aligned, as
// rdma-core's mlx5_alloc_buf (posix_memalign to the page size) gives.

func allocQueueMem(n, pageSize int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, alignUp(n, pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	dontFork(mem)
	return mem, nil
}

func freeQueueMem(mem []byte) error {
	if mem == nil {
		return nil
	}
	return unix.Munmap(mem)
}

// queueBuf is what a CQ, QP or SRQ builder allocates before the create
// command names it: the queue's buffer, its doorbell record and, for a QP
// or SRQ under CQE version 1, a user index (else defaultUIDX).
type queueBuf struct {
	ctx  *Context
	mem  []byte
	db   unsafe.Pointer
	uidx uint32
}

// allocQueue allocates a queue buffer of size bytes and its doorbell
// record, and with withUIDX the user index the kernel wants under CQE
// version 1: it refuses the default one there, as the QP's CQEs (or an XRC
// SRQ's) carry it. what names the queue in errors.
func (c *Context) allocQueue(what string, size int, withUIDX bool) (queueBuf, error) {
	mem, err := allocQueueMem(size, c.pageSize)
	if err != nil {
		return queueBuf{}, fmt.Errorf("mlx5: %s buffer: %w", what, err)
	}
	db, err := c.db.alloc()
	if err != nil {
		freeQueueMem(mem)
		return queueBuf{}, fmt.Errorf("mlx5: %s doorbell record: %w", what, err)
	}
	q := queueBuf{ctx: c, mem: mem, db: db, uidx: defaultUIDX}
	if withUIDX && c.cqeVersion == cqeVersion1 {
		u, ok := c.uidx.alloc()
		if !ok {
			q.free()
			return queueBuf{}, fmt.Errorf("mlx5: no free user index for the %s: %w", what, unix.ENOMEM)
		}
		q.uidx = u
	}
	return q, nil
}

// free releases what allocQueue allocated; a second call does nothing.
func (q *queueBuf) free() {
	q.ctx.freeQueue(q.mem, q.db, q.uidx)
	q.mem, q.db, q.uidx = nil, nil, defaultUIDX
}

// freeQueue releases what allocQueue allocated for a builder or, at its
// Close, a CQ, QP or SRQ: the buffer, the doorbell record and the user
// index (defaultUIDX: none). It returns the unmap's error.
func (c *Context) freeQueue(mem []byte, db unsafe.Pointer, uidx uint32) error {
	if uidx != defaultUIDX {
		c.uidx.release(uidx)
	}
	c.db.free(db)
	return freeQueueMem(mem)
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// dbAllocator hands out doorbell records: cache-line-sized slots in shared
// pages (rdma-core's dbrec.c). The kernel maps a record's page once per
// context and counts its users, so records of many objects share a page.
type dbAllocator struct {
	mu       sync.Mutex
	line     int
	pageSize int
	pages    []*dbPage
}

type dbPage struct {
	mem  []byte
	used []bool
	n    int
}

// alloc returns a zeroed record.
func (a *dbAllocator) alloc() (unsafe.Pointer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pages {
		if rec := a.take(p); rec != nil {
			return rec, nil
		}
	}
	mem, err := allocQueueMem(a.pageSize, a.pageSize)
	if err != nil {
		return nil, err
	}
	p := &dbPage{mem: mem, used: make([]bool, a.pageSize/a.line)}
	a.pages = append(a.pages, p)
	return a.take(p), nil
}

// take returns a free record of page p, zeroed, or nil.
func (a *dbAllocator) take(p *dbPage) unsafe.Pointer {
	for i, u := range p.used {
		if !u {
			p.used[i] = true
			p.n++
			rec := unsafe.Pointer(&p.mem[i*a.line])
			clear(unsafe.Slice((*byte)(rec), a.line))
			return rec
		}
	}
	return nil
}

// free returns a record; a page with no records left is unmapped.
func (a *dbAllocator) free(rec unsafe.Pointer) {
	if rec == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range a.pages {
		base := uintptr(unsafe.Pointer(&p.mem[0]))
		if off := uintptr(rec) - base; uintptr(rec) >= base && off < uintptr(len(p.mem)) {
			p.used[int(off)/a.line] = false
			if p.n--; p.n == 0 {
				freeQueueMem(p.mem)
				a.pages = append(a.pages[:i], a.pages[i+1:]...)
			}
			return
		}
	}
}

// close unmaps every page; the context is going away.
func (a *dbAllocator) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pages {
		freeQueueMem(p.mem)
	}
	a.pages = nil
}
