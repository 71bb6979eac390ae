package mlx5

import (
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
)

// Dynamic UARs. A kernel that grants MLX5_LIB_CAP_DYN_UAR allocates no
// BlueFlame registers with the context (tot_bfregs 0); the provider
// allocates UARs itself with the driver method MLX5_IB_METHOD_UAR_OBJ_ALLOC,
// maps each at the mmap offset the kernel returns, and names it by its
// page id in the create commands: CQs by uar_page_index with
// MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, QPs by bfreg_index with
// MLX5_QP_FLAG_UAR_PAGE_INDEX. This follows rdma-core's mlx5_alloc_dyn_uar,
// mlx5_insert_dyn_uuars and mlx5_get_qp_uar:
//
//   - CQs arm through one non-cached UAR (rdma-core's singleton nc_uar);
//   - QPs ring write-combining (BlueFlame) UARs, each of whose registers
//     belongs to one QP until the registers of such dedicated UARs reach
//     the low-latency count asked for in the context request; after that
//     QPs share the registers of further UARs, up to the rest of the total
//     count, taking the least used and locking it, and finally share the
//     least used of those;
//   - without write combining (bf_reg_size 0) QPs use the non-cached UAR
//     too, with 8-byte doorbells.
//
// Unlike rdma-core, which keeps a UAR until the context closes, the
// provider destroys a UAR and unmaps it as soon as its last CQ or QP is
// gone, so that creating and destroying QPs does not pin UARs; those
// never used by a QP (shared UARs allocated ahead) go when the context
// closes.

// dynUAR is one UAR the provider allocated.
type dynUAR struct {
	handle uint32 // the kernel object, for MLX5_IB_METHOD_UAR_OBJ_DESTROY
	pageID uint32 // the hardware UAR index of its first UAR
	mem    []byte // the mapping: uarsPerPage UARs of 4 KiB
	nc     bool   // non-cached: CQ arming and doorbells without BlueFlame
	shared bool   // its registers are shared between QPs
	regs   []bfReg
	users  int // CQs and QPs using it
}

// getNC returns the context's non-cached UAR, allocating it for its first
// user, and counts the caller as a user. uarMu must be held.
func (c *Context) getNC() (*dynUAR, error) {
	if c.ncUAR == nil {
		u, err := c.allocUAR(true)
		if err != nil {
			return nil, err
		}
		// Its one register is for 8-byte doorbells: no BlueFlame halves,
		// and 8-byte stores need no lock (rdma-core's nc_uar->reg).
		u.regs = []bfReg{{reg: unsafe.Pointer(&u.mem[bfOffset]), uar: u, pageID: u.pageID}}
		c.ncUAR = u
	}
	c.ncUAR.users++
	return c.ncUAR, nil
}

// cqUAR returns the non-cached UAR a new CQ names and arms through.
func (c *Context) cqUAR() (*dynUAR, error) {
	c.uarMu.Lock()
	defer c.uarMu.Unlock()
	u, err := c.getNC()
	if err != nil {
		return nil, err
	}
	if u.pageID > math.MaxUint16 {
		// struct mlx5_ib_create_cq carries a 16-bit uar_page_index.
		c.putLocked(u, nil)
		return nil, fmt.Errorf("mlx5: UAR page id %#x does not fit a CQ's uar_page_index: %w", u.pageID, unix.EOVERFLOW)
	}
	return u, nil
}

// qpRegister picks a new QP's BlueFlame register as rdma-core's
// mlx5_get_qp_uar does, allocating a UAR when the policy above says so.
func (c *Context) qpRegister() (*bfReg, error) {
	c.uarMu.Lock()
	defer c.uarMu.Unlock()
	if c.bfRegSize == 0 {
		u, err := c.getNC()
		if err != nil {
			return nil, err
		}
		return &u.regs[0], nil
	}
	for len(c.dedFree) == 0 && c.dedRegs < c.lowLatUUARs {
		if _, err := c.allocBFUAR(false); err != nil {
			return nil, err
		}
	}
	if len(c.dedFree) > 0 {
		bf := c.dedFree[0]
		c.dedFree = c.dedFree[1:]
		bf.users++
		bf.uar.users++
		return bf, nil
	}
	if c.sharedRegs < c.totUUARs-c.lowLatUUARs {
		if _, err := c.allocBFUAR(true); err != nil {
			return nil, err
		}
	}
	var bf *bfReg
	for _, r := range c.shared {
		if bf == nil || r.users < bf.users {
			bf = r
		}
	}
	if bf == nil {
		return nil, fmt.Errorf("mlx5: no BlueFlame register to share: %w", unix.ENOMEM)
	}
	bf.users++
	bf.uar.users++
	return bf, nil
}

// allocBFUAR allocates a write-combining UAR and lists its registers as
// dedicated or shared ones (mlx5_insert_dyn_uuars): two per 4 KiB UAR,
// each of the UARs in the mapping named by its own page id.
func (c *Context) allocBFUAR(shared bool) (*dynUAR, error) {
	u, err := c.allocUAR(false)
	if err != nil {
		return nil, err
	}
	u.shared = shared
	n := int(c.uarsPerPage) * nonFPBfregsPerUAR
	u.regs = make([]bfReg, n)
	for j := range u.regs {
		bf := &u.regs[j]
		uar := j / nonFPBfregsPerUAR
		bf.reg = unsafe.Pointer(&u.mem[uar*adapterPageSize+bfOffset+j%nonFPBfregsPerUAR*int(c.bfRegSize)])
		bf.bufSize = uintptr(c.bfRegSize / 2)
		bf.uuarn = j
		bf.uar = u
		bf.pageID = u.pageID + uint32(uar)
		if shared {
			bf.mu = new(spinLock)
			c.shared = append(c.shared, bf)
		} else {
			c.dedFree = append(c.dedFree, bf)
		}
	}
	if shared {
		c.sharedRegs += uint32(n)
	} else {
		c.dedRegs += uint32(n)
	}
	return u, nil
}

// allocUAR allocates a UAR with MLX5_IB_METHOD_UAR_OBJ_ALLOC and maps it,
// as mlx5_alloc_dyn_uar does; on any failure nothing stays allocated.
func (c *Context) allocUAR(nc bool) (*dynUAR, error) {
	typ := uint64(abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF)
	if nc {
		typ = abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC
	}
	var off uint64
	var length, page uint32
	attrs := []provider.Attr{
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, Kind: provider.AttrIDRNew},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, Kind: provider.AttrConstIn, Value: typ},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, Kind: provider.AttrPtrOut, Out: bytesOf(&off)},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, Kind: provider.AttrPtrOut, Out: bytesOf(&length)},
		{ID: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, Kind: provider.AttrPtrOut, Out: bytesOf(&page)},
	}
	if err := c.k.Invoke(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, attrs); err != nil {
		return nil, fmt.Errorf("mlx5: allocating a UAR: %w", err)
	}
	u := &dynUAR{handle: uint32(attrs[0].Value), pageID: page, nc: nc}
	need := adapterPageSize
	if !nc {
		need *= int(c.uarsPerPage) // every UAR of the page carries registers
	}
	if int64(length) < int64(need) || off > math.MaxInt64 || off%uint64(c.pageSize) != 0 {
		err := fmt.Errorf("mlx5: kernel answered a UAR of %d bytes at mmap offset %#x: %w", length, off, unix.EPROTO)
		c.freeUAR(u)
		return nil, err
	}
	mem, err := c.k.Mmap(int64(off), int(length), unix.PROT_WRITE)
	if err != nil {
		c.freeUAR(u)
		return nil, fmt.Errorf("mlx5: mapping UAR page %#x: %w", page, err)
	}
	u.mem = mem
	if len(mem) < need {
		c.freeUAR(u)
		return nil, fmt.Errorf("mlx5: UAR page %#x mapped %d bytes: %w", page, len(mem), unix.EINVAL)
	}
	c.live[u] = struct{}{}
	return u, nil
}

// freeUAR unmaps a UAR and destroys it in the kernel (mlx5_free_uar).
func (c *Context) freeUAR(u *dynUAR) error {
	var err error
	if u.mem != nil {
		err = c.k.Munmap(u.mem)
		u.mem = nil
	}
	attrs := []provider.Attr{{ID: abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, Kind: provider.AttrIDR, Value: uint64(u.handle)}}
	if e := c.k.Invoke(abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_DESTROY, attrs); e != nil && err == nil {
		err = fmt.Errorf("mlx5: destroying UAR page %#x: %w", u.pageID, e)
	}
	delete(c.live, u)
	return err
}

// putUAR drops one user of a UAR (a CQ's, or a QP's register bf, which is
// nil for a CQ) and frees the UAR when it was the last.
func (c *Context) putUAR(u *dynUAR, bf *bfReg) error {
	c.uarMu.Lock()
	defer c.uarMu.Unlock()
	return c.putLocked(u, bf)
}

func (c *Context) putLocked(u *dynUAR, bf *bfReg) error {
	if bf != nil && !u.nc {
		bf.users--
	}
	u.users--
	if u.users > 0 {
		if bf != nil && !u.nc && !u.shared {
			c.dedFree = append(c.dedFree, bf) // as mlx5_put_qp_uar
		}
		return nil
	}
	switch {
	case u.nc:
		c.ncUAR = nil
	case u.shared:
		c.shared = dropRegs(c.shared, u)
		c.sharedRegs -= uint32(len(u.regs))
	default:
		c.dedFree = dropRegs(c.dedFree, u)
		c.dedRegs -= uint32(len(u.regs))
	}
	return c.freeUAR(u)
}

// dropRegs removes u's registers from a list.
func dropRegs(list []*bfReg, u *dynUAR) []*bfReg {
	out := list[:0]
	for _, r := range list {
		if r.uar != u {
			out = append(out, r)
		}
	}
	clear(list[len(out):])
	return out
}

// freeAllUARs frees every UAR still allocated, when the context closes.
func (c *Context) freeAllUARs() error {
	c.uarMu.Lock()
	defer c.uarMu.Unlock()
	var err error
	for u := range c.live {
		if e := c.freeUAR(u); e != nil && err == nil {
			err = e
		}
	}
	c.ncUAR, c.dedFree, c.shared = nil, nil, nil
	c.dedRegs, c.sharedRegs = 0, 0
	return err
}
