// Package mlx5 is the data path of NVIDIA (Mellanox) ConnectX-4 and later
// adapters, the kernel's mlx5_ib driver.
//
// Unlike rxe, mlx5 keeps its queues in user memory: the provider allocates
// each queue buffer and doorbell record, passes their addresses in the
// create command's driver data (struct mlx5_ib_create_cq, _qp, _srq), and
// the kernel pins them for the device. Work requests become work-queue
// entries (WQEs) of 16-byte segments in 64-byte basic blocks; the
// provider publishes them by storing the WQE counter in the QP's doorbell
// record and then rings the doorbell: a 64-bit store of the WQE's first
// eight bytes to a BlueFlame register in a UAR page it maps from the
// command file, or, for one small WQE, the whole WQE copied there
// ("BlueFlame"), which saves the device a read. Completions are 64-byte
// CQEs the device writes into the CQ buffer with an owner bit that flips
// on every pass over the ring.
//
// Everything follows rdma-core's providers/mlx5 (v44): the same WQE
// layouts, queue sizes, UAR and BlueFlame register use, doorbell records
// and barriers. The segment encodings are checked byte for byte against
// vectors built with rdma-core's mlx5dv.h (hack/mlx5gen), and the whole
// data path runs against an in-memory model of the device in the tests.
// None of it has run on a ConnectX adapter yet: see docs/mlx5.md.
//
// Programs need not import this package: package uverbs serves mlx5 devices
// with it. Its Driver is exported for a program's own provider that wraps
// it (uverbs.RegisterProvider); the other exported types are what its
// builders make, used through package provider's interfaces.
package mlx5

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
)

// Driver is the mlx5 provider.
type Driver struct{}

// Name returns "mlx5".
func (Driver) Name() string { return "mlx5" }

// FormatFWVer prints the firmware version as rdma-core's mlx5 provider
// does: major.minor.subminor with four subminor digits.
func (Driver) FormatFWVer(raw uint64) string {
	return fmt.Sprintf("%d.%d.%04d", (raw>>32)&0xffff, (raw>>16)&0xffff, raw&0xffff)
}

// NewContext returns the builder of an mlx5 context.
func (Driver) NewContext(k provider.Kernel) (provider.Builder[provider.Context], error) {
	return newContextBuilder(k, unix.Getpagesize()), nil
}

// bytesOf views a struct as the bytes the kernel reads or writes.
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// ctxBuilder carries struct mlx5_ib_alloc_ucontext_req_v2 and its response.
type ctxBuilder struct {
	k        provider.Kernel
	pageSize int
	totUUARs uint32
	lowLat   uint32
	req      abi.Mlx5IbAllocUcontextReqV2
	resp     abi.Mlx5IbAllocUcontextResp
}

// newContextBuilder asks for rdma-core's default BlueFlame registers
// (get_total_uuars, get_num_low_lat_uuars): 16, or one UAR page's worth
// if pages are larger, of which 4 (or more, so that at most 12 are
// shared) are low-latency ones a single QP owns.
//
// lib_caps asks for 4K UARs and dynamic UARs, as rdma-core does. A kernel
// that grants dynamic UARs answers tot_bfregs 0 and the provider
// allocates UARs itself (uar.go); the same counts then bound its
// dedicated and shared registers. An older kernel allocates the static
// registers up front and assigns one to each QP. max_cqe_version is 1, as
// rdma-core asks: the kernel answers the smaller of that and what the
// device does, and the provider handles both (see decodeCQE).
func newContextBuilder(k provider.Kernel, pageSize int) *ctxBuilder {
	tot := uint32(max(defTotalUUARs, pageSize/adapterPageSize*nonFPBfregsPerUAR))
	tot = uint32(alignUp(int(tot), nonFPBfregsPerUAR))
	low := max(uint32(defLowLatencyUUARs), tot-medBfregsThreshold)
	b := &ctxBuilder{k: k, pageSize: pageSize, totUUARs: tot, lowLat: low}
	b.req.Total_num_bfregs = tot
	b.req.Num_low_latency_bfregs = low
	b.req.Max_cqe_version = cqeVersion1
	b.req.Lib_caps = abi.MLX5_LIB_CAP_4K_UAR | abi.MLX5_LIB_CAP_DYN_UAR
	return b
}

func (b *ctxBuilder) Udata() (in, out []byte) { return bytesOf(&b.req), bytesOf(&b.resp) }
func (b *ctxBuilder) Abort()                  {}

func (b *ctxBuilder) Finish(provider.Created) (provider.Context, error) {
	c, err := newContext(b.k, b.pageSize, &b.resp, b.totUUARs, b.lowLat)
	if err != nil {
		return nil, err
	}
	c.mapClock(&b.resp)
	return c, nil
}

// bfReg is one BlueFlame register (struct mlx5_bf): half a BlueFlame
// buffer pair in a UAR, written alternately so that one doorbell's
// write-combined copy never merges with the next.
type bfReg struct {
	reg     unsafe.Pointer // the pair
	mu      *spinLock      // nil when one QP owns the register (or it is register 0)
	offset  uintptr        // which half the next doorbell uses
	bufSize uintptr        // bytes in a half; 0: no BlueFlame (register 0, or no write combining)
	// uuarn is the kernel's index of a static register; for a register
	// of a dynamic UAR, its index in the UAR's mapping.
	uuarn int
	// For a register of a dynamic UAR: the UAR, the page id QPs name it
	// by, and how many QPs use it (the least used shared one is chosen).
	uar    *dynUAR
	pageID uint32
	users  int
}

// Context is the mlx5 state of one device context: its UAR pages and
// BlueFlame registers, doorbell-record pages, and the QP and SRQ numbers
// its CQs resolve.
type Context struct {
	k        provider.Kernel
	pageSize int
	lim      limits
	// From the context response. cqeVersion 1: CQEs name QPs by the user
	// index the provider gave them (srqn_uidx), not by QP number.
	cqeVersion  uint8
	bfRegSize   uint32
	totUUARs    uint32
	lowLatUUARs uint32
	uarsPerPage uint32
	ece         bool
	// cqeSize is the CQE size of new CQs: 64, or 128 with MLX5_CQE_SIZE=128;
	// anything else refuses CQ creation, as in rdma-core.
	cqeSize int
	// preferBF copies every single small WQE to the BlueFlame register,
	// inline or not (rdma-core's MLX5_POST_SEND_PREFER_BF default).
	preferBF bool

	uars [][]byte // the mapped UAR pages, by context UAR page index
	bfs  []bfReg  // by BlueFlame register index, as the kernel numbers them
	cqDB unsafe.Pointer
	// dyn: the kernel granted dynamic UARs (tot_bfregs 0); the provider
	// allocates them (uar.go) and uars, bfs and cqDB stay empty.
	dyn        bool
	uarMu      sync.Mutex
	live       map[*dynUAR]struct{} // every UAR allocated and not yet freed
	ncUAR      *dynUAR              // the non-cached UAR, while it has users
	dedFree    []*bfReg             // registers of dedicated UARs no QP uses
	shared     []*bfReg             // registers of shared UARs
	dedRegs    uint32               // registers of the dedicated UARs allocated
	sharedRegs uint32               // registers of the shared UARs allocated
	db         dbAllocator
	t          tables
	uidx       uidxAllocator
	cqMu       sync.Mutex
	cqs        map[*CQ]struct{}
	clock      clock // the device's clock, where the kernel maps it
	closed     atomic.Bool
	close      sync.Once
}

// newContext makes the context from the kernel's answer. tot and lowLat
// are the register counts the request asked for.
func newContext(k provider.Kernel, pageSize int, r *abi.Mlx5IbAllocUcontextResp, tot, lowLat uint32) (*Context, error) {
	if r.Cqe_version > cqeVersion1 {
		return nil, fmt.Errorf("mlx5: kernel chose CQE version %d, asked for at most %d: %w", r.Cqe_version, cqeVersion1, unix.EPROTO)
	}
	c := &Context{
		k:        k,
		pageSize: pageSize,
		lim: limits{
			maxSQDescSz:  uint32(r.Max_sq_desc_sz),
			maxRQDescSz:  uint32(r.Max_rq_desc_sz),
			maxSendWQEBB: r.Max_send_wqebb,
			maxRecvWR:    r.Max_recv_wr,
			maxSRQRecvWR: r.Max_srq_recv_wr,
		},
		cqeVersion:  r.Cqe_version,
		bfRegSize:   r.Bf_reg_size,
		totUUARs:    r.Tot_bfregs,
		lowLatUUARs: lowLat,
		uarsPerPage: r.Num_uars_per_page,
		ece:         r.Comp_mask&abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE != 0,
		preferBF:    true,
		cqeSize:     cqeSizeFromEnv(),
		cqs:         map[*CQ]struct{}{},
	}
	if r.Log_uar_size == 0 && r.Num_uars_per_page == 0 { // kernels before 4K UARs
		c.uarsPerPage = 1
	}
	line := int(r.Cache_line_size)
	if line <= 0 || line > pageSize || pageSize%line != 0 {
		line = defaultCacheLineSize
	}
	c.db = dbAllocator{line: line, pageSize: pageSize}

	if r.Tot_bfregs == 0 {
		// Dynamic UARs (mlx5_set_context with tot_bfregs 0): the requested
		// counts bound the dedicated and shared registers.
		c.dyn = true
		c.totUUARs = tot
		c.live = map[*dynUAR]struct{}{}
		if c.uarsPerPage == 0 || int(c.uarsPerPage)*adapterPageSize > pageSize ||
			uintptr(bfOffset)+nonFPBfregsPerUAR*uintptr(c.bfRegSize) > adapterPageSize || lowLat > tot {
			return nil, fmt.Errorf("mlx5: unusable dynamic UAR layout (%d UARs per page, %d-byte registers): %w",
				c.uarsPerPage, c.bfRegSize, unix.EPROTO)
		}
		return c, nil
	}
	perPage := c.uarsPerPage * nonFPBfregsPerUAR
	if c.uarsPerPage == 0 || c.totUUARs%perPage != 0 || c.totUUARs/perPage > maxUARs ||
		int(c.uarsPerPage)*adapterPageSize > pageSize || uintptr(bfOffset)+bfregsPerUAR*uintptr(c.bfRegSize) > adapterPageSize {
		return nil, fmt.Errorf("mlx5: unusable UAR layout (%d registers, %d UARs per page, %d-byte registers): %w",
			c.totUUARs, c.uarsPerPage, c.bfRegSize, unix.EPROTO)
	}
	pages := int(c.totUUARs / perPage)
	c.bfs = make([]bfReg, int(c.totUUARs)/nonFPBfregsPerUAR*bfregsPerUAR)
	for i := 0; i < pages; i++ {
		uar, err := k.Mmap(uarMmapOffset(i, pageSize), pageSize, unix.PROT_WRITE)
		if err != nil {
			c.unmapUARs()
			return nil, fmt.Errorf("mlx5: mapping UAR page %d: %w", i, err)
		}
		if len(uar) < pageSize {
			k.Munmap(uar)
			c.unmapUARs()
			return nil, fmt.Errorf("mlx5: UAR page %d mapped %d bytes: %w", i, len(uar), unix.EINVAL)
		}
		c.uars = append(c.uars, uar)
		for j := 0; j < int(c.uarsPerPage); j++ {
			for kk := 0; kk < bfregsPerUAR; kk++ {
				bfi := (i*int(c.uarsPerPage)+j)*bfregsPerUAR + kk
				bf := &c.bfs[bfi]
				bf.reg = unsafe.Pointer(&uar[adapterPageSize*j+bfOffset+kk*int(c.bfRegSize)])
				bf.uuarn = bfi
				if bfi != 0 {
					bf.bufSize = uintptr(c.bfRegSize / 2)
				}
				if c.needLock(bfi) {
					bf.mu = new(spinLock)
				}
			}
		}
	}
	// CQ doorbells (arming) go to the first UAR, which is the one the
	// kernel gives every CQ of a context without dynamic UARs.
	c.cqDB = unsafe.Pointer(&c.uars[0][cqDoorbellOffset])
	return c, nil
}

// cqeSizeFromEnv reads MLX5_CQE_SIZE as rdma-core's get_cqe_size does: 64
// when unset, else the number given (valid: 64 or 128).
func cqeSizeFromEnv() int {
	v, ok := os.LookupEnv("MLX5_CQE_SIZE")
	if !ok {
		return cqe64Size
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0 // refused at CQ creation
	}
	return n
}

// uarMmapOffset is where the kernel maps UAR page idx of the context
// (get_uar_mmap_offset with MLX5_MMAP_GET_REGULAR_PAGES_CMD): the command
// in bits 8..15 and the index in bits 0..7 of the page offset.
func uarMmapOffset(idx, pageSize int) int64 {
	return int64(mmapRegularPagesCmd<<mmapCmdShift|idx) * int64(pageSize)
}

// needLock is rdma-core's need_uuar_lock: register 0 (64-bit doorbells
// only) and the low-latency registers, which the kernel gives to one QP
// each, are written without a lock; the medium ones are shared.
func (c *Context) needLock(uuarn int) bool {
	if uuarn == 0 {
		return false
	}
	i := uuarn/2 + uuarn%2
	return i < int(c.totUUARs-c.lowLatUUARs)
}

func (c *Context) unmapUARs() {
	for _, u := range c.uars {
		c.k.Munmap(u)
	}
	c.uars = nil
}

// Close unmaps the UAR pages (destroying the dynamic ones) and frees the
// doorbell pages. The core closes every object first.
func (c *Context) Close() error {
	var err error
	c.close.Do(func() {
		c.closed.Store(true)
		err = c.unmapClock()
		if c.dyn {
			if e := c.freeAllUARs(); e != nil && err == nil {
				err = e
			}
		}
		for _, u := range c.uars {
			if e := c.k.Munmap(u); e != nil && err == nil {
				err = e
			}
		}
		c.uars = nil
		c.db.close()
	})
	return err
}

var errClosed = errors.New("mlx5: object closed")

// The provider's objects implement the core's interfaces, the optional
// ones included (docs/providers.md lists which provider has which).
var (
	_ provider.Driver         = Driver{}
	_ provider.Context        = (*Context)(nil)
	_ provider.CQ             = (*CQ)(nil)
	_ provider.QP             = (*QP)(nil)
	_ provider.SRQ            = (*SRQ)(nil)
	_ provider.AH             = (*AH)(nil)
	_ provider.SingleThreader = (*QP)(nil)
	_ provider.SingleThreader = (*CQ)(nil)
	_ provider.CQExContext    = (*Context)(nil)
	_ provider.Clock          = (*Context)(nil)
)
