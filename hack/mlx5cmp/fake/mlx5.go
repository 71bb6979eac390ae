//go:build linux

package fake

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// mlx5_ib's side of the commands: mlx5_ib_alloc_ucontext (main.c),
// create_cq_user (cq.c), create_user_qp and its checks (qp.c) and the UAR
// object (main.c).

const (
	invalidBfreg   = 1 << 31 // MLX5_IB_INVALID_BFREG
	defaultUIdx    = 0xffffff
	uidxMask       = 0xffffff // MLX5_USER_ASSIGNED_UIDX_MASK
	maxBfregs      = 512 * 2  // MLX5_MAX_UARS * MLX5_NON_FP_BFREGS_PER_UAR
	cqeSizeMinTail = 28       // bytes of mlx5_ib_create_cq up to reserved1
)

// allocUcontext is mlx5_ib_alloc_ucontext: the request's checks and the
// response of at most outLen bytes.
func (f *File) allocUcontext(in []byte, outLen int) (*ucontext, []byte, error) {
	p := f.k.p
	const v0 = int(unsafe.Sizeof(abi.Mlx5IbAllocUcontextReq{}))
	minV2 := int(unsafe.Offsetof(abi.Mlx5IbAllocUcontextReqV2{}.Max_cqe_version))
	full := int(unsafe.Sizeof(abi.Mlx5IbAllocUcontextReqV2{}))
	if len(in) != v0 && len(in) < minV2 {
		return nil, nil, refuse(syscall.EINVAL, fmt.Sprintf("request of %d bytes", len(in)))
	}
	for _, b := range in[min(len(in), full):] {
		if b != 0 {
			return nil, nil, refuse(syscall.EOPNOTSUPP, "non-zero bytes past mlx5_ib_alloc_ucontext_req_v2")
		}
	}
	req := fromBytes[abi.Mlx5IbAllocUcontextReqV2](in)
	if req.Flags&^abi.MLX5_IB_ALLOC_UCTX_DEVX != 0 {
		return nil, nil, refuse(syscall.EOPNOTSUPP, "unknown flags")
	}
	if req.Comp_mask != 0 || req.Reserved0 != 0 || req.Reserved1 != 0 || req.Reserved2 != 0 {
		return nil, nil, refuse(syscall.EOPNOTSUPP, "comp_mask or reserved fields")
	}
	tot := (req.Total_num_bfregs + 1) &^ 1 // ALIGN(, MLX5_NON_FP_BFREGS_PER_UAR)
	if req.Num_low_latency_bfregs > tot-1 {
		return nil, nil, refuse(syscall.EINVAL, "num_low_latency_bfregs > total_num_bfregs - 1")
	}
	ctx := &ucontext{lowLat: req.Num_low_latency_bfregs, bfregV2: len(in) >= minV2}
	ctx.dynUAR = p.DynUAR && req.Lib_caps&abi.MLX5_LIB_CAP_DYN_UAR != 0
	if !ctx.dynUAR {
		// calc_total_bfregs and allocate_uars: with 4 KiB system
		// pages a page is one UAR of two bfregs; its BlueFlame
		// registers are the driver's to map (mlx5_ib_mmap's
		// MLX5_IB_MMAP_REGULAR_PAGE, page index i at offset i pages).
		if tot > maxBfregs {
			return nil, nil, refuse(syscall.ENOMEM, "too many bfregs")
		}
		ctx.totBfregs = tot
		ctx.bfregUse = make([]uint32, tot)
		for i := uint32(0); i < tot/2; i++ {
			ctx.sysPages = append(ctx.sysPages, f.k.uarIdx)
			f.k.sysUARs = append(f.k.sysUARs, &UAR{File: f, PageID: f.k.uarIdx, Offset: uint64(i) * pageSize, Length: pageSize})
			f.k.uarIdx++
		}
	}
	if req.Flags&abi.MLX5_IB_ALLOC_UCTX_DEVX != 0 {
		if !p.DEVXUctx {
			return nil, nil, refuse(syscall.EINVAL, "no DEVX user context (mlx5_ib_devx_create)")
		}
		ctx.devxUID = true
	}
	ctx.cqeVersion = min(p.CQEVersion, req.Max_cqe_version)

	resp := p.Mlx5Context
	resp.Tot_bfregs = ctx.totBfregs
	resp.Cqe_version = ctx.cqeVersion
	resp.Comp_mask &^= abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE
	if p.ECE {
		resp.Comp_mask |= abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE
	}
	if req.Lib_caps&abi.MLX5_LIB_CAP_4K_UAR == 0 {
		resp.Log_uar_size, resp.Num_uars_per_page = 0, 0
	}
	n := min(outLen, int(unsafe.Sizeof(resp)))
	resp.Response_length = uint32(n)
	return ctx, bytesOf(&resp)[:n], nil
}

// SysUARs returns the static UAR pages of every open context (a context
// without dynamic UARs), in the order they were allocated. Their Handle is
// meaningless: they are the context's, not objects.
func (k *Kernel) SysUARs() []*UAR {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*UAR(nil), k.sysUARs...)
}

// dropSysUARs forgets a closed file's static UAR pages.
func (k *Kernel) dropSysUARs(f *File) {
	out := k.sysUARs[:0]
	for _, u := range k.sysUARs {
		if u.File != f {
			out = append(out, u)
		}
	}
	clear(k.sysUARs[len(out):])
	k.sysUARs = out
}

// allocBfreg is mlx5_ib's alloc_bfreg for a QP of a context with static
// UARs: with a v2 request, a free low-latency bfreg (the top
// num_low_latency_bfregs), else the least used of the medium ones (1 up
// to there); with none of either (or a v0 request), bfreg 0, which has no
// BlueFlame register and is shared by all.
func (ctx *ucontext) allocBfreg() uint32 {
	n := uint32(len(ctx.bfregUse))
	if ctx.bfregV2 && n > 0 {
		// num_med_bfreg: the bfregs neither low-latency nor bfreg 0.
		med := uint32(0)
		if n >= ctx.lowLat+1 {
			med = n - ctx.lowLat - 1
		}
		for i := med + 1; i < n; i++ {
			if ctx.bfregUse[i] == 0 {
				ctx.bfregUse[i]++
				return i
			}
		}
		if med > 0 {
			least := uint32(1)
			for i := uint32(1); i <= med; i++ {
				if ctx.bfregUse[i] < ctx.bfregUse[least] {
					least = i
				}
				if ctx.bfregUse[least] == 0 {
					break
				}
			}
			ctx.bfregUse[least]++
			return least
		}
	}
	ctx.bfregUse[0]++
	return 0
}

// freeBfreg is mlx5_ib_free_bfreg of a destroyed QP's static bfreg.
func (f *File) freeBfreg(qp *QP) {
	if qp.bfreg == 0 || f.ctx == nil || qp.bfreg > len(f.ctx.bfregUse) {
		return
	}
	f.ctx.bfregUse[qp.bfreg-1]--
	qp.bfreg = 0
}

// runUARAlloc is MLX5_IB_METHOD_UAR_OBJ_ALLOC: one 4 KiB UAR, mapped at
// the next free mmap entry of the context.
func runUARAlloc(c *call) error {
	f := c.f
	typ := c.u64(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE)
	if typ != abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF && typ != abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC {
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("UAR type %d", typ))
	}
	if typ == abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF && f.k.p.Mlx5Context.Bf_reg_size == 0 {
		return refuse(syscall.EOPNOTSUPP, "no write combining (bf_reg_size 0)")
	}
	entry := -1
	for i, used := range f.ctx.dynPages {
		if !used {
			entry = i
			break
		}
	}
	if entry < 0 {
		return refuse(syscall.ENOMEM, "mmap entries exhausted")
	}
	u := &UAR{File: f, NC: typ == abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC, PageID: f.k.uarIdx,
		Offset: uint64(dynUARFirstPage+entry) * pageSize, Length: pageSize, entry: entry}
	off, length, page := u.Offset, u.Length, u.PageID
	for _, e := range []error{
		c.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, bytesOf(&off)),
		c.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, bytesOf(&length)),
		c.out(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, bytesOf(&page)),
	} {
		if e != nil {
			return e
		}
	}
	f.k.uarIdx++
	f.ctx.dynPages[entry] = true
	u.Handle = f.alloc(objUAR, u)
	f.k.uars = append(f.k.uars, u)
	c.setNew(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, uint64(u.Handle))
	return nil
}

func runUARDestroy(c *call) error {
	h, _ := c.handle(abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE)
	u, ok := lookup[*UAR](c.f, objUAR, h)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no UAR %d", h))
	}
	c.f.destroyLocked(u)
	delete(c.f.ids[objUAR], h)
	return nil
}

// uarOwned is the UAR check the firmware makes for a context with a uid:
// the page must be one of this context's.
func (f *File) uarOwned(page uint32) (int, error) {
	off, ok := f.uarOffset(page)
	if !ok {
		return -1, refuse(syscall.EINVAL, fmt.Sprintf("UAR page %#x is not this context's", page))
	}
	return off, nil
}

// runCQCreate is the CQ_CREATE handler with mlx5_ib_create_cq and
// create_cq_user.
func runCQCreate(c *call) error {
	f, p := c.f, c.f.k.p
	cqe := c.u64(abi.UVERBS_ATTR_CREATE_CQ_CQE)
	vector := c.u64(abi.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR)
	if vector >= uint64(p.NumCompVectors) {
		return refuse(syscall.EINVAL, "comp_vector >= num_comp_vectors")
	}
	channel, err := c.fdOf(abi.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, "comp_channel")
	if err != nil {
		return err
	}
	if _, err := c.fdOf(abi.UVERBS_ATTR_CREATE_CQ_EVENT_FD, "async_event"); err != nil {
		return err
	}
	flags := c.u64(abi.UVERBS_ATTR_CREATE_CQ_FLAGS)
	// IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION | IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN
	if flags&^3 != 0 {
		return refuse(syscall.EOPNOTSUPP, "CQ flags")
	}
	maxCQ := uint64(1) << p.LogMaxCQSz
	if int32(cqe) < 0 || cqe > maxCQ {
		return refuse(syscall.EINVAL, fmt.Sprintf("cqe %d above 1<<log_max_cq_sz", cqe))
	}
	entries := roundupPow2(cqe + 1)
	if entries > maxCQ {
		return refuse(syscall.EINVAL, fmt.Sprintf("%d entries above 1<<log_max_cq_sz", entries))
	}
	in := c.in(abi.UVERBS_ATTR_UHW_IN)
	if len(in) < cqeSizeMinTail {
		return refuse(syscall.EFAULT, fmt.Sprintf("mlx5_ib_create_cq of %d bytes", len(in)))
	}
	ucmd := fromBytes[abi.Mlx5IbCreateCq](in)
	if ucmd.Flags&^(abi.MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD|abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX|abi.MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS) != 0 {
		return refuse(syscall.EINVAL, "mlx5 CQ flags")
	}
	if (ucmd.Cqe_size != 64 && ucmd.Cqe_size != 128) || ucmd.Reserved0 != 0 || ucmd.Reserved1 != 0 {
		return refuse(syscall.EINVAL, "cqe_size or reserved fields")
	}
	if ucmd.Cqe_comp_en != 0 && p.Mlx5QueryDevice.Cqe_comp_caps.Max_num == 0 {
		return refuse(syscall.EOPNOTSUPP, "CQE compression")
	}
	if !readable(c.m, ucmd.Buf_addr, entries*uint64(ucmd.Cqe_size)) {
		return refuse(syscall.EFAULT, "CQ buffer not mapped (ib_umem_get)")
	}
	if !readable(c.m, ucmd.Db_addr, 8) {
		return refuse(syscall.EFAULT, "doorbell record not mapped")
	}
	var page uint32
	switch {
	case c.has(abi.MLX5_IB_ATTR_CREATE_CQ_UAR_INDEX):
		page = uint32(c.u64(abi.MLX5_IB_ATTR_CREATE_CQ_UAR_INDEX))
	case ucmd.Flags&abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX != 0:
		page = uint32(ucmd.Uar_page_index)
	case f.ctx.dynUAR:
		return refuse(syscall.EINVAL, "dynamic UARs and no UAR page index")
	default:
		page = f.ctx.sysPages[0]
	}
	uarOff, err := f.uarOwned(page)
	if err != nil {
		return err
	}
	cq := &CQ{File: f, CQN: f.k.nextCQN, UserHandle: UserHandle(c.u64(abi.UVERBS_ATTR_CREATE_CQ_USER_HANDLE)),
		NCQE: int(entries), CQESize: int(ucmd.Cqe_size), Buf: Addr(ucmd.Buf_addr), DBRec: Addr(ucmd.Db_addr),
		UARPage: page, UAROffset: uarOff, CompVector: uint32(vector), CompChannel: channel,
		Flags: Hex(ucmd.Flags), CreateFlags: Hex(flags)}
	respCQE := uint32(entries - 1)
	if err := c.out(abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, bytesOf(&respCQE)); err != nil {
		return err
	}
	// mlx5 copies the CQN alone (sizeof(__u32)).
	if err := c.out(abi.UVERBS_ATTR_UHW_OUT, bytesOf(&cq.CQN)); err != nil {
		return err
	}
	f.k.nextCQN++
	cq.Handle = f.alloc(objCQ, cq)
	f.k.cqs = append(f.k.cqs, cq)
	c.setNew(abi.UVERBS_ATTR_CREATE_CQ_HANDLE, uint64(cq.Handle))
	return nil
}

// runQPCreate is the QP_CREATE handler with mlx5_ib_create_qp for user
// RC, UC, UD and XRC_INI QPs; XRC_TGT QPs are runXRCTgtCreate's.
func runQPCreate(c *call) error {
	f, p := c.f, c.f.k.p
	typ := uint32(c.u64(abi.UVERBS_ATTR_CREATE_QP_TYPE))
	switch typ {
	case 2, 3, 4, abi.IB_UVERBS_QPT_XRC_INI: // IB_UVERBS_QPT_RC, _UC, _UD
	case abi.IB_UVERBS_QPT_XRC_TGT:
		return runXRCTgtCreate(c)
	case 8, 0xff: // RAW_PACKET, DRIVER
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("QP type %d not emulated", typ))
	default:
		return refuse(syscall.EINVAL, fmt.Sprintf("QP type %d", typ))
	}
	xrcIni := typ == abi.IB_UVERBS_QPT_XRC_INI
	if c.has(abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE) || c.has(abi.UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE) || c.has(abi.UVERBS_ATTR_CREATE_QP_SOURCE_QPN) {
		return refuse(syscall.EINVAL, "XRCD, indirection table or source QPN for an RC/UC/UD/XRC_INI QP")
	}
	if xrcIni && c.has(abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE) {
		return refuse(syscall.EINVAL, "an SRQ for an XRC_INI QP")
	}
	if flags := c.u64(abi.UVERBS_ATTR_CREATE_QP_FLAGS); flags != 0 {
		// IB_UVERBS_QP_CREATE_* other than none need capabilities the
		// fake does not model.
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("create flags %#x", flags))
	}
	pdh, ok := c.handle(abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE)
	if !ok {
		return refuse(syscall.EINVAL, "no PD")
	}
	pd, ok := lookup[*PD](f, objPD, pdh)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no PD %d", pdh))
	}
	sch, ok := c.handle(abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE)
	if !ok {
		return refuse(syscall.EINVAL, "no send CQ")
	}
	scq, ok := lookup[*CQ](f, objCQ, sch)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no CQ %d", sch))
	}
	srqHandle := ^uint32(0)
	var srq *SRQ
	if h, ok := c.handle(abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE); ok {
		if srq, ok = lookup[*SRQ](f, objSRQ, h); !ok {
			return refuse(syscall.ENOENT, fmt.Sprintf("no SRQ %d", h))
		}
		srqHandle = h
	}
	var rcq *CQ
	if xrcIni {
		// The core does not take an XRC_INI QP's receive CQ, named or
		// not: the QP receives nothing.
	} else if h, ok := c.handle(abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE); ok {
		if rcq, ok = lookup[*CQ](f, objCQ, h); !ok {
			return refuse(syscall.ENOENT, fmt.Sprintf("no CQ %d", h))
		}
	} else {
		return refuse(syscall.EINVAL, "no receive CQ")
	}
	if _, err := c.fdOf(abi.UVERBS_ATTR_CREATE_QP_EVENT_FD, "async_event"); err != nil {
		return err
	}
	capIn := fromBytes[abi.IbUverbsQpCap](c.in(abi.UVERBS_ATTR_CREATE_QP_CAP))
	maxWR := uint32(1) << p.LogMaxQPSz
	if capIn.Max_send_wr > maxWR || capIn.Max_recv_wr > maxWR {
		return refuse(syscall.EINVAL, "max_send_wr or max_recv_wr above 1<<log_max_qp_sz")
	}
	if capIn.Max_send_sge > p.Device.Max_sge || capIn.Max_recv_sge > p.Device.Max_sge {
		return refuse(syscall.EINVAL, "max_send_sge or max_recv_sge above max_sge")
	}

	// process_udata_size: at least up to ece_options; the rest zero.
	in := c.in(abi.UVERBS_ATTR_UHW_IN)
	minIn := int(unsafe.Offsetof(abi.Mlx5IbCreateQp{}.Ece_options))
	full := int(unsafe.Sizeof(abi.Mlx5IbCreateQp{}))
	if len(in) < minIn {
		return refuse(syscall.EINVAL, fmt.Sprintf("mlx5_ib_create_qp of %d bytes", len(in)))
	}
	for _, b := range in[min(len(in), full):] {
		if b != 0 {
			return refuse(syscall.EINVAL, "non-zero bytes past mlx5_ib_create_qp")
		}
	}
	ucmd := fromBytes[abi.Mlx5IbCreateQp](in)
	allowed := uint32(abi.MLX5_QP_FLAG_SIGNATURE | abi.MLX5_QP_FLAG_SCATTER_CQE | abi.MLX5_QP_FLAG_BFREG_INDEX |
		abi.MLX5_QP_FLAG_UAR_PAGE_INDEX | abi.MLX5_QP_FLAG_ALLOW_SCATTER_CQE)
	if ucmd.Flags&^allowed != 0 {
		return refuse(syscall.EINVAL, fmt.Sprintf("mlx5 QP flags %#x", ucmd.Flags&^allowed))
	}
	// get_qp_user_index: with CQE version 1 the user index is required.
	uidx := uint32(defaultUIdx)
	if f.ctx.cqeVersion == 1 {
		if ucmd.Uidx == defaultUIdx || ucmd.Uidx&^uidxMask != 0 {
			return refuse(syscall.EINVAL, fmt.Sprintf("uidx %#x with CQE version 1", ucmd.Uidx))
		}
		uidx = ucmd.Uidx
	} else if ucmd.Uidx != defaultUIdx {
		// With version 0 a request long enough to hold uidx must hold
		// MLX5_IB_DEFAULT_UIDX there; anything else is refused.
		return refuse(syscall.EINVAL, fmt.Sprintf("uidx %#x with CQE version 0", ucmd.Uidx))
	}
	// set_rq_size: a QP on an SRQ, or an XRC one, has no receive queue
	// (!qp_has_rq): no ring whatever the driver says, and no receive
	// capabilities.
	if srq != nil || xrcIni {
		ucmd.Rq_wqe_count, ucmd.Rq_wqe_shift = 0, 0
		capIn.Max_recv_wr, capIn.Max_recv_sge = 0, 0
	}
	// set_rq_size (a QP without SRQ has an RQ).
	if ucmd.Rq_wqe_shift > 32 {
		return refuse(syscall.EINVAL, "rq_wqe_shift")
	}
	sig := uint32(0)
	if ucmd.Flags&abi.MLX5_QP_FLAG_SIGNATURE != 0 {
		sig = 1
	}
	if ucmd.Rq_wqe_count != 0 && (uint32(1)<<ucmd.Rq_wqe_shift)/16 < sig {
		return refuse(syscall.EINVAL, "RQ WQE too small for a signature")
	}
	// set_user_buf_size.
	if ucmd.Sq_wqe_count != 0 && !isPow2(uint64(ucmd.Sq_wqe_count)) {
		return refuse(syscall.EINVAL, fmt.Sprintf("sq_wqe_count %d not a power of two", ucmd.Sq_wqe_count))
	}
	if ucmd.Sq_wqe_count > maxWR {
		return refuse(syscall.EINVAL, "sq_wqe_count above 1<<log_max_qp_sz")
	}
	rqSize := uint64(ucmd.Rq_wqe_count) << ucmd.Rq_wqe_shift
	bufSize := rqSize + uint64(ucmd.Sq_wqe_count)<<6
	if bufSize > 0 && !readable(c.m, ucmd.Buf_addr, bufSize) {
		return refuse(syscall.EFAULT, "QP buffer not mapped (ib_umem_get)")
	}
	if !readable(c.m, ucmd.Db_addr, 8) {
		return refuse(syscall.EFAULT, "doorbell record not mapped")
	}
	// create_user_qp's UAR.
	var page uint32
	bfreg := uint32(invalidBfreg)
	staticBfreg := 0
	switch {
	case ucmd.Flags&abi.MLX5_QP_FLAG_BFREG_INDEX != 0:
		// A legacy dynamic bfreg, mapped by the driver with
		// MLX5_IB_MMAP_ALLOC_WC.
		return refuse(syscall.EOPNOTSUPP, "legacy dynamic bfregs (MLX5_QP_FLAG_BFREG_INDEX) not emulated")
	case ucmd.Flags&abi.MLX5_QP_FLAG_UAR_PAGE_INDEX != 0:
		page = ucmd.Bfreg_index
	case f.ctx.dynUAR:
		return refuse(syscall.EINVAL, "dynamic UARs and no UAR page index")
	default:
		// alloc_bfreg, then bfregn_to_uar_index (two bfregs a page) and
		// adjust_bfregn: the response names the bfreg among the
		// page's four registers (MLX5_BFREGS_PER_UAR), of which the
		// driver maps the first two.
		n := f.ctx.allocBfreg()
		staticBfreg = int(n) + 1
		page = f.ctx.sysPages[n/2]
		bfreg = n/2*4 + n%2
	}
	created := false
	defer func() {
		// create_user_qp's error path frees the bfreg it took.
		if !created && staticBfreg != 0 {
			f.ctx.bfregUse[staticBfreg-1]--
		}
	}()
	uarOff, err := f.uarOwned(page)
	if err != nil {
		return err
	}
	qp := &QP{File: f, QPN: f.k.nextQPN, Type: typ, UserHandle: UserHandle(c.u64(abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE)),
		PD: pdh, SendCQ: scq, RecvCQ: rcq, SRQ: srqHandle, Caps: *capIn,
		Buf: Addr(ucmd.Buf_addr), SQBuf: Addr(ucmd.Sq_buf_addr), DBRec: Addr(ucmd.Db_addr),
		RQWQECount: ucmd.Rq_wqe_count, RQWQEShift: ucmd.Rq_wqe_shift, SQWQECount: ucmd.Sq_wqe_count,
		RQOffset: 0, SQOffset: int(rqSize), Flags: Hex(ucmd.Flags), UIdx: uidx,
		UARPage: page, UAROffset: uarOff, BFOffset: uarOff + BFOffset, BFRegSize: int(p.Mlx5Context.Bf_reg_size)}
	if qp.bfreg = staticBfreg; qp.bfreg != 0 {
		// The kernel chose the register: the first or second of the
		// page (bfreg_index % MLX5_BFREGS_PER_UAR).
		qp.BFOffset += int(bfreg%4) * qp.BFRegSize
	}
	if p.ECE {
		qp.ECE = ucmd.Ece_options
	}
	qp.Attr.Sq_sig_all = 0
	resp := abi.Mlx5IbCreateQpResp{Bfreg_index: bfreg, Ece_options: qp.ECE}
	capOut := *capIn
	if err := c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, bytesOf(&capOut)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, bytesOf(&qp.QPN)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_UHW_OUT, bytesOf(&resp)); err != nil {
		return err
	}
	f.k.nextQPN++
	qp.Handle = f.alloc(objQP, qp)
	pd.users++
	scq.users++
	if rcq != nil {
		rcq.users++
	}
	if srq != nil {
		srq.users++
	}
	f.k.qps = append(f.k.qps, qp)
	created = true
	c.setNew(abi.UVERBS_ATTR_CREATE_QP_HANDLE, uint64(qp.Handle))
	return nil
}

// runXRCTgtCreate is QP_CREATE of an XRC_TGT QP: the core takes only the
// domain (no PD, CQs or indirection table) and creates the QP with
// ib_create_qp, which passes mlx5_ib no udata (create_xrc_tgt_qp): driver
// data that came with the call is ignored, and the QP has no queues,
// doorbell record, UAR or user index. What reaches it lands in the XRC
// SRQ each message names.
func runXRCTgtCreate(c *call) error {
	f := c.f
	if c.has(abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE) || c.has(abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE) ||
		c.has(abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE) || c.has(abi.UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE) {
		return refuse(syscall.EINVAL, "a PD, CQ or indirection table for an XRC_TGT QP")
	}
	xh, ok := c.handle(abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE)
	if !ok {
		return refuse(syscall.ENOENT, "an XRC_TGT QP without an XRCD")
	}
	x, ok := lookup[*XRCD](f, objXRCD, xh)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no XRCD %d", xh))
	}
	if flags := c.u64(abi.UVERBS_ATTR_CREATE_QP_FLAGS); flags != 0 {
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("create flags %#x", flags))
	}
	if c.has(abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE) {
		// An XRC_TGT QP takes an XRC SRQ only, and mlx5 uses none.
		return refuse(syscall.EINVAL, "an SRQ for an XRC_TGT QP")
	}
	if _, err := c.fdOf(abi.UVERBS_ATTR_CREATE_QP_EVENT_FD, "async_event"); err != nil {
		return err
	}
	capIn := fromBytes[abi.IbUverbsQpCap](c.in(abi.UVERBS_ATTR_CREATE_QP_CAP))
	qp := &QP{File: f, QPN: f.k.nextQPN, Type: abi.IB_UVERBS_QPT_XRC_TGT, XRCD: x, SRQ: ^uint32(0),
		UserHandle: UserHandle(c.u64(abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE)), PD: ^uint32(0),
		Caps: *capIn, UIdx: defaultUIdx, UAROffset: -1}
	capOut := *capIn
	if err := c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, bytesOf(&capOut)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, bytesOf(&qp.QPN)); err != nil {
		return err
	}
	f.k.nextQPN++
	qp.Handle = f.alloc(objQP, qp)
	x.users++
	f.k.qps = append(f.k.qps, qp)
	c.setNew(abi.UVERBS_ATTR_CREATE_QP_HANDLE, uint64(qp.Handle))
	return nil
}
