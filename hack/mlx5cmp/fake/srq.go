//go:build linux

package fake

import (
	"fmt"
	"sort"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// Basic SRQs: UVERBS_METHOD_SRQ_CREATE and _DESTROY
// (uverbs_std_types_srq.c) with mlx5_ib_create_srq and create_srq_user's
// checks and sizing (srq.c), and a QP attached to one (QP_CREATE's
// SRQ_HANDLE: the QP then has no receive queue, set_rq_size's !has_rq).

// srqnBase is the first SRQ number: made up, in the range real devices
// hand out (the profile has no base for SRQs).
const srqnBase = 0x300

// SRQ is a shared receive queue. Its ring is Buf: WQECount WQEs of
// 1<<WQEShift bytes, each a struct mlx5_wqe_srq_next_seg (the index of
// the next free WQE at +2) and data segments; DBRec holds the count of
// receives posted (big endian).
type SRQ struct {
	Handle     uint32
	SRQN       uint32
	File       *File
	UserHandle UserHandle
	PD         uint32
	Buf        Addr
	DBRec      Addr
	WQECount   uint32
	WQEShift   uint32
	MaxSGE     uint32 // data segments a WQE holds (max_avail_gather)
	Flags      Hex
	users      int
	// An XRC SRQ's domain, the CQ its receives complete on, and the
	// user index its CQEs carry under CQE version 1 (else
	// MLX5_IB_DEFAULT_UIDX). A basic SRQ has none of them.
	XRCD *XRCD
	CQ   *CQ
	UIdx uint32
}

func init() {
	for _, m := range []*methodSpec{
		{object: abi.UVERBS_OBJECT_SRQ, method: abi.UVERBS_METHOD_SRQ_CREATE, objName: "SRQ", name: "SRQ_CREATE",
			run: runSRQCreate,
			attrs: append([]attrSpec{
				idr(abi.UVERBS_ATTR_CREATE_SRQ_HANDLE, "HANDLE", idrNew, true),
				idr(abi.UVERBS_ATTR_CREATE_SRQ_PD_HANDLE, "PD_HANDLE", idrRead, true),
				constIn(abi.UVERBS_ATTR_CREATE_SRQ_TYPE, "TYPE", true),
				u64In(abi.UVERBS_ATTR_CREATE_SRQ_USER_HANDLE, "USER_HANDLE", true),
				u32In(abi.UVERBS_ATTR_CREATE_SRQ_MAX_WR, "MAX_WR", true),
				u32In(abi.UVERBS_ATTR_CREATE_SRQ_MAX_SGE, "MAX_SGE", true),
				u32In(abi.UVERBS_ATTR_CREATE_SRQ_LIMIT, "LIMIT", true),
				idr(abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE, "XRCD_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE, "CQ_HANDLE", idrRead, false),
				u32In(abi.UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS, "MAX_NUM_TAGS", false),
				idr(abi.UVERBS_ATTR_CREATE_SRQ_EVENT_FD, "EVENT_FD", fdRead, false),
				outOf[uint32](abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, "RESP_MAX_WR", -1, true),
				outOf[uint32](abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, "RESP_MAX_SGE", -1, true),
				outOf[uint32](abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM, "RESP_SRQ_NUM", -1, false),
			}, uhw(new(abi.Mlx5IbCreateSrq), new(abi.Mlx5IbCreateSrqResp))...)},
		{object: abi.UVERBS_OBJECT_SRQ, method: abi.UVERBS_METHOD_SRQ_DESTROY, objName: "SRQ", name: "SRQ_DESTROY",
			run: runSRQDestroy,
			attrs: []attrSpec{
				idr(abi.UVERBS_ATTR_DESTROY_SRQ_HANDLE, "HANDLE", idrDestroy, true),
				outOf[abi.IbUverbsDestroySrqResp](abi.UVERBS_ATTR_DESTROY_SRQ_RESP, "RESP", -1, true),
			}},
	} {
		methods[[2]uint16{m.object, m.method}] = m
	}
}

func runSRQCreate(c *call) error {
	f, p := c.f, c.f.k.p
	var xrcd *XRCD
	var cq *CQ
	switch typ := c.u64(abi.UVERBS_ATTR_CREATE_SRQ_TYPE); typ {
	case abi.IB_UVERBS_SRQT_BASIC:
		if c.has(abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE) || c.has(abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE) {
			return refuse(syscall.EINVAL, "XRCD or CQ for a basic SRQ")
		}
	case abi.IB_UVERBS_SRQT_XRC:
		// uverbs_std_types_srq: an XRC SRQ names its domain and the CQ
		// its receives complete on.
		xh, ok := c.handle(abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE)
		if !ok {
			return refuse(syscall.EINVAL, "an XRC SRQ without an XRCD")
		}
		if xrcd, ok = lookup[*XRCD](f, objXRCD, xh); !ok {
			return refuse(syscall.ENOENT, fmt.Sprintf("no XRCD %d", xh))
		}
		ch, ok := c.handle(abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE)
		if !ok {
			return refuse(syscall.EINVAL, "an XRC SRQ without a CQ")
		}
		if cq, ok = lookup[*CQ](f, objCQ, ch); !ok {
			return refuse(syscall.ENOENT, fmt.Sprintf("no CQ %d", ch))
		}
	default:
		// Tag-matching SRQs need objects the fake does not model.
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("SRQ type %d not emulated", typ))
	}
	pdh, _ := c.handle(abi.UVERBS_ATTR_CREATE_SRQ_PD_HANDLE)
	pd, ok := lookup[*PD](f, objPD, pdh)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no PD %d", pdh))
	}
	if _, err := c.fdOf(abi.UVERBS_ATTR_CREATE_SRQ_EVENT_FD, "async_event"); err != nil {
		return err
	}
	maxWR := uint32(c.u64(abi.UVERBS_ATTR_CREATE_SRQ_MAX_WR))
	maxSGE := uint32(c.u64(abi.UVERBS_ATTR_CREATE_SRQ_MAX_SGE))
	// mlx5_ib_create_srq: the size against log_max_srq_sz, then the WQE:
	// the next segment and max_sge data segments, a power of two of at
	// least 32 bytes.
	if maxWR >= p.Mlx5Context.Max_srq_recv_wr {
		return refuse(syscall.EINVAL, fmt.Sprintf("max_wr %d not below max_srq_wqes %d", maxWR, p.Mlx5Context.Max_srq_recv_wr))
	}
	if maxSGE > p.Device.Max_srq_sge {
		return refuse(syscall.EINVAL, fmt.Sprintf("max_sge %d above max_srq_sge", maxSGE))
	}
	count := uint32(roundupPow2(uint64(maxWR) + 1))
	desc := max(32, roundupPow2(16+16*uint64(maxSGE)))
	shift := uint32(0)
	for 1<<shift < desc {
		shift++
	}
	// create_srq_user: struct mlx5_ib_create_srq, reserved fields zero,
	// anything past it zero.
	in := c.in(abi.UVERBS_ATTR_UHW_IN)
	full := int(unsafe.Sizeof(abi.Mlx5IbCreateSrq{}))
	for _, b := range in[min(len(in), full):] {
		if b != 0 {
			return refuse(syscall.EINVAL, "non-zero bytes past mlx5_ib_create_srq")
		}
	}
	var ucmd abi.Mlx5IbCreateSrq
	copy(bytesOf(&ucmd), in)
	if ucmd.Reserved0 != 0 || ucmd.Reserved1 != 0 {
		return refuse(syscall.EINVAL, "mlx5_ib_create_srq reserved fields")
	}
	// get_srq_user_index, for SRQs other than basic ones: under CQE
	// version 1 the request must hold a user index, and not the
	// default; under version 0 it may hold only the default.
	uidx := uint32(defaultUIdx)
	if xrcd != nil {
		has := len(in) >= int(unsafe.Offsetof(ucmd.Uidx))+4
		switch {
		case has && f.ctx.cqeVersion == 0 && ucmd.Uidx == defaultUIdx:
		case has != (f.ctx.cqeVersion == 1):
			return refuse(syscall.EINVAL, fmt.Sprintf("XRC SRQ: uidx present %v with CQE version %d", has, f.ctx.cqeVersion))
		case f.ctx.cqeVersion == 1 && (ucmd.Uidx == defaultUIdx || ucmd.Uidx&^uidxMask != 0):
			return refuse(syscall.EINVAL, fmt.Sprintf("XRC SRQ: uidx %#x with CQE version 1", ucmd.Uidx))
		case f.ctx.cqeVersion == 1:
			uidx = ucmd.Uidx
		}
	}
	bufSize := uint64(count) << shift
	if !readable(c.m, ucmd.Buf_addr, bufSize) {
		return refuse(syscall.EFAULT, "SRQ buffer not mapped (ib_umem_get)")
	}
	if !readable(c.m, ucmd.Db_addr, 4) {
		return refuse(syscall.EFAULT, "doorbell record not mapped")
	}
	k := f.k
	if k.nextSRQN == 0 {
		k.nextSRQN = srqnBase
	}
	srq := &SRQ{SRQN: k.nextSRQN, File: f, UserHandle: UserHandle(c.u64(abi.UVERBS_ATTR_CREATE_SRQ_USER_HANDLE)),
		PD: pdh, Buf: Addr(ucmd.Buf_addr), DBRec: Addr(ucmd.Db_addr), WQECount: count, WQEShift: shift,
		MaxSGE: uint32(desc-16) / 16, Flags: Hex(ucmd.Flags), XRCD: xrcd, CQ: cq, UIdx: uidx}
	// The answer: max_wr as the device holds it (one WQE stays free),
	// max_sge as asked (mlx5 does not report max_avail_gather).
	respWR, respSGE := count-1, maxSGE
	if err := c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, bytesOf(&respWR)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, bytesOf(&respSGE)); err != nil {
		return err
	}
	resp := abi.Mlx5IbCreateSrqResp{Srqn: srq.SRQN}
	if err := c.out(abi.UVERBS_ATTR_UHW_OUT, bytesOf(&resp)); err != nil {
		return err
	}
	if xrcd != nil && c.has(abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM) {
		if err := c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM, bytesOf(&srq.SRQN)); err != nil {
			return err
		}
	}
	k.nextSRQN++
	srq.Handle = f.alloc(objSRQ, srq)
	pd.users++
	if xrcd != nil {
		xrcd.users++
		cq.users++
	}
	k.srqs = append(k.srqs, srq)
	c.setNew(abi.UVERBS_ATTR_CREATE_SRQ_HANDLE, uint64(srq.Handle))
	return nil
}

func runSRQDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_SRQ_HANDLE)
	srq, ok := lookup[*SRQ](c.f, objSRQ, h)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no SRQ %d", h))
	}
	if srq.users > 0 {
		return refuse(syscall.EBUSY, fmt.Sprintf("SRQ %d has %d QPs", h, srq.users))
	}
	var r abi.IbUverbsDestroySrqResp
	if err := c.out(abi.UVERBS_ATTR_DESTROY_SRQ_RESP, bytesOf(&r)); err != nil {
		return err
	}
	c.f.destroyLocked(srq)
	delete(c.f.ids[objSRQ], h)
	return nil
}

// SRQs returns the live SRQs of every file, by SRQN.
func (k *Kernel) SRQs() []*SRQ {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]*SRQ(nil), k.srqs...)
	sort.Slice(out, func(i, j int) bool { return out[i].SRQN < out[j].SRQN })
	return out
}
