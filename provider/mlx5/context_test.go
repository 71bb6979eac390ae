package mlx5

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/seal"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Step 4 of docs/mlx5.md: the builders' driver data, byte for byte as the
// kernel reads it (struct layouts from internal/abi, native endian), the UAR
// mappings they ask for, and what they make of the kernel's answers. The
// fake kernel is the model's (model_test.go), which records every mmap.

var ne = nativeEndian{}

type nativeEndian struct{}

func (nativeEndian) u16(b []byte, off int) uint16 { return *(*uint16)(unsafe.Pointer(&b[off])) }
func (nativeEndian) u32(b []byte, off int) uint32 { return *(*uint32)(unsafe.Pointer(&b[off])) }
func (nativeEndian) u64(b []byte, off int) uint64 { return *(*uint64)(unsafe.Pointer(&b[off])) }

func TestFormatFWVer(t *testing.T) {
	if s := (Driver{}).FormatFWVer(16<<32 | 35<<16 | 1012); s != "16.35.1012" {
		t.Errorf("FormatFWVer = %q", s)
	}
	if s := (Driver{}).FormatFWVer(12<<32 | 28<<16 | 2); s != "12.28.0002" {
		t.Errorf("FormatFWVer = %q", s)
	}
	if (Driver{}).Name() != "mlx5" {
		t.Error("name")
	}
}

func TestContextUdata(t *testing.T) {
	for _, page := range []int{4096, 65536} {
		b := newContextBuilder(nil, page)
		in, out := b.Udata()
		if len(in) != abi.SizeofMlx5IbAllocUcontextReqV2 || len(out) != abi.SizeofMlx5IbAllocUcontextResp {
			t.Fatalf("udata %d/%d bytes", len(in), len(out))
		}
		// get_total_uuars / get_num_low_lat_uuars: 16 and 4 with 4K pages;
		// a 64K page holds 16 UARs, 32 registers, of which all but 12 are
		// low-latency.
		wantTot, wantLow := uint32(16), uint32(4)
		if page == 65536 {
			wantTot, wantLow = 32, 20
		}
		if tot, low := ne.u32(in, 0), ne.u32(in, 4); tot != wantTot || low != wantLow {
			t.Errorf("page %d: total_num_bfregs %d, num_low_latency_bfregs %d; want %d, %d", page, tot, low, wantTot, wantLow)
		}
		if flags, mask, cqeVer, caps := ne.u32(in, 8), ne.u32(in, 12), in[16], ne.u64(in, 24); flags != 0 || mask != 0 || cqeVer != 1 || caps != abi.MLX5_LIB_CAP_4K_UAR|abi.MLX5_LIB_CAP_DYN_UAR {
			t.Errorf("flags %#x comp_mask %#x max_cqe_version %d lib_caps %#x", flags, mask, cqeVer, caps)
		}
	}
}

// TestContextUARs: the static registers of a kernel without dynamic UARs.
func TestContextUARs(t *testing.T) {
	h := newHCA(t)
	h.dyn = false
	c := h.openContext()
	page := h.pageSize
	pages := int(h.totBf) / nonFPBfregsPerUAR / (page / adapterPageSize)
	if len(h.mmaps) != pages {
		t.Fatalf("mapped %d UAR pages, want %d: %v", len(h.mmaps), pages, h.mmaps)
	}
	for i, off := range h.mmaps {
		// MLX5_MMAP_GET_REGULAR_PAGES_CMD (0) << 8 | index, in pages.
		if off != int64(i*page) {
			t.Errorf("UAR page %d at mmap offset %#x, want %#x", i, off, i*page)
		}
	}
	if len(c.bfs) != int(h.totBf)/2*4 {
		t.Fatalf("%d BlueFlame registers", len(c.bfs))
	}
	for i := range c.bfs {
		bf := &c.bfs[i]
		uar := i / bfregsPerUAR
		want := unsafe.Pointer(&c.uars[uar/(page/adapterPageSize)][uar%(page/adapterPageSize)*adapterPageSize+bfOffset+i%4*modelBfRegSize])
		if bf.reg != want {
			t.Errorf("register %d at %p, want %p", i, bf.reg, want)
		}
		// need_uuar_lock: registers 0 and low-latency (kernel numbers
		// 12..15 of 16, gross 24, 25, 28, 29) are lock-free.
		n := i/2 + i%2
		if wantLock := i != 0 && n < int(h.totBf-h.lowLat); (bf.mu != nil) != wantLock {
			t.Errorf("register %d (kernel %d): lock %v", i, n, bf.mu != nil)
		}
		if (i == 0) != (bf.bufSize == 0) {
			t.Errorf("register %d: BlueFlame half of %d bytes", i, bf.bufSize)
		}
	}
	if c.cqDB != unsafe.Pointer(&c.uars[0][cqDoorbellOffset]) {
		t.Error("CQ doorbell is not UAR 0 + 0x20")
	}
	if err := c.Close(); err != nil || h.munmaps != pages {
		t.Errorf("Close: %v, %d unmaps", err, h.munmaps)
	}
}

func TestContextRefusesAnswers(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*abi.Mlx5IbAllocUcontextResp)
	}{
		{"CQE version 2", func(r *abi.Mlx5IbAllocUcontextResp) { r.Cqe_version = 2 }},
		{"registers past the UAR", func(r *abi.Mlx5IbAllocUcontextResp) { r.Bf_reg_size = 1024 }},
		{"odd register count", func(r *abi.Mlx5IbAllocUcontextResp) { r.Tot_bfregs = 15 }},
	} {
		h := newHCA(t)
		h.dyn = false
		b := newContextBuilder(h, h.pageSize)
		in, out := b.Udata()
		if err := h.allocUcontext(in, out); err != nil {
			t.Fatal(err)
		}
		c.edit(&b.resp)
		if _, err := b.Finish(provider.Created{}); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	// With dynamic UARs: UARs larger than the page, registers past the UAR.
	for _, edit := range []func(*abi.Mlx5IbAllocUcontextResp){
		func(r *abi.Mlx5IbAllocUcontextResp) { r.Num_uars_per_page = 64 },
		func(r *abi.Mlx5IbAllocUcontextResp) { r.Bf_reg_size = 2048 },
	} {
		h := newHCA(t)
		b := newContextBuilder(h, h.pageSize)
		in, out := b.Udata()
		h.allocUcontext(in, out)
		edit(&b.resp)
		if _, err := b.Finish(provider.Created{}); err == nil {
			t.Errorf("dynamic UAR answer %+v accepted", b.resp)
		}
	}
	// A failing UAR mapping unmaps what was mapped.
	h := newHCA(t)
	h.dyn = false
	b := newContextBuilder(h, h.pageSize)
	in, out := b.Udata()
	h.allocUcontext(in, out)
	b.resp.Tot_bfregs = 2 * maxUARs // more pages than the kernel serves
	h.totBf = 4
	if _, err := b.Finish(provider.Created{}); err == nil || h.munmaps != len(h.mmaps)-1 {
		t.Errorf("failed mapping: %v, %d maps, %d unmaps", err, len(h.mmaps), h.munmaps)
	}
}

func TestCQUdata(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	if _, err := c.NewCQ(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("CQ of 0 entries: %v", err)
	}
	b, err := c.NewCQ(100)
	if err != nil {
		t.Fatal(err)
	}
	cb := b.(*cqBuilder)
	in := request(t, b, abi.SizeofMlx5IbCreateCq, abi.SizeofMlx5IbCreateCqResp)
	buf, db, size := ne.u64(in, 0), ne.u64(in, 8), ne.u32(in, 16)
	if buf != addrOf(cb.mem) || buf%uint64(h.pageSize) != 0 || db != uint64(uintptr(cb.db)) || size != 64 || cb.ncqe != 128 {
		t.Errorf("create CQ: buf %#x db %#x cqe_size %d for %d entries", buf, db, size, cb.ncqe)
	}
	// With dynamic UARs the CQ names the non-cached UAR by page id.
	if ne.u16(in, 20) != 0 || ne.u16(in, 22) != abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX || uint32(ne.u16(in, 24)) != c.ncUAR.pageID || !c.ncUAR.nc {
		t.Errorf("CQE compression %#x, flags %#x, UAR page index %#x", ne.u16(in, 20), ne.u16(in, 22), ne.u16(in, 24))
	}
	// The kernel sized the CQ differently: refused, memory freed.
	if _, err := b.Finish(provider.Created{CQE: 63}); err == nil || cb.mem != nil {
		t.Errorf("CQ of 64 over a 128-entry buffer: %v", err)
	}
	b, _ = c.NewCQ(1)
	b.Abort()
	if b.(*cqBuilder).mem != nil || len(c.db.pages) != 0 {
		t.Error("Abort kept memory")
	}
}

// TestCQE128Udata: MLX5_CQE_SIZE=128 makes CQs of 128-byte entries, each
// marked invalid in its second half, where the 64-byte CQE is; sizes
// other than 64 and 128 refuse CQ creation, as rdma-core's get_cqe_size.
func TestCQE128Udata(t *testing.T) {
	t.Setenv("MLX5_CQE_SIZE", "128")
	h := newHCA(t)
	c := h.openContext()
	b, err := c.NewCQ(3)
	if err != nil {
		t.Fatal(err)
	}
	cb := b.(*cqBuilder)
	in, _ := b.Udata()
	if size := ne.u32(in, 16); size != 128 || cb.ncqe != 4 || cb.size != 128 {
		t.Errorf("cqe_size %d, %d entries of %d", size, cb.ncqe, cb.size)
	}
	for i := 0; i < 4*128; i++ {
		want := byte(0)
		if i%128 == 127 {
			want = cqeInvalidOpOwn
		}
		if cb.mem[i] != want {
			t.Fatalf("CQ buffer byte %d is %#x, want %#x", i, cb.mem[i], want)
		}
	}
	b.Abort()
	for _, v := range []string{"256", "32", "x"} {
		t.Setenv("MLX5_CQE_SIZE", v)
		c := newHCA(t).openContext()
		if _, err := c.NewCQ(3); !errors.Is(err, unix.EINVAL) {
			t.Errorf("MLX5_CQE_SIZE=%s: %v", v, err)
		}
	}
}

// TestModelCQE128 runs the end-to-end model tests with 128-byte CQEs, on
// devices of both CQE versions.
func TestModelCQE128(t *testing.T) {
	t.Setenv("MLX5_CQE_SIZE", "128")
	for _, old := range []bool{false, true} {
		modelOldCQE = old
		for name, f := range map[string]func(*testing.T){
			"SendRecv": TestModelSendRecv, "RDMAAndAtomics": TestModelRDMAAndAtomics, "RingWrap": TestModelRingWrap,
			"Errors": TestModelErrors, "SRQ": TestModelSRQ, "UD": TestModelUD, "Arm": TestModelArm,
			"DestroyCleansCQ": TestModelDestroyCleansCQ, "HotPathAllocs": TestModelHotPathAllocs,
			"XRCSend": testModelXRCSend, "XRCRecv": testModelXRCRecv,
		} {
			t.Run(fmt.Sprintf("%s/v%d", name, map[bool]int{false: 1, true: 0}[old]), f)
		}
	}
	modelOldCQE = false
}

func TestQPUdata(t *testing.T) {
	h := newHCA(t)
	h.ece = true
	h.dyn = false // the kernel picks the registers (TestDynamicUARs: the provider)
	c := h.openContext()
	if _, err := c.NewQP(provider.QPInitAttr{Type: 8, Caps: pairCaps}); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("raw packet QP: %v", err)
	}
	if _, err := c.NewQP(provider.QPInitAttr{Type: qp.RC, Caps: qp.Caps{MaxSendWR: 1, MaxSendSGE: 30}}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("30 SGEs: %v", err)
	}
	attr := provider.QPInitAttr{Type: qp.RC, Caps: qp.Caps{MaxSendWR: 64, MaxRecvWR: 100, MaxSendSGE: 1, MaxRecvSGE: 3}}
	b, err := c.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	qb := b.(*qpBuilder)
	in := request(t, b, abi.SizeofMlx5IbCreateQp, abi.SizeofMlx5IbCreateQpResp)
	// RC, 64 x 1 SGE: 256-byte WQEs (room for a memory-window bind), 256
	// BBs; 100 receives of 3 SGEs: 128 WQEs of 64 bytes.
	if buf, db := ne.u64(in, 0), ne.u64(in, 8); buf != addrOf(qb.mem) || db != uint64(uintptr(qb.db)) {
		t.Errorf("buf %#x db %#x", buf, db)
	}
	if sq, rq, shift := ne.u32(in, 16), ne.u32(in, 20), ne.u32(in, 24); sq != 256 || rq != 128 || shift != 6 {
		t.Errorf("sq_wqe_count %d rq_wqe_count %d rq_wqe_shift %d", sq, rq, shift)
	}
	if flags, uidx, bfreg, sqBuf, ece := ne.u32(in, 28), ne.u32(in, 32), ne.u32(in, 36), ne.u64(in, 40), ne.u32(in, 48); flags != 0 || uidx != 0 || bfreg != 0 || sqBuf != 0 || ece != 0x10000000 {
		t.Errorf("flags %#x uidx %#x bfreg_index %d sq_buf_addr %#x ece %#x", flags, uidx, bfreg, sqBuf, ece)
	}
	if len(qb.mem) != 256*64+128*64 {
		t.Errorf("QP buffer of %d bytes", len(qb.mem))
	}
	// A register index past the context's: refused.
	qb.resp.Bfreg_index = uint32(len(c.bfs))
	if _, err := b.Finish(provider.Created{QPNum: 5, Caps: attr.Caps}); err == nil || qb.mem != nil {
		t.Errorf("bfreg past the end: %v", err)
	}
	// The kernel hands out low-latency registers first, then shares the
	// medium ones; each QP uses the register it was told.
	seen := map[*bfReg]int{}
	for range 8 {
		q, hq := h.createQP(c, attr, nil, nil, nil)
		if q.bf != &c.bfs[hq.bfreg] {
			t.Fatalf("QP on register %d, kernel said %d", q.bf.uuarn, hq.bfreg)
		}
		seen[q.bf]++
	}
	locked := 0
	for bf, n := range seen {
		if bf.mu == nil && n != 1 {
			t.Errorf("lock-free register %d shared by %d QPs", bf.uuarn, n)
		}
		if bf.mu != nil {
			locked++
		}
	}
	if locked == 0 {
		t.Error("no QP got a shared (medium) register")
	}
	// A QP on an SRQ has no receive queue.
	srq, hsrq := h.createSRQ(c, provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	q, _ := h.createQP(c, provider.QPInitAttr{Type: qp.UD, Caps: qp.Caps{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 4}, HasSRQ: true}, nil, nil, hsrq)
	if q.rq != nil || q.sq == nil || q.srq != srq {
		t.Error("QP on an SRQ")
	}
}

func TestSRQUdata(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	b, err := c.NewSRQ(provider.SRQInitAttr{MaxWR: 100, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	sb := b.(*srqBuilder)
	in := request(t, b, abi.SizeofMlx5IbCreateSrq, abi.SizeofMlx5IbCreateSrqResp)
	if buf, db, flags, uidx := ne.u64(in, 0), ne.u64(in, 8), ne.u32(in, 16), ne.u32(in, 24); buf != addrOf(sb.mem) || db != uint64(uintptr(sb.db)) || flags != 0 || uidx != 0 {
		t.Errorf("buf %#x db %#x flags %#x uidx %#x", buf, db, flags, uidx)
	}
	if sb.size.nwqe != 128 || sb.size.wqeShift != 5 {
		t.Errorf("SRQ of %d WQEs of %d bytes", sb.size.nwqe, 1<<sb.size.wqeShift)
	}
	if _, err := b.Finish(provider.Created{}); err == nil || sb.mem != nil {
		t.Error("SRQ number 0 accepted")
	}
	if _, err := c.NewSRQ(provider.SRQInitAttr{MaxWR: modelMaxSRQWR + 1, MaxSGE: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("SRQ deeper than the device: %v", err)
	}
}

func TestAH(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	attr := qp.AHAttr{DLID: 0x12, SL: 9, SrcPathBits: 0x81, StaticRate: 3, PortNum: 1}
	ib := h.createAH(c, attr, false, [6]byte{})
	if getBE16(unsafe.Pointer(&ib.av[avOffRLID])) != 0x12 || ib.av[avOffRateSL] != 8<<4|9 || ib.av[avOffFlMLID] != 1 || ib.av[avOffGrhGidFl] != 0 {
		t.Errorf("IB AV % x", ib.av)
	}
	if d := (dest{ib}).Dest(); seal.Value(&d) != ib {
		t.Error("the AH does not travel in a wr.AH")
	}
	// RoCE needs a GRH; the kernel answered the MAC.
	b, _ := c.NewAH(attr)
	_, out := b.Udata()
	(*abi.Mlx5IbCreateAhResp)(unsafe.Pointer(&out[0])).Response_length = 10
	if _, err := b.Finish(provider.Created{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RoCE AH without GRH: %v", err)
	}
	attr.IsGlobal, attr.FlowLabel = true, 0x12345
	roce := h.createAH(c, attr, true, [6]byte{1, 2, 3, 4, 5, 6})
	if getBE16(unsafe.Pointer(&roce.av[avOffRLID])) != 0xe341 || roce.av[avOffRateSL] != 8<<4|1<<1 || roce.av[avOffRMAC] != 1 || getBE32(unsafe.Pointer(&roce.av[avOffGrhGidFl]))>>30 != 0 {
		t.Errorf("RoCE AV % x", roce.av)
	}
}

func TestDoorbellRecordPages(t *testing.T) {
	a := dbAllocator{line: 64, pageSize: 4096}
	var recs []unsafe.Pointer
	for range 65 {
		r, err := a.alloc()
		if err != nil {
			t.Fatal(err)
		}
		if uintptr(r)%64 != 0 {
			t.Fatalf("record %p not on a cache line", r)
		}
		recs = append(recs, r)
	}
	if len(a.pages) != 2 {
		t.Fatalf("%d pages for 65 records of 64 bytes", len(a.pages))
	}
	a.free(recs[64])
	if len(a.pages) != 1 {
		t.Error("empty page kept")
	}
	a.free(recs[3])
	r, _ := a.alloc()
	if r != recs[3] {
		t.Error("freed record not reused")
	}
	a.close()
}

// TestUserIndexes: under CQE version 1 (the model's default) every QP and
// SRQ gets its own user index, freed ones are reused, and a failed
// creation gives its index back; under version 0 they all send
// MLX5_IB_DEFAULT_UIDX and QPs are found by number.
func TestUserIndexes(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	if c.cqeVersion != 1 {
		t.Fatalf("CQE version %d", c.cqeVersion)
	}
	cq, hcq := h.createCQ(c, 8)
	_ = cq
	caps := qp.Caps{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 4, MaxRecvSGE: 1}
	srq, hsrq := h.createSRQ(c, provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	a, ha := h.createQP(c, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	b, hb := h.createQP(c, provider.QPInitAttr{Type: qp.RC, Caps: caps, HasSRQ: true}, hcq, hcq, hsrq)
	if srq.uidx != 0 || a.rsn != 1 || b.rsn != 2 || ha.uidx != 1 || hb.uidx != 2 || b.srq != srq {
		t.Fatalf("user indexes: SRQ %d, QPs %d %d (kernel saw %d %d)", srq.uidx, a.rsn, b.rsn, ha.uidx, hb.uidx)
	}
	if c.t.uidx.get(1) != a || c.t.qps.get(ha.qpn) != nil {
		t.Error("QP not found by user index, or found by number")
	}
	h.destroyQP(a, ha)
	if c.t.uidx.get(1) != nil {
		t.Error("destroyed QP still found")
	}
	a2, ha2 := h.createQP(c, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	if a2.rsn != 1 || ha2.uidx != 1 {
		t.Errorf("freed user index not reused: %d", a2.rsn)
	}
	qb, err := c.NewQP(provider.QPInitAttr{Type: qp.RC, Caps: caps})
	if err != nil {
		t.Fatal(err)
	}
	u := qb.(*qpBuilder).cmd.Uidx
	qb.Abort()
	if v, _ := c.uidx.alloc(); v != u {
		t.Errorf("aborted QP's index %d not reused (got %d)", u, v)
	}
	// An SRQ that is not mlx5's cannot serve a QP under version 1.
	if _, err := c.NewQP(provider.QPInitAttr{Type: qp.RC, Caps: caps, HasSRQ: true}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QP on an unknown SRQ: %v", err)
	}
	// With every index taken a create fails, and gives back no index it
	// did not get: the allocator must never hand out the default one.
	c.uidx.free, c.uidx.next = nil, defaultUIDX
	if _, err := c.NewSRQ(provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1}); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("SRQ without a free user index: %v", err)
	}
	if len(c.uidx.free) != 0 {
		t.Errorf("failed create freed user indexes %#x", c.uidx.free)
	}

	h0 := newHCA(t)
	h0.oldCQE = true
	c0 := h0.openContext()
	_, hcq0 := h0.createCQ(c0, 8)
	srq0, _ := h0.createSRQ(c0, provider.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	q0, hq0 := h0.createQP(c0, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq0, hcq0, nil)
	if c0.cqeVersion != 0 || srq0.uidx != defaultUIDX || q0.rsn != hq0.qpn || hq0.uidx != defaultUIDX || c0.t.qps.get(hq0.qpn) != q0 {
		t.Errorf("CQE version 0: version %d, SRQ index %#x, QP rsn %#x index %#x", c0.cqeVersion, srq0.uidx, q0.rsn, hq0.uidx)
	}
}

// TestModelCQEVersion0 runs the end-to-end model tests against a device
// of CQE version 0 (older ConnectX and kernels), where CQEs name QPs and
// SRQs by number.
func TestModelCQEVersion0(t *testing.T) {
	runModelVariant(t, &modelOldCQE, map[string]func(*testing.T){
		"SendRecv": TestModelSendRecv, "RDMAAndAtomics": TestModelRDMAAndAtomics, "RingWrap": TestModelRingWrap,
		"Errors": TestModelErrors, "SRQ": TestModelSRQ, "UD": TestModelUD, "DestroyCleansCQ": TestModelDestroyCleansCQ,
		"Refusals": TestModelRefusals, "HotPathAllocs": TestModelHotPathAllocs,
	})
}

// TestModelStaticUAR runs the end-to-end model tests against a kernel
// without dynamic UARs, which allocates static registers with the context.
func TestModelStaticUAR(t *testing.T) {
	runModelVariant(t, &modelStaticUAR, map[string]func(*testing.T){
		"SendRecv": TestModelSendRecv, "RDMAAndAtomics": TestModelRDMAAndAtomics, "RingWrap": TestModelRingWrap,
		"BlueFlame": TestModelBlueFlame, "Errors": TestModelErrors, "SRQ": TestModelSRQ, "UD": TestModelUD,
		"Arm": TestModelArm, "DestroyCleansCQ": TestModelDestroyCleansCQ, "Refusals": TestModelRefusals,
		"HotPathAllocs": TestModelHotPathAllocs, "XRCRecv": testModelXRCRecv,
	})
}

// runModelVariant runs end-to-end model tests with the model's knob set,
// as another kind of device or kernel.
func runModelVariant(t *testing.T, knob *bool, tests map[string]func(*testing.T)) {
	*knob = true
	defer func() { *knob = false }()
	for name, f := range tests {
		t.Run(name, f)
	}
}

// request checks that a builder's driver data has the sizes of its
// request and response structs, and returns the request.
func request[P any](t *testing.T, b provider.Builder[P], inSize, outSize int) []byte {
	t.Helper()
	in, out := b.Udata()
	if len(in) != inSize || len(out) != outSize {
		t.Fatalf("udata %d/%d bytes, want %d/%d", len(in), len(out), inSize, outSize)
	}
	return in
}

// TestDynamicUARs: with dynamic UARs the provider allocates them as
// rdma-core's mlx5_get_qp_uar does (a non-cached one for CQs; dedicated
// BlueFlame registers up to the low-latency count, then shared, locked
// ones, least used first), names them by page id, and gives each back to
// the kernel, unmapped, when its last user goes, on every failure path and
// when the context closes.
func TestDynamicUARs(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	if !c.dyn || len(h.dynUARs) != 0 || len(h.mmaps) != 0 {
		t.Fatalf("dynamic context allocated %d UARs, mapped %v up front", len(h.dynUARs), h.mmaps)
	}
	perUAR := h.pageSize / adapterPageSize * nonFPBfregsPerUAR
	low, tot := int(c.lowLatUUARs), int(c.totUUARs)

	cq1, hcq := h.createCQ(c, 8)
	cq2, _ := h.createCQ(c, 8)
	if h.liveUARs() != 1 || cq1.uar != cq2.uar || !cq1.uar.nc || cq1.armDB != unsafe.Pointer(&cq1.uar.mem[cqDoorbellOffset]) {
		t.Fatalf("two CQs: %d UARs; CQ UARs %p, %p", h.liveUARs(), cq1.uar, cq2.uar)
	}

	attr := provider.QPInitAttr{Type: qp.RC, Caps: qp.Caps{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 4, MaxRecvSGE: 1}}
	var qps []*QP
	var hws []*hwQP
	for range tot + 4 {
		q, hq := h.createQP(c, attr, hcq, hcq, nil)
		if &hq.uarPage[0] != &q.bf.uar.mem[int(q.bf.pageID-q.bf.uar.pageID)*adapterPageSize] {
			t.Fatalf("QP names page %#x; its register is in another", q.bf.pageID)
		}
		qps, hws = append(qps, q), append(hws, hq)
	}
	seen := map[*bfReg]bool{}
	for i, q := range qps {
		shared := i >= low
		if q.bf.uar.shared != shared || (q.bf.mu != nil) != shared || q.bfMax != modelBfRegSize/2 {
			t.Errorf("QP %d: shared UAR %v, lock %v, BlueFlame %d bytes", i, q.bf.uar.shared, q.bf.mu != nil, q.bfMax)
		}
		if !shared && seen[q.bf] {
			t.Errorf("QP %d shares a dedicated register", i)
		}
		seen[q.bf] = true
	}
	var minUse, maxUse = 1 << 30, 0
	for _, r := range c.shared {
		minUse, maxUse = min(minUse, r.users), max(maxUse, r.users)
	}
	if maxUse-minUse > 1 {
		t.Errorf("shared registers used %d to %d times: not least-used first", minUse, maxUse)
	}
	wantBF := (low+perUAR-1)/perUAR + (tot-low+perUAR-1)/perUAR
	if h.liveUARs() != 1+wantBF {
		t.Errorf("%d UARs for %d QPs, want 1 non-cached and %d BlueFlame", h.liveUARs(), len(qps), wantBF)
	}
	// Every QP's doorbell reaches the model through its register.
	buf := make([]byte, 64)
	k := h.regMR(buf, wr.LocalWrite|wr.RemoteWrite)
	w := wr.SendWR{Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: addrOfBuf(buf), Length: 8, LKey: k}}, Remote: wr.Remote{Addr: addrOfBuf(buf) + 8, RKey: k}}
	for _, q := range qps {
		if n, err := q.PostSend([]wr.SendWR{w}); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		h.run()
		pollN(t, cq1, 1)
	}
	if err := cq1.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	h.run()
	if hcq.armed == 0 {
		t.Error("arming through the non-cached UAR did not reach the model")
	}

	// A dedicated register given back goes to the next QP; its UAR stays
	// while another QP uses it.
	freed := qps[0].bf
	h.destroyQP(qps[0], hws[0])
	q, hq := h.createQP(c, attr, hcq, hcq, nil)
	if q.bf != freed || h.liveUARs() != 1+wantBF {
		t.Errorf("a freed dedicated register was not reused (%d UARs)", h.liveUARs())
	}
	qps[0], hws[0] = q, hq
	if err := q.Close(); err != nil || q.Close() != nil {
		t.Error("QP Close twice:", err)
	}
	delete(h.qps, hq.qpn)
	// The last QP of each UAR takes it away: unmapped, then destroyed.
	for i := 1; i < len(qps); i++ {
		h.destroyQP(qps[i], hws[i])
	}
	if h.liveUARs() != 1 || len(c.dedFree) != 0 || len(c.shared) != 0 || c.dedRegs != 0 || c.sharedRegs != 0 {
		t.Errorf("after every QP: %d UARs, %d free dedicated, %d shared registers", h.liveUARs(), len(c.dedFree), len(c.shared))
	}
	cq1.Close()
	if h.liveUARs() != 1 {
		t.Error("the non-cached UAR went while a CQ uses it")
	}
	cq2.Close()
	if err := cq2.Close(); err != nil || h.liveUARs() != 0 || c.ncUAR != nil {
		t.Errorf("after the last CQ: %v, %d UARs", err, h.liveUARs())
	}
	h.checkUARsReleased()

	// Failure paths: a refused allocation, a refused mapping and an aborted
	// builder leave nothing allocated, mapped or pinned.
	h.failUAR = 1
	if _, err := c.NewCQ(4); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("CQ without a UAR: %v", err)
	}
	h.failUAR = 1
	if _, err := c.NewQP(attr); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("QP without a UAR: %v", err)
	}
	h.failMmap = true
	if _, err := c.NewQP(attr); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("QP with an unmappable UAR: %v", err)
	}
	h.failMmap = false
	if h.liveUARs() != 0 || len(c.db.pages) != 0 || len(c.live) != 0 {
		t.Errorf("after failed creations: %d UARs, %d doorbell pages", h.liveUARs(), len(c.db.pages))
	}
	b, err := c.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	b.Abort()
	b.Abort()
	cb, err := c.NewCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	cb.Abort()
	if h.liveUARs() != 0 || len(c.db.pages) != 0 {
		t.Errorf("after aborted builders: %d UARs, %d doorbell pages", h.liveUARs(), len(c.db.pages))
	}
	h.checkUARsReleased()

	// Closing the context with objects left frees every UAR once.
	h.createCQ(c, 4)
	h.createQP(c, attr, hcq, hcq, nil)
	if err := c.Close(); err != nil || c.Close() != nil {
		t.Errorf("Close: %v", err)
	}
	h.checkUARsReleased()

	// Without write combining there are no BlueFlame UARs: QPs ring the
	// non-cached one with 8-byte doorbells, as mlx5_get_qp_uar falls back.
	h = newHCA(t)
	h.noWC = true
	c = h.openContext()
	_, hcq = h.createCQ(c, 4)
	q, _ = h.createQP(c, attr, hcq, hcq, nil)
	if q.bf != &c.ncUAR.regs[0] || q.bfMax != 0 || q.bf.mu != nil || len(h.uarCalls) != 1 || h.uarCalls[0] != "nc" {
		t.Errorf("no write combining: register %+v, UAR calls %v", q.bf, h.uarCalls)
	}
}
