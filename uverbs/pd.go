package uverbs

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// PD is a protection domain (struct ibv_pd): memory regions, queue pairs and
// address handles used together must belong to the same one.
type PD struct {
	*object
	// ahMu orders UD posts against the destruction of the PD's address
	// handles: a post reads an AH's number while holding it shared, so an
	// AH number the kernel has given to a newer AH is never posted.
	ahMu sync.RWMutex
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	resp, err := writeCmd[abi.IbUverbsAllocPdResp](c, abi.IB_USER_VERBS_CMD_ALLOC_PD, new(abi.IbUverbsAllocPd), "alloc PD")
	if err != nil {
		return nil, err
	}
	pd := &PD{object: newObject(c, kindPD, resp.Pd_handle)}
	track(pd, pd.object)
	return pd, nil
}

// Context returns the context the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Close deallocates the PD (ibv_dealloc_pd). The kernel refuses while
// objects still use it (EBUSY). A PD dropped without Close is deallocated
// once it is unreachable and every object made on it is gone.
func (pd *PD) Close() error {
	if pd == nil {
		return errNil
	}
	return pd.close()
}

// pdObject is pd's object, or nil for a nil PD.
func (pd *PD) pdObject() *object {
	if pd == nil {
		return nil
	}
	return pd.object
}

// MR is a registered memory region (struct ibv_mr). It keeps the memory it
// covers reachable until Close, so Go memory registered with RegMR cannot be
// freed while the device may still access it.
type MR struct {
	*object
	pd         *PD
	buf        []byte // holding it keeps the memory alive: Go's heap never moves
	addr       uint64 // the address SGEs and peers name: buf's, or a dma-buf MR's iova
	lkey, rkey uint32
}

// RegMR registers buf with the device (ibv_reg_mr) with the given access.
// buf may be Go memory or memory mapped by the caller (for example with
// mr.Alloc, which gives page-aligned memory). Remote write or atomic access
// requires LocalWrite as well, as in libibverbs.
//
// With wr.OnDemand the region is paged in as the device touches it
// instead of pinned (see AdviseMR); a device without on-demand paging
// refuses it with an error matching errors.ErrUnsupported.
//
// An MR dropped without Close is deregistered once it is unreachable, and
// the memory stays allocated until then: a peer holding the old rkey can
// never reach memory the Go runtime has given to something else.
func (pd *PD) RegMR(buf []byte, access wr.Access) (*MR, error) {
	if pd == nil {
		return nil, &Error{Op: "reg MR", Err: fmt.Errorf("PD: %w", errNil)}
	}
	if len(buf) == 0 {
		return nil, &Error{Op: "reg MR", Err: fmt.Errorf("empty buffer: %w", unix.EINVAL)}
	}
	if err := checkRegAccess(access); err != nil {
		return nil, &Error{Op: "reg MR", Err: err}
	}
	if access&wr.OnDemand != 0 {
		// Linux 6.1 refuses ODP on a device without it with EINVAL,
		// 6.12 with EOPNOTSUPP: ask the device first, so that the answer
		// is one a program can probe for.
		if err := pd.ctx.requireODP(ODPSupport); err != nil {
			return nil, &Error{Op: "reg MR", Err: err}
		}
	}
	if err := pd.use(); err != nil {
		return nil, &Error{Op: "reg MR", Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	// Storing buf in the heap-allocated MR also moves a would-be stack
	// array to the heap, where the garbage collector never moves it.
	m := &MR{pd: pd, buf: buf}
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	req := &abi.IbUverbsRegMr{
		Start:        addr,
		Length:       uint64(len(buf)),
		Hca_va:       addr,
		Pd_handle:    pd.handle,
		Access_flags: uint32(access),
	}
	resp, err := writeCmd[abi.IbUverbsRegMrResp](pd.ctx, abi.IB_USER_VERBS_CMD_REG_MR, req, "reg MR")
	if err != nil {
		return nil, err
	}
	m.object = newObject(pd.ctx, kindMR, resp.Mr_handle, pd)
	m.mem = buf
	m.addr = addr
	m.lkey, m.rkey = resp.Lkey, resp.Rkey
	track(m, m.object)
	return m, nil
}

// checkRegAccess refuses what libibverbs refuses of every registration:
// remote write or atomic access without LocalWrite.
func checkRegAccess(access wr.Access) error {
	if access&(wr.RemoteWrite|wr.RemoteAtomic) != 0 && access&wr.LocalWrite == 0 {
		return fmt.Errorf("remote write or atomic access needs LocalWrite: %w", unix.EINVAL)
	}
	return nil
}

// Bytes returns the registered memory. It stays valid after Close. A
// dma-buf region (RegDMABufMR) has none in this process: nil.
func (m *MR) Bytes() []byte { return m.buf }

// Addr returns the address of the region's first byte, as SGEs and remote
// peers name it: the memory's address, or a dma-buf region's iova.
func (m *MR) Addr() uint64 { return m.addr }

// Remote returns the region as a peer names it in RDMA reads, writes and
// atomics: its address and remote key.
func (m *MR) Remote() wr.Remote { return wr.Remote{Addr: m.Addr(), RKey: m.rkey} }

// LKey returns the region's local key, which SGEs name it by.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the region's remote key, which peers' RDMA operations name
// it by (Remote gives it with the address).
func (m *MR) RKey() uint32 { return m.rkey }

// SGE returns a scatter-gather element for buf[off:off+n].
func (m *MR) SGE(off, n int) wr.SGE {
	return wr.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// Close deregisters the region (ibv_dereg_mr). Work requests still using it
// then fail with protection errors in their completions; the memory itself
// stays valid for as long as the caller holds it.
func (m *MR) Close() error {
	if m == nil {
		return errNil
	}
	return m.close()
}
