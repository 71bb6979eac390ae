package mlx5

// TEST ONLY. hca is an in-memory model of a ConnectX adapter and of the
// kernel's mlx5_ib driver, so the provider's data path can run end to end
// without hardware. It is not an emulator of the real device: it follows
// the PRM rules the provider relies on, and checks them, and nothing else.
//
// As the kernel it answers the create commands: it reads the provider's
// driver data (struct mlx5_ib_create_cq/_qp/_srq, the context request),
// checks it as mlx5_ib does, assigns numbers and BlueFlame registers, and
// writes the driver response. By default it grants dynamic UARs, as
// kernels with the UAR object do: it answers MLX5_IB_METHOD_UAR_OBJ_ALLOC and
// _DESTROY (provider.Kernel's Invoke) and requires CQs and QPs to name a
// live UAR by page id; with modelStaticUAR it allocates static registers
// as older kernels do. It serves the mmap of UAR pages from plain memory
// it keeps, and checks that every dynamic UAR is unmapped and destroyed
// by the time the context closes.
//
// As the device it reacts to doorbells: it reads a QP's send counter from
// its doorbell record and consumes the WQEs up to it from the send queue
// buffer (control segment's WQE index, QP number and ds count; segments
// across the end of the ring), checks the doorbell the provider wrote to
// the QP's BlueFlame register (the WQE's first 8 bytes, or the whole WQE
// copied by BlueFlame, in alternating halves), moves data between memory
// regions the test registered with it, takes receive WQEs from receive
// queues and SRQs (up to their doorbell counters), and writes CQEs with
// the owner bit of the pass, checking the consumer index in the CQ's
// doorbell record so it never overruns the ring. Arming through the UAR is
// recorded and fires one event.
//
// Atomics treat remote memory as big-endian 64-bit words, which is the
// model's choice, not a statement about the hardware.

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

const (
	modelBfRegSize   = 512
	modelVendorSynd  = 0x32
	modelPoison      = 0xd5
	modelMaxSQDesc   = 512
	modelMaxRQDesc   = 512
	modelMaxWQEBB    = 1 << 16
	modelMaxRecvWR   = 1 << 15
	modelMaxSRQWR    = 1 << 15
	grhSize          = 40
	modelUDQKeyCheck = true
)

type hca struct {
	t        testing.TB
	mu       sync.Mutex
	pageSize int
	uars     map[int64][]byte // UAR pages by mmap offset
	mmaps    []int64          // offsets asked for, in order
	munmaps  int
	totBf    uint32
	lowLat   uint32
	bfCount  []int // QPs per BlueFlame register (kernel numbering)
	bfHalf   map[int]uintptr
	cqeVer   uint8
	oldCQE   bool // a device of CQE version 0 only
	ece      bool
	noWC     bool              // answer bf_reg_size 0: no BlueFlame
	dyn      bool              // grant dynamic UARs (tot_bfregs 0)
	dynUARs  map[uint32]*hwUAR // by handle, destroyed ones included
	nextPage uint32
	failUAR  int  // refuse the next UAR allocations
	failMmap bool // refuse mappings of dynamic UARs
	uarCalls []string
	nextNum  uint32
	cqs      map[uint32]*hwCQ
	qps      map[uint32]*hwQP
	srqs     map[uint32]*hwSRQ
	mrs      map[uint32]*hwMR
	nextKey  uint32
	doorbell []dbRecord // every doorbell seen
	events   []uint32   // CQNs of completion events raised
	// clock: the kernel offers the core clock and clock info pages.
	clock     bool
	clockPage []byte  // the core clock register's page
	clockInfo []byte  // struct mlx5_ib_clock_info's page
	clockMaps []int64 // the offsets of the clock pages mapped
	cycles    uint64  // the device's clock, which every CQE carries
}

// modelCoreClockOffset is where the model's core clock register sits in
// its BAR: the kernel reports it, and the provider takes its offset in
// the page.
const modelCoreClockOffset = 0x1f3000 + 0x7d0

// modelCycleStep is how far the model's clock moves between two CQEs.
const modelCycleStep = 0x10001

// mmapClock is the kernel's mapping of the two clock pages
// (mlx5_ib_mmap's MLX5_IB_MMAP_CORE_CLOCK and MLX5_IB_MMAP_CLOCK_INFO):
// one page, read-only (a writable mapping fails with EPERM), the clock
// info only in its version 1 (index 0).
func (h *hca) mmapClock(cmd, idx int64, length, prot int) ([]byte, error) {
	if !h.clock {
		return nil, unix.EOPNOTSUPP
	}
	if length != h.pageSize {
		return nil, unix.EINVAL
	}
	if prot&(unix.PROT_WRITE|unix.PROT_EXEC) != 0 {
		return nil, unix.EPERM
	}
	page := func(p *[]byte) ([]byte, error) {
		if *p == nil {
			mem, err := unix.Mmap(-1, 0, h.pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return nil, err
			}
			*p = mem
		}
		return *p, nil
	}
	switch {
	case cmd == abi.MLX5_IB_MMAP_CORE_CLOCK:
		return page(&h.clockPage)
	case cmd == abi.MLX5_IB_MMAP_CLOCK_INFO && idx == abi.MLX5_IB_CLOCK_INFO_V1:
		return page(&h.clockInfo)
	}
	return nil, unix.EINVAL
}

// clockMmaps returns the offsets of the clock pages the context mapped.
func (h *hca) clockMmaps() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.clockMaps...)
}

// setCoreClock makes the core clock register read v: big-endian, the
// high word first, at the offset the context response named.
func (h *hca) setCoreClock(v uint64) {
	putBE64(unsafe.Pointer(&h.clockPage[modelCoreClockOffset%h.pageSize]), v)
}

// setClockInfo writes the clock info page as the kernel's
// mlx5_update_clock_info_page does, ending with sign.
func (h *hca) setClockInfo(ci clockInfo, sign uint32) {
	p := (*abi.Mlx5IbClockInfo)(unsafe.Pointer(&h.clockInfo[0]))
	atomic.StoreUint32(&p.Sign, abi.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
	writeClockInfo(p, ci)
	atomic.StoreUint32(&p.Sign, sign)
}

// dbRecord is one doorbell the model read from a BlueFlame register.
type dbRecord struct {
	qpn       uint32
	blueFlame bool // the whole WQE was copied
	bytes     int  // bytes written to the register
	half      uintptr
}

// modelOldCQE makes newHCA model a device of CQE version 0 only; the
// variant tests set it to run the end-to-end tests on that path too.
var modelOldCQE bool

// modelStaticUAR makes newHCA model a kernel without dynamic UARs, which
// allocates static BlueFlame registers with the context.
var modelStaticUAR bool

// hwUAR is a UAR the model allocated through MLX5_IB_METHOD_UAR_OBJ_ALLOC.
type hwUAR struct {
	handle    uint32
	pageID    uint32
	nc        bool
	off       int64
	mem       []byte
	mapped    bool
	destroyed bool
}

func newHCA(t testing.TB) *hca {
	return &hca{oldCQE: modelOldCQE, dyn: !modelStaticUAR, dynUARs: map[uint32]*hwUAR{}, nextPage: 0x40, t: t, pageSize: unix.Getpagesize(), uars: map[int64][]byte{}, bfHalf: map[int]uintptr{},
		cqs: map[uint32]*hwCQ{}, qps: map[uint32]*hwQP{}, srqs: map[uint32]*hwSRQ{}, mrs: map[uint32]*hwMR{},
		nextNum: 0x100, nextKey: 0x1000}
}

// provider.Kernel

func (h *hca) Mmap(offset int64, length int, prot int) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mmaps = append(h.mmaps, offset)
	if pg := offset / int64(h.pageSize); offset%int64(h.pageSize) == 0 {
		if cmd := (pg >> mmapCmdShift) & 0xff; cmd == abi.MLX5_IB_MMAP_CORE_CLOCK || cmd == abi.MLX5_IB_MMAP_CLOCK_INFO {
			mem, err := h.mmapClock(cmd, pg&0xff, length, prot)
			if err == nil {
				h.clockMaps = append(h.clockMaps, offset)
			}
			return mem, err
		}
	}
	if prot&unix.PROT_WRITE == 0 || length != h.pageSize || offset%int64(h.pageSize) != 0 {
		return nil, unix.EINVAL
	}
	if h.dyn {
		// uar_mmap refuses the static offsets in this mode; dynamic UARs
		// map at the offset their allocation returned, once.
		for _, u := range h.dynUARs {
			if u.off == offset && !u.destroyed && !u.mapped {
				if h.failMmap {
					return nil, unix.ENOMEM
				}
				u.mapped = true
				return u.mem, nil
			}
		}
		return nil, unix.EINVAL
	}
	pg := offset / int64(h.pageSize)
	cmd, idx := (pg>>mmapCmdShift)&0xff, pg&0xff
	if cmd != mmapRegularPagesCmd || uint32(idx) >= h.totBf/nonFPBfregsPerUAR {
		return nil, unix.EINVAL // uar_mmap: index past the static UARs
	}
	mem, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	for i := range mem {
		mem[i] = modelPoison
	}
	h.uars[offset] = mem
	return mem, nil
}

func (h *hca) Munmap(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.munmaps++
	for _, u := range h.dynUARs {
		if u.mapped && &u.mem[0] == &b[0] {
			if len(b) != len(u.mem) {
				h.t.Errorf("UAR page %#x: unmapped %d of its %d bytes", u.pageID, len(b), len(u.mem))
			}
			u.mapped = false
		}
	}
	return nil // the model keeps reading its pages
}

// Invoke is the kernel's MLX5_IB_OBJECT_UAR methods: UAR_OBJ_ALLOC
// (alloc_uar_entry: a UAR of one system page, a page id, an mmap offset)
// and UAR_OBJ_DESTROY. It checks the attributes as the method's schema
// does: every one present, of its type and size.
func (h *hca) Invoke(object, method uint16, attrs []provider.Attr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if object != abi.MLX5_IB_OBJECT_UAR {
		h.t.Errorf("driver method %#x of object %#x", method, object)
		return unix.EPROTONOSUPPORT
	}
	if !h.dyn {
		h.t.Error("UAR allocated on a context with static registers")
	}
	switch method {
	case abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC:
		want := []struct {
			id   uint16
			kind provider.AttrKind
			n    int
		}{
			{abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, provider.AttrIDRNew, 0},
			{abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, provider.AttrConstIn, 0},
			{abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, provider.AttrPtrOut, 8},
			{abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, provider.AttrPtrOut, 4},
			{abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, provider.AttrPtrOut, 4},
		}
		if len(attrs) != len(want) {
			h.t.Errorf("UAR_OBJ_ALLOC with %d attributes", len(attrs))
			return unix.EINVAL
		}
		for i, w := range want {
			if a := attrs[i]; a.ID != w.id || a.Kind != w.kind || len(a.Out) != w.n {
				h.t.Errorf("UAR_OBJ_ALLOC attribute %d: %+v", i, a)
				return unix.EINVAL
			}
		}
		typ := attrs[1].Value
		h.uarCalls = append(h.uarCalls, map[uint64]string{abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF: "bf", abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC: "nc"}[typ])
		switch {
		case typ != abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF && typ != abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC:
			return unix.EOPNOTSUPP
		case typ == abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF && h.noWC:
			return unix.EOPNOTSUPP // no write combining: no BlueFlame UARs
		case h.failUAR > 0:
			h.failUAR--
			return unix.ENOMEM
		}
		mem, err := unix.Mmap(-1, 0, h.pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		for i := range mem {
			mem[i] = modelPoison
		}
		u := &hwUAR{handle: uint32(len(h.dynUARs) + 1), pageID: h.nextPage, nc: typ == abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC, mem: mem}
		u.off = int64(0x1000+u.handle) * int64(h.pageSize) // an rdma_user_mmap entry's offset
		h.nextPage += uint32(h.pageSize / adapterPageSize)
		h.dynUARs[u.handle] = u
		attrs[0].Value = uint64(u.handle)
		binary.NativeEndian.PutUint64(attrs[2].Out, uint64(u.off))
		binary.NativeEndian.PutUint32(attrs[3].Out, uint32(h.pageSize))
		binary.NativeEndian.PutUint32(attrs[4].Out, u.pageID)
		return nil
	case abi.MLX5_IB_METHOD_UAR_OBJ_DESTROY:
		if len(attrs) != 1 || attrs[0].ID != abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE || attrs[0].Kind != provider.AttrIDR {
			h.t.Errorf("UAR_OBJ_DESTROY attributes %+v", attrs)
			return unix.EINVAL
		}
		u := h.dynUARs[uint32(attrs[0].Value)]
		if u == nil || u.destroyed {
			h.t.Errorf("UAR handle %d destroyed, not a live UAR", attrs[0].Value)
			return unix.EINVAL
		}
		if u.mapped {
			h.t.Errorf("UAR page %#x destroyed while still mapped (rdma-core unmaps first)", u.pageID)
		}
		u.destroyed = true
		h.uarCalls = append(h.uarCalls, "destroy")
		return nil
	}
	return unix.EPROTONOSUPPORT
}

// liveUARs counts the dynamic UARs allocated and not destroyed.
func (h *hca) liveUARs() int {
	n := 0
	for _, u := range h.dynUARs {
		if !u.destroyed {
			n++
		}
	}
	return n
}

// uarOf finds the live dynamic UAR page id names: the first UAR of an
// allocation or, in a system page holding several, one of the others.
func (h *hca) uarOf(pageID uint32) (*hwUAR, []byte) {
	for _, u := range h.dynUARs {
		if u.destroyed || pageID < u.pageID || pageID-u.pageID >= uint32(h.pageSize/adapterPageSize) || (u.nc && pageID != u.pageID) {
			continue
		}
		if !u.mapped {
			h.t.Errorf("UAR page %#x named before it was mapped", pageID)
		}
		j := int(pageID - u.pageID)
		return u, u.mem[j*adapterPageSize : (j+1)*adapterPageSize]
	}
	return nil, nil
}

// checkUARsReleased checks that the context's dynamic UARs are all
// unmapped and destroyed.
func (h *hca) checkUARsReleased() {
	for _, u := range h.dynUARs {
		if u.mapped || !u.destroyed {
			h.t.Errorf("UAR page %#x left mapped %v, destroyed %v", u.pageID, u.mapped, u.destroyed)
		}
	}
}

func (h *hca) Write([]byte) error {
	h.t.Error("mlx5 wrote a command through Kernel.Write; it has no system-call doorbells")
	return unix.EINVAL
}

func (h *hca) Doorbell([]byte) error {
	h.t.Error("mlx5 rang a system-call doorbell; its doorbells are the UAR")
	return unix.EINVAL
}

// --- the kernel side: create commands ---

// udataOf is a builder's driver data as the kernel reads it: the request
// (struct mlx5_ib_create_*) and the response the model fills in.
func udataOf[Req, Resp, P any](t testing.TB, b provider.Builder[P]) (Req, *Resp) {
	t.Helper()
	in, out := b.Udata()
	if uintptr(len(in)) < unsafe.Sizeof(*new(Req)) || uintptr(len(out)) < unsafe.Sizeof(*new(Resp)) {
		b.Abort()
		t.Fatalf("driver data of %d and %d bytes for %T and %T", len(in), len(out), *new(Req), *new(Resp))
	}
	return *(*Req)(unsafe.Pointer(&in[0])), (*Resp)(unsafe.Pointer(&out[0]))
}

// openContext runs the context creation as the core does.
func (h *hca) openContext() *Context {
	h.t.Helper()
	b, err := Driver{}.NewContext(h)
	if err != nil {
		h.t.Fatal(err)
	}
	in, out := b.Udata()
	if err := h.allocUcontext(in, out); err != nil {
		b.Abort()
		h.t.Fatalf("alloc ucontext: %v", err)
	}
	p, err := b.Finish(provider.Created{})
	if err != nil {
		h.t.Fatalf("context finish: %v", err)
	}
	c := p.(*Context)
	h.t.Cleanup(func() {
		if err := c.Close(); err != nil {
			h.t.Errorf("context close: %v", err)
		}
		h.checkUARsReleased()
	})
	return c
}

// allocUcontext is mlx5_ib_alloc_ucontext: static registers, or none when
// it grants dynamic UARs.
func (h *hca) allocUcontext(in, out []byte) error {
	if len(in) < int(unsafe.Offsetof(abi.Mlx5IbAllocUcontextReqV2{}.Max_cqe_version)) || len(out) < abi.SizeofMlx5IbAllocUcontextResp {
		return unix.EINVAL
	}
	req := *(*abi.Mlx5IbAllocUcontextReqV2)(unsafe.Pointer(&in[0]))
	if req.Flags != 0 || req.Comp_mask != 0 || req.Reserved0 != 0 || req.Reserved1 != 0 || req.Reserved2 != 0 {
		return unix.EOPNOTSUPP
	}
	tot := uint32(alignUp(int(req.Total_num_bfregs), nonFPBfregsPerUAR))
	if req.Num_low_latency_bfregs > tot-1 {
		return unix.EINVAL
	}
	if req.Lib_caps != abi.MLX5_LIB_CAP_4K_UAR|abi.MLX5_LIB_CAP_DYN_UAR {
		h.t.Errorf("lib_caps %#x, want 4K and dynamic UARs as rdma-core asks", req.Lib_caps)
	}
	h.totBf, h.lowLat = tot, req.Num_low_latency_bfregs
	h.bfCount = make([]int, tot)
	h.cqeVer = min(req.Max_cqe_version, 1) // MLX5_CAP_GEN(cqe_version)
	if h.oldCQE {
		h.cqeVer = 0
	}
	r := (*abi.Mlx5IbAllocUcontextResp)(unsafe.Pointer(&out[0]))
	*r = abi.Mlx5IbAllocUcontextResp{
		Qp_tab_size: 1 << 18, Bf_reg_size: modelBfRegSize, Tot_bfregs: tot, Cache_line_size: 64,
		Max_sq_desc_sz: modelMaxSQDesc, Max_rq_desc_sz: modelMaxRQDesc, Max_send_wqebb: modelMaxWQEBB,
		Max_recv_wr: modelMaxRecvWR, Max_srq_recv_wr: modelMaxSRQWR, Num_ports: 1,
		Response_length: abi.SizeofMlx5IbAllocUcontextResp, Cqe_version: h.cqeVer,
		Cmds_supp_uhw: abi.MLX5_USER_CMDS_SUPP_UHW_CREATE_AH | abi.MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE,
		Log_uar_size:  12, Num_uars_per_page: uint32(h.pageSize / adapterPageSize),
	}
	if h.noWC {
		r.Bf_reg_size = 0
	}
	if h.dyn {
		r.Tot_bfregs = 0 // resp.tot_bfregs = lib_uar_dyn ? 0 : ...
	}
	if h.ece {
		r.Comp_mask |= abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE
	}
	if h.clock {
		r.Comp_mask |= abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET
		r.Hca_core_clock_offset = modelCoreClockOffset
		r.Clock_info_versions = 1 << abi.MLX5_IB_CLOCK_INFO_V1
	}
	return nil
}

func (h *hca) num() uint32 { h.nextNum += 7; return h.nextNum }

type hwCQ struct {
	cqn    uint32
	size   int // CQE size: 64 or 128
	buf    unsafe.Pointer
	ncqe   uint32
	db     *[2]uint32
	pi     uint32
	uar    []byte // the UAR it is armed through
	armed  uint32 // 0, or the arm command (REQ_NOT or REQ_NOT_SOL)+1
	armSN  uint32
	fired  map[uint32]bool // arm sequence numbers that raised an event
	events int
}

func (h *hca) createCQ(c *Context, cqe int) (*CQ, *hwCQ) {
	h.t.Helper()
	return h.createCQEx(c, provider.CQAttr{CQE: cqe})
}

// createCQEx is createCQ for an extended CQ. The kernel's driver data is
// the same; only the core's create flags tell the kernel of timestamps.
func (h *hca) createCQEx(c *Context, attr provider.CQAttr) (*CQ, *hwCQ) {
	h.t.Helper()
	cqe := attr.CQE
	b, err := c.NewCQEx(attr)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd, resp := udataOf[abi.Mlx5IbCreateCq, abi.Mlx5IbCreateCqResp](h.t, b)
	entries := roundUpPow2(uint32(cqe) + 1) // mlx5_ib_create_cq
	var uar []byte
	if h.dyn {
		// create_cq_user: with dynamic UARs the CQ must name one.
		if cmd.Flags == abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX {
			var u *hwUAR
			if u, uar = h.uarOf(uint32(cmd.Uar_page_index)); u != nil && !u.nc {
				h.t.Errorf("CQ names BlueFlame UAR %#x; rdma-core arms through the non-cached one", u.pageID)
			}
		}
	} else if cmd.Flags == 0 && cmd.Uar_page_index == 0 {
		uar = h.uars[uarMmapOffset(0, h.pageSize)]
	}
	if (cmd.Cqe_size != 64 && cmd.Cqe_size != 128) || cmd.Buf_addr%uint64(h.pageSize) != 0 || cmd.Db_addr%8 != 0 || uar == nil {
		b.Abort()
		h.t.Fatalf("create CQ driver data %+v", cmd)
	}
	if int(cmd.Cqe_size) != cqeSizeFromEnv() {
		h.t.Errorf("CQ of %d-byte CQEs; MLX5_CQE_SIZE asks for %d", cmd.Cqe_size, cqeSizeFromEnv())
	}
	hw := &hwCQ{cqn: h.num(), uar: uar, size: int(cmd.Cqe_size), buf: userMem(cmd.Buf_addr), ncqe: entries, db: (*[2]uint32)(userMem(cmd.Db_addr)), fired: map[uint32]bool{}}
	for i := uint32(0); i < entries; i++ {
		// The op_own byte ends the entry: the 64-byte CQE is the last 64.
		if op := *(*uint8)(unsafe.Add(hw.buf, uintptr(i+1)*uintptr(hw.size)-1)); op != cqeInvalidOpOwn {
			h.t.Fatalf("CQE %d starts as %#x, not invalid", i, op)
		}
	}
	resp.Cqn = hw.cqn
	p, err := b.Finish(provider.Created{Handle: hw.cqn, CQE: entries - 1})
	if err != nil {
		h.t.Fatal(err)
	}
	h.cqs[hw.cqn] = hw
	return p.(*CQ), hw
}

type hwQP struct {
	qpn      uint32
	typ      qp.Type
	sq       unsafe.Pointer
	sqCnt    uint32 // BBs
	rq       unsafe.Pointer
	rqCnt    uint32
	rqShift  uint32
	db       *[2]uint32
	bfreg    int    // kernel (gross) index, static registers
	uarPage  []byte // dynamic UARs: the 4 KiB UAR the QP named
	uarNC    bool   // ... a non-cached one
	regOff   int    // ... the register in it, once the first doorbell showed it (-1 before)
	uidx     uint32
	sendCQ   *hwCQ
	recvCQ   *hwCQ
	srq      *hwSRQ
	xrcd     int   // XRC target: its domain (a model-side number)
	peer     *hwQP // RC/UC, and XRC's target
	qkey     uint32
	sqCI     uint32 // BBs consumed
	rqCI     uint32 // receive WQEs consumed
	err      bool   // in the error state
	lastCtrl []byte // the last WQE processed, for doorbell checks
}

// allocBfreg is mlx5_ib's alloc_bfreg: a free low-latency register, else
// the least used medium one, else register 0. It returns the kernel's
// (adjusted) index.
func (h *hca) allocBfreg() int {
	n := -1
	first := int(h.totBf - h.lowLat)
	for i := first; i < int(h.totBf); i++ {
		if h.bfCount[i] == 0 {
			n = i
			break
		}
	}
	if n < 0 && first > 1 {
		n = 1
		for i := 1; i < first; i++ {
			if h.bfCount[i] < h.bfCount[n] {
				n = i
			}
		}
	}
	if n < 0 {
		n = 0
	}
	h.bfCount[n]++
	return n/nonFPBfregsPerUAR*bfregsPerUAR + n%nonFPBfregsPerUAR
}

func (h *hca) createQP(c *Context, attr provider.QPInitAttr, send, recv *hwCQ, srq *hwSRQ) (*QP, *hwQP) {
	h.t.Helper()
	p, hw, err := h.tryCreateQP(c, attr, send, recv, srq)
	if err != nil {
		h.t.Fatal(err)
	}
	return p, hw
}

func (h *hca) tryCreateQP(c *Context, attr provider.QPInitAttr, send, recv *hwCQ, srq *hwSRQ) (*QP, *hwQP, error) {
	if attr.HasSRQ && attr.SRQ == nil && srq != nil {
		attr.SRQ = srq.prov // as the core passes it
	}
	b, err := c.NewQP(attr)
	if err != nil {
		return nil, nil, err
	}
	cmd, resp := udataOf[abi.Mlx5IbCreateQp, abi.Mlx5IbCreateQpResp](h.t, b)
	// mlx5_ib's checks on a user QP (create_user_qp, set_rq_size,
	// set_user_buf_size, get_qp_user_index).
	if cmd.Sq_wqe_count&(cmd.Sq_wqe_count-1) != 0 || cmd.Rq_wqe_count&(cmd.Rq_wqe_count-1) != 0 ||
		cmd.Sq_wqe_count > modelMaxWQEBB || cmd.Buf_addr%uint64(h.pageSize) != 0 || cmd.Db_addr%8 != 0 ||
		cmd.Flags&^(abi.MLX5_QP_FLAG_SCATTER_CQE|abi.MLX5_QP_FLAG_UAR_PAGE_INDEX) != 0 || cmd.Sq_buf_addr != 0 ||
		h.dyn != (cmd.Flags&abi.MLX5_QP_FLAG_UAR_PAGE_INDEX != 0) || (!h.dyn && cmd.Bfreg_index != 0) ||
		!h.validUidx(cmd.Uidx) || (attr.HasSRQ && cmd.Rq_wqe_count != 0) {
		b.Abort()
		h.t.Fatalf("create QP driver data %+v", cmd)
	}
	if cmd.Flags&abi.MLX5_QP_FLAG_SCATTER_CQE != 0 {
		h.t.Error("scatter to CQE requested; the provider does not copy data out of CQEs")
	}
	if h.ece != (cmd.Ece_options == eceTrigger) {
		h.t.Errorf("ECE options %#x with ECE offered %v", cmd.Ece_options, h.ece)
	}
	hw := &hwQP{qpn: h.num(), typ: attr.Type, sqCnt: cmd.Sq_wqe_count, rqCnt: cmd.Rq_wqe_count, rqShift: cmd.Rq_wqe_shift,
		db: (*[2]uint32)(userMem(cmd.Db_addr)), sendCQ: send, recvCQ: recv, srq: srq, uidx: cmd.Uidx}
	hw.rq = userMem(cmd.Buf_addr)
	hw.sq = unsafe.Add(hw.rq, uintptr(cmd.Rq_wqe_count)<<cmd.Rq_wqe_shift)
	if h.dyn {
		// _create_user_qp with MLX5_QP_FLAG_UAR_PAGE_INDEX: the QP's
		// uar_page is the one named; the answer is MLX5_IB_INVALID_BFREG.
		var u *hwUAR
		if u, hw.uarPage = h.uarOf(cmd.Bfreg_index); u == nil {
			b.Abort()
			h.t.Fatalf("QP names UAR page %#x, which the context does not hold", cmd.Bfreg_index)
		}
		hw.uarNC, hw.regOff, hw.bfreg = u.nc, -1, -1
		resp.Bfreg_index = 1 << 31
	} else {
		hw.bfreg = h.allocBfreg()
		resp.Bfreg_index = uint32(hw.bfreg)
	}
	prov, err := b.Finish(provider.Created{Handle: hw.qpn, QPNum: hw.qpn, Caps: attr.Caps})
	if err != nil {
		return nil, nil, err
	}
	h.qps[hw.qpn] = hw
	return prov.(*QP), hw, nil
}

// validUidx is mlx5_ib's verify_assign_uidx: with CQE version 1 a QP or
// SRQ needs a 24-bit user index other than the default; with version 0 the
// provider sends the default. The model also refuses an index in use.
func (h *hca) validUidx(u uint32) bool {
	if h.cqeVer == 0 {
		return u == defaultUIDX
	}
	if u == defaultUIDX || u&^cqeSrqnUidxMask != 0 {
		return false
	}
	for _, q := range h.qps {
		if q.uidx == u {
			h.t.Errorf("user index %#x given twice", u)
			return false
		}
	}
	for _, s := range h.srqs {
		if s.xrc && s.uidx == u {
			h.t.Errorf("user index %#x given twice (an XRC SRQ has it)", u)
			return false
		}
	}
	return true
}

// createXRCRecvQP is the kernel's create of an XRC_TGT QP in domain xrcd:
// ib_create_qp_user hands mlx5_ib no udata for it, so the device QP has
// no buffers and the default user index. The provider sends none.
func (h *hca) createXRCRecvQP(c *Context, xrcd int) (*QP, *hwQP) {
	h.t.Helper()
	b, err := c.NewQP(provider.QPInitAttr{Type: qp.XRCRecv})
	if err != nil {
		h.t.Fatal(err)
	}
	if in, out := b.Udata(); len(in) != 0 || len(out) != 0 {
		h.t.Errorf("XRC receive QP sends %d bytes of driver data and wants %d back; the kernel passes it none", len(in), len(out))
	}
	hw := &hwQP{qpn: h.num(), typ: qp.XRCRecv, xrcd: xrcd, uidx: defaultUIDX}
	p, err := b.Finish(provider.Created{Handle: hw.qpn, QPNum: hw.qpn})
	if err != nil {
		h.t.Fatal(err)
	}
	h.qps[hw.qpn] = hw
	return p.(*QP), hw
}

// destroyQP is the kernel's destroy, then the provider's Close, in the
// core's order.
func (h *hca) destroyQP(p *QP, hw *hwQP) {
	delete(h.qps, hw.qpn)
	if err := p.Close(); err != nil {
		h.t.Error(err)
	}
}

type hwSRQ struct {
	prov  *SRQ
	srqn  uint32
	buf   unsafe.Pointer
	shift uint32
	nwqe  uint32
	db    *uint32
	ci    uint32 // WQEs consumed
	next  uint16 // the WQE the device takes next
	// XRC: the domain the SRQ serves, the CQ of its receives and its user
	// index, which its CQEs carry under CQE version 1.
	xrc  bool
	xrcd int
	cq   *hwCQ
	uidx uint32
}

func (h *hca) createSRQ(c *Context, attr provider.SRQInitAttr) (*SRQ, *hwSRQ) {
	h.t.Helper()
	b, err := c.NewSRQ(attr)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd, resp := udataOf[abi.Mlx5IbCreateSrq, abi.Mlx5IbCreateSrqResp](h.t, b)
	// create_srq_user: the kernel's own sizing of the buffer, the flags
	// (no signature asked), the reserved words, and for an XRC SRQ
	// get_srq_user_index (for a basic SRQ the kernel ignores the index).
	desc := max(roundUpPow2(srqNextSegSize+attr.MaxSGE*dataSegSize), 32)
	nwqe := roundUpPow2(attr.MaxWR + 1)
	if cmd.Buf_addr%uint64(h.pageSize) != 0 || !h.validUidx(cmd.Uidx) || cmd.Flags != 0 || cmd.Reserved0 != 0 || cmd.Reserved1 != 0 {
		b.Abort()
		h.t.Fatalf("create SRQ driver data %+v", cmd)
	}
	hw := &hwSRQ{srqn: h.num() & 0xffff, buf: userMem(cmd.Buf_addr), shift: ilog2(desc), nwqe: nwqe, db: (*uint32)(userMem(cmd.Db_addr)),
		xrc: attr.XRC, uidx: cmd.Uidx}
	resp.Srqn = hw.srqn
	p, err := b.Finish(provider.Created{Handle: hw.srqn, Caps: qp.Caps{MaxRecvWR: nwqe - 1, MaxRecvSGE: attr.MaxSGE}})
	if err != nil {
		h.t.Fatal(err)
	}
	hw.prov = p.(*SRQ)
	h.srqs[hw.srqn] = hw
	return p.(*SRQ), hw
}

// createXRCSRQ makes an XRC SRQ of domain xrcd whose receives complete
// on cq.
func (h *hca) createXRCSRQ(c *Context, attr provider.SRQInitAttr, cq *hwCQ, xrcd int) (*SRQ, *hwSRQ) {
	h.t.Helper()
	attr.XRC = true
	p, hw := h.createSRQ(c, attr)
	hw.xrcd, hw.cq = xrcd, cq
	return p, hw
}

// destroySRQ is the kernel's destroy, then the provider's Close.
func (h *hca) destroySRQ(p *SRQ, hw *hwSRQ) {
	delete(h.srqs, hw.srqn)
	if err := p.Close(); err != nil {
		h.t.Error(err)
	}
}

// flushXRC writes the flush error CQE of the next WQE of an XRC SRQ, as
// the device does for a receive an XRC target QP had taken when it
// went to the error state; the WQE is consumed.
func (h *hca) flushXRC(dst *hwQP, s *hwSRQ) {
	idx := s.next
	s.next = srqNext(unsafe.Add(s.buf, uintptr(idx)<<s.shift))
	s.ci++
	t := *dst
	t.srq, t.recvCQ = s, s.cq
	h.respCQE(&t, nil, 0, syndWRFlushErr, idx, &sendOp{}, 0)
}

// createAH is mlx5_ib_create_ah: it answers the destination MAC on RoCE.
func (h *hca) createAH(c *Context, attr qp.AHAttr, roce bool, dmac [6]byte) *AH {
	h.t.Helper()
	b, err := c.NewAH(attr)
	if err != nil {
		h.t.Fatal(err)
	}
	_, out := b.Udata()
	if roce {
		r := (*abi.Mlx5IbCreateAhResp)(unsafe.Pointer(&out[0]))
		r.Response_length = uint32(unsafe.Offsetof(r.Dmac)) + 6
		r.Dmac = dmac
	}
	p, err := b.Finish(provider.Created{Handle: 1})
	if err != nil {
		h.t.Fatal(err)
	}
	return p.(*AH)
}

type hwMR struct {
	addr   uint64
	buf    []byte
	access wr.Access
	key    uint32
}

// regMR registers Go memory with the model and returns its key (lkey =
// rkey, as mlx5 gives).
func (h *hca) regMR(b []byte, access wr.Access) uint32 {
	h.nextKey += 0x100
	h.mrs[h.nextKey] = &hwMR{addr: uint64(uintptr(unsafe.Pointer(&b[0]))), buf: b, access: access, key: h.nextKey}
	return h.nextKey
}

// lookup returns the bytes of a region under key, or nil when the key or
// the range or the access is wrong.
func (h *hca) lookup(key uint32, addr uint64, n uint32, need wr.Access) []byte {
	m := h.mrs[key]
	if m == nil || addr < m.addr || addr+uint64(n) > m.addr+uint64(len(m.buf)) || m.access&need != need {
		return nil
	}
	off := addr - m.addr
	return m.buf[off : off+uint64(n)]
}

func connect(a, b *hwQP) { a.peer, b.peer = b, a }

// --- the device side ---

// bfReg returns the BlueFlame register pair of kernel register index n.
func (h *hca) bfReg(n int) []byte {
	uar := n / bfregsPerUAR
	perPage := h.pageSize / adapterPageSize
	page := h.uars[uarMmapOffset(uar/perPage, h.pageSize)]
	off := (uar%perPage)*adapterPageSize + bfOffset + n%bfregsPerUAR*modelBfRegSize
	return page[off : off+modelBfRegSize]
}

// run is the device reacting to every doorbell rung since the last run:
// CQ arms, then each QP's new send WQEs.
func (h *hca) run() {
	h.t.Helper()
	for _, cq := range h.cqs {
		h.checkArm(cq)
	}
	for _, q := range h.qps {
		if q.db != nil { // an XRC target has no queues
			h.runSQ(q)
		}
	}
}

func (h *hca) checkArm(cq *hwCQ) {
	reg := cq.uar[cqDoorbellOffset : cqDoorbellOffset+8]
	v := binary.BigEndian.Uint64(reg)
	if reg[0] == modelPoison && reg[7] == modelPoison {
		return
	}
	if uint32(v) != cq.cqn {
		return // another CQ's arm
	}
	for i := range reg {
		reg[i] = modelPoison
	}
	word := uint32(v >> 32)
	if rec := getBE32(unsafe.Pointer(&cq.db[cqArmDB])); rec != word {
		h.t.Errorf("CQ %#x armed with %#x but its doorbell record says %#x", cq.cqn, word, rec)
	}
	sn := word >> 28 & 3
	if cq.fired[sn] && cq.armSN == sn {
		h.t.Errorf("CQ %#x re-armed with sequence number %d, which already fired", cq.cqn, sn)
	}
	cq.armSN = sn
	cq.armed = (word&cqDBReqNotSol)>>24 + 1
}

func (h *hca) runSQ(q *hwQP) {
	pi := getBE32(unsafe.Pointer(&q.db[sndDBR])) & 0xffff
	if uint16(q.sqCI) == uint16(pi) {
		return
	}
	for uint16(q.sqCI) != uint16(pi) {
		wqe := h.readWQE(q)
		q.sqCI += (uint32(len(wqe)) + sendWQEBB - 1) / sendWQEBB
		q.lastCtrl = wqe
		h.execute(q, wqe)
	}
	h.checkDoorbell(q)
}

// readWQE gathers the WQE at the consumer counter, following the ring's
// end to its start, after checking its control segment.
func (h *hca) readWQE(q *hwQP) []byte {
	idx := q.sqCI & (q.sqCnt - 1)
	ctrl := unsafe.Add(q.sq, uintptr(idx)<<sendWQEShift)
	w0, w1 := getBE32(ctrl), getBE32(at(ctrl, 4))
	if uint16(w0>>8) != uint16(q.sqCI) {
		h.t.Errorf("QP %#x WQE at BB %d carries index %#x, want %#x", q.qpn, idx, uint16(w0>>8), uint16(q.sqCI))
	}
	if w1>>8 != q.qpn {
		h.t.Errorf("QP %#x WQE names QP %#x", q.qpn, w1>>8)
	}
	ds := w1 & 0x3f
	if ds == 0 || ds*16 > modelMaxSQDesc {
		h.t.Fatalf("QP %#x WQE of %d units", q.qpn, ds)
	}
	out := make([]byte, ds*16)
	end := uintptr(q.sqCnt) << sendWQEShift
	for off := uintptr(0); off < uintptr(len(out)); off += 16 {
		pos := (uintptr(idx)<<sendWQEShift + off) % end
		copy(out[off:off+16], unsafe.Slice((*byte)(unsafe.Add(q.sq, pos)), 16))
	}
	return out
}

// checkDoorbell reads the BlueFlame half the provider should have written
// for the last WQE: its first 8 bytes (a plain doorbell) or the whole WQE.
func (h *hca) checkDoorbell(q *hwQP) {
	reg, key, nc := h.doorbellRegister(q)
	if reg == nil {
		return
	}
	half := h.bfHalf[key]
	buf := reg[half : half+modelBfRegSize/2]
	if nc {
		buf = reg[:64]
	}
	rec := dbRecord{qpn: q.qpn, half: half}
	for i, b := range buf {
		if b != modelPoison {
			rec.bytes = i + 1
		}
	}
	switch {
	case rec.bytes == 0:
		h.t.Errorf("QP %#x: send counter moved but no doorbell in register %d half %d", q.qpn, q.bfreg, half)
	case rec.bytes <= 8:
		if string(buf[:8]) != string(q.lastCtrl[:8]) {
			h.t.Errorf("QP %#x doorbell % x, want the WQE's first 8 bytes % x", q.qpn, buf[:8], q.lastCtrl[:8])
		}
	default:
		rec.blueFlame = true
		n := alignUp(len(q.lastCtrl), 64)
		if rec.bytes > n || string(buf[:len(q.lastCtrl)]) != string(q.lastCtrl) {
			h.t.Errorf("QP %#x BlueFlame copy of %d bytes differs from its %d-byte WQE", q.qpn, rec.bytes, len(q.lastCtrl))
		}
	}
	for i := range buf {
		buf[i] = modelPoison
	}
	if !nc {
		h.bfHalf[key] ^= modelBfRegSize / 2
	}
	h.doorbell = append(h.doorbell, rec)
}

// doorbellRegister returns the register a QP's doorbells go to, the key
// its alternating halves are tracked by, and whether it is one without
// BlueFlame (register 0, or the non-cached UAR's). With dynamic UARs the
// kernel knows only the QP's UAR, not which of its registers the provider
// chose: the first doorbell, found by its contents (the WQE's first 8
// bytes carry its index and the QP number), tells, and every later one
// must use the same register.
func (h *hca) doorbellRegister(q *hwQP) ([]byte, int, bool) {
	if !h.dyn {
		return h.bfReg(q.bfreg), q.bfreg, q.bfreg == 0
	}
	if q.regOff < 0 {
	find:
		for k := range nonFPBfregsPerUAR {
			for half := range 2 {
				off := bfOffset + k*modelBfRegSize + half*modelBfRegSize/2
				if string(q.uarPage[off:off+8]) == string(q.lastCtrl[:8]) {
					q.regOff = bfOffset + k*modelBfRegSize
					break find
				}
			}
		}
		if q.regOff < 0 {
			h.t.Errorf("QP %#x: send counter moved but no doorbell in the UAR it named", q.qpn)
			return nil, 0, false
		}
	}
	key := int(uintptr(unsafe.Pointer(&q.uarPage[q.regOff])))
	return q.uarPage[q.regOff : q.regOff+modelBfRegSize], key, q.uarNC
}

// --- executing WQEs ---

type sendOp struct {
	opcode  uint8
	fmCeSe  uint8
	imm     uint32
	wqeIdx  uint16
	raddr   uint64
	rkey    uint32
	swapAdd uint64
	compare uint64
	dqpn    uint32
	qkey    uint32
	srqn    uint32 // XRC: the target's SRQ
	xrcRes  []byte // XRC: the segment's reserved bytes
	av      []byte
	inline  []byte
	gather  [][3]uint64 // length, lkey, addr
}

func parseWQE(q *hwQP, wqe []byte) sendOp {
	be := binary.BigEndian
	op := sendOp{opcode: uint8(be.Uint32(wqe)), wqeIdx: uint16(be.Uint32(wqe) >> 8), fmCeSe: wqe[11], imm: be.Uint32(wqe[12:])}
	rest := wqe[16:]
	switch q.typ {
	case qp.XRCSend:
		op.srqn = be.Uint32(rest) // struct mlx5_wqe_xrc_seg
		op.xrcRes = rest[4:xrcSegSize]
		rest = rest[xrcSegSize:]
		fallthrough
	case qp.RC, qp.UC:
		switch op.opcode {
		case opRDMAWrite, opRDMAWriteImm, opRDMARead:
			op.raddr, op.rkey = be.Uint64(rest), be.Uint32(rest[8:])
			rest = rest[16:]
		case opAtomicCS, opAtomicFA:
			op.raddr, op.rkey = be.Uint64(rest), be.Uint32(rest[8:])
			op.swapAdd, op.compare = be.Uint64(rest[16:]), be.Uint64(rest[24:])
			rest = rest[32:]
		}
	case qp.UD:
		op.av = rest[:datagramSize]
		op.qkey, op.dqpn = be.Uint32(rest), be.Uint32(rest[8:])
		rest = rest[datagramSize:]
	}
	if len(rest) >= 4 && be.Uint32(rest)&inlineSeg != 0 {
		n := be.Uint32(rest) &^ inlineSeg
		op.inline = rest[4 : 4+n]
		return op
	}
	for ; len(rest) >= 16; rest = rest[16:] {
		op.gather = append(op.gather, [3]uint64{uint64(be.Uint32(rest)), uint64(be.Uint32(rest[4:])), be.Uint64(rest[8:])})
	}
	return op
}

// gather collects a request's local data, or reports a protection error.
func (h *hca) gather(op *sendOp) ([]byte, bool) {
	if op.inline != nil {
		return append([]byte(nil), op.inline...), true
	}
	var data []byte
	for _, g := range op.gather {
		b := h.lookup(uint32(g[1]), g[2], uint32(g[0]), 0)
		if b == nil {
			return nil, false
		}
		data = append(data, b...)
	}
	return data, true
}

func (h *hca) execute(q *hwQP, wqe []byte) {
	op := parseWQE(q, wqe)
	if q.err {
		h.reqCQE(q, &op, 0, syndWRFlushErr, true)
		return
	}
	syn := h.perform(q, &op)
	if syn != 0 {
		h.reqCQE(q, &op, 0, syn, true)
		h.fail(q)
		return
	}
	if op.fmCeSe&ctrlCQUpdate != 0 {
		var n uint32
		if op.opcode == opRDMARead {
			for _, g := range op.gather {
				n += uint32(g[0])
			}
		}
		h.reqCQE(q, &op, n, 0, false)
	}
}

// perform moves the data and returns 0 or an error syndrome.
func (h *hca) perform(q *hwQP, op *sendOp) uint8 {
	be := binary.BigEndian
	switch op.opcode {
	case opSend, opSendImm:
		data, ok := h.gather(op)
		if !ok {
			return syndLocalProtErr
		}
		dst := q.peer
		if q.typ == qp.UD {
			if op.dqpn&extendedUDAV == 0 {
				h.t.Errorf("UD WQE without the extended-AV bit: %#x", op.dqpn)
			}
			dst = h.qps[op.dqpn&0xffffff]
			if dst == nil || (modelUDQKeyCheck && dst.qkey != op.qkey) {
				return 0 // UD: silently dropped
			}
			data = append(make([]byte, grhSize), data...)
		}
		if q.typ == qp.XRCSend && slices.ContainsFunc(op.xrcRes, func(b byte) bool { return b != 0 }) {
			h.t.Errorf("XRC segment's reserved bytes %x", op.xrcRes)
		}
		if q.typ == qp.XRCSend && dst != nil {
			// The XRC target QP has no queue: the message lands in the
			// SRQ of the target's domain the XRC segment names, and
			// completes on that SRQ's CQ.
			srq := h.srqs[op.srqn]
			if srq == nil || !srq.xrc || srq.xrcd != dst.xrcd {
				return syndRemoteInvalReqErr
			}
			t := *dst
			t.srq, t.recvCQ = srq, srq.cq
			dst = &t
		}
		if dst == nil {
			return syndRemoteOpErr
		}
		resp := cqeRespSend
		if op.opcode == opSendImm {
			resp = cqeRespSendIm
		}
		return h.deliver(q, dst, data, uint8(resp), op, uint32(len(data)))
	case opRDMAWrite, opRDMAWriteImm:
		data, ok := h.gather(op)
		if !ok {
			return syndLocalProtErr
		}
		dst := h.lookup(op.rkey, op.raddr, uint32(len(data)), wr.RemoteWrite)
		if dst == nil {
			return syndRemoteAccessErr
		}
		copy(dst, data)
		if op.opcode == opRDMAWriteImm {
			return h.deliver(q, q.peer, nil, cqeRespWrImm, op, uint32(len(data)))
		}
	case opRDMARead:
		var n uint32
		for _, g := range op.gather {
			n += uint32(g[0])
		}
		src := h.lookup(op.rkey, op.raddr, n, wr.RemoteRead)
		if src == nil {
			return syndRemoteAccessErr
		}
		for _, g := range op.gather {
			b := h.lookup(uint32(g[1]), g[2], uint32(g[0]), wr.LocalWrite)
			if b == nil {
				return syndLocalProtErr
			}
			src = src[copy(b, src):]
		}
	case opAtomicCS, opAtomicFA:
		if len(op.gather) != 1 || op.gather[0][0] != 8 {
			return syndLocalLengthErr
		}
		local := h.lookup(uint32(op.gather[0][1]), op.gather[0][2], 8, wr.LocalWrite)
		if local == nil {
			return syndLocalProtErr
		}
		remote := h.lookup(op.rkey, op.raddr, 8, wr.RemoteAtomic)
		if remote == nil || op.raddr&7 != 0 {
			return syndRemoteAccessErr
		}
		old := be.Uint64(remote)
		copy(local, remote)
		if op.opcode == opAtomicFA {
			be.PutUint64(remote, old+op.swapAdd)
		} else if old == op.compare {
			be.PutUint64(remote, op.swapAdd)
		}
	default:
		return syndLocalQPOpErr
	}
	return 0
}

// deliver lands a message at dst: takes its next receive WQE, scatters the
// data and writes the responder CQE. An RC receiver without a posted
// receive makes the requester fail with RNR retries exceeded.
func (h *hca) deliver(src, dst *hwQP, data []byte, respOp uint8, op *sendOp, msgLen uint32) uint8 {
	var scat unsafe.Pointer
	var slots int
	var srqIdx uint16
	if dst.srq != nil {
		s := dst.srq
		if uint16(getBE32(unsafe.Pointer(s.db))) == uint16(s.ci) {
			return rnr(src)
		}
		srqIdx = s.next
		w := unsafe.Add(s.buf, uintptr(srqIdx)<<s.shift)
		s.next = srqNext(w)
		s.ci++
		scat = at(w, srqNextSegSize)
		slots = (1<<s.shift - srqNextSegSize) / dataSegSize
	} else {
		if uint16(getBE32(unsafe.Pointer(&dst.db[rcvDBR]))) == uint16(dst.rqCI) {
			return rnr(src)
		}
		scat = unsafe.Add(dst.rq, uintptr(dst.rqCI&(dst.rqCnt-1))<<dst.rqShift)
		slots = 1 << dst.rqShift / dataSegSize
		dst.rqCI++
	}
	left := data
	for i := 0; i < slots && len(left) > 0; i++ {
		seg := unsafe.Add(scat, uintptr(i)*dataSegSize)
		n, key, addr := getBE32(seg), getBE32(at(seg, 4)), getBE64(at(seg, 8))
		if key == invalidLKey {
			break
		}
		b := h.lookup(key, addr, min(n, uint32(len(left))), wr.LocalWrite)
		if b == nil {
			h.respCQE(dst, src, 0, syndLocalProtErr, srqIdx, op, 0)
			return syndRemoteOpErr
		}
		left = left[copy(b, left):]
	}
	if len(left) > 0 {
		h.respCQE(dst, src, 0, syndLocalLengthErr, srqIdx, op, 0)
		return syndRemoteInvalReqErr
	}
	h.respCQE(dst, src, respOp, 0, srqIdx, op, msgLen)
	return 0
}

func rnr(src *hwQP) uint8 {
	if src.typ == qp.UD {
		return 0
	}
	return syndRNRRetryErr
}

// fail moves a QP to the error state: every receive it holds is flushed.
func (h *hca) fail(q *hwQP) {
	if q.err {
		return
	}
	q.err = true
	if q.srq != nil {
		return
	}
	for uint16(getBE32(unsafe.Pointer(&q.db[rcvDBR]))) != uint16(q.rqCI) {
		q.rqCI++
		h.push(q.recvCQ, func(c unsafe.Pointer) {
			putBE32(at(c, cqeOffSopDropQPN), q.qpn)
			*(*uint8)(at(c, errOffSyndrome)) = syndWRFlushErr
			*(*uint8)(at(c, errOffVendorSynd)) = modelVendorSynd
		}, cqeRespErr, false)
	}
}

func (h *hca) reqCQE(q *hwQP, op *sendOp, byteCnt uint32, synd uint8, isErr bool) {
	opcode := uint8(cqeReq)
	if isErr {
		opcode = cqeReqErr
	}
	h.push(q.sendCQ, func(c unsafe.Pointer) {
		putBE32(at(c, cqeOffSopDropQPN), uint32(op.opcode)<<24|q.qpn)
		if h.cqeVer == 1 {
			putBE32(at(c, cqeOffSrqnUidx), q.uidx)
		}
		putBE16(at(c, cqeOffWQECounter), op.wqeIdx)
		putBE32(at(c, cqeOffByteCnt), byteCnt)
		if isErr {
			*(*uint8)(at(c, errOffSyndrome)) = synd
			*(*uint8)(at(c, errOffVendorSynd)) = modelVendorSynd
		}
	}, opcode, false)
}

func (h *hca) respCQE(dst, src *hwQP, respOp, synd uint8, srqIdx uint16, op *sendOp, byteCnt uint32) {
	opcode := respOp
	if synd != 0 {
		opcode = cqeRespErr
	}
	h.push(dst.recvCQ, func(c unsafe.Pointer) {
		putBE32(at(c, cqeOffSopDropQPN), dst.qpn)
		putBE32(at(c, cqeOffByteCnt), byteCnt)
		switch {
		case h.cqeVer == 1 && dst.typ == qp.XRCRecv:
			// The XRC target QP has no user index; the CQE names the
			// SRQ by its own.
			putBE32(at(c, cqeOffSrqnUidx), dst.srq.uidx)
		case h.cqeVer == 1:
			putBE32(at(c, cqeOffSrqnUidx), dst.uidx) // the QP, even on a basic SRQ
		case dst.srq != nil:
			putBE32(at(c, cqeOffSrqnUidx), dst.srq.srqn)
		}
		if dst.srq != nil {
			putBE16(at(c, cqeOffWQECounter), srqIdx)
		}
		if synd != 0 {
			*(*uint8)(at(c, errOffSyndrome)) = synd
			*(*uint8)(at(c, errOffVendorSynd)) = modelVendorSynd
			return
		}
		var g uint32
		if dst.typ == qp.UD {
			g = 1 << 28 // the 40 bytes of GRH precede the data
		}
		putBE32(at(c, cqeOffFlagsRQPN), g|src.qpn)
		if respOp == cqeRespSendIm || respOp == cqeRespWrImm {
			putBE32(at(c, cqeOffImmInvalPkey), op.imm)
		}
	}, opcode, op.fmCeSe&ctrlSolicited != 0)
}

// push writes one CQE: everything, then the op_own byte with the owner
// bit of the pass, as the device does. It refuses to overrun the ring
// (the consumer index comes from the CQ's doorbell record).
func (h *hca) push(cq *hwCQ, fill func(unsafe.Pointer), opcode uint8, solicited bool) {
	ci := getBE32(unsafe.Pointer(&cq.db[cqSetCI]))
	if (cq.pi-ci)&0xffffff >= cq.ncqe {
		h.t.Fatalf("CQ %#x overrun: producer %d, consumer %d, %d entries", cq.cqn, cq.pi, ci, cq.ncqe)
	}
	e := unsafe.Add(cq.buf, uintptr(cq.pi&(cq.ncqe-1))*uintptr(cq.size))
	c := unsafe.Add(e, cq.size-cqe64Size)
	if cq.size == cqe128Size {
		// The first half carries scattered data only when the QP asked
		// for it; the model fills it with noise the provider must skip.
		for i := range cqe64Size {
			*(*uint8)(unsafe.Add(e, i)) = uint8(cq.pi) ^ 0xa5 ^ uint8(i)
		}
	}
	clear(unsafe.Slice((*byte)(c), cqe64Size-1))
	// The clock first: an error CQE's syndrome overlays its last bytes.
	h.cycles += modelCycleStep
	putBE64(at(c, cqeOffTimestamp), h.cycles)
	fill(c)
	var owner uint8
	if cq.pi&cq.ncqe != 0 {
		owner = 1
	}
	*(*uint8)(at(c, cqeOffOpOwn)) = opcode<<cqeOpcodeShift | owner
	cq.pi++
	if cq.armed != 0 && (cq.armed == 1 || solicited || opcode == cqeReqErr || opcode == cqeRespErr) {
		cq.armed = 0
		cq.fired[cq.armSN] = true
		cq.events++
		h.events = append(h.events, cq.cqn)
	}
}
