//go:build linux

package fake

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// methods is the ioctl schema: the core methods both drivers use
// (uverbs_std_types_*.c) and mlx5_ib's (main.c, devx.c), with their
// attributes' types, sizes and whether they are mandatory, as declared in
// the kernel.
var methods = map[[2]uint16]*methodSpec{}

func init() {
	var (
		portRespMin = int(unsafe.Offsetof(abi.IbUverbsQueryPortRespEx{}.Reserved)) + 2
		capSize     = int(unsafe.Sizeof(abi.IbUverbsQpCap{}))
	)
	for _, m := range []*methodSpec{
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_INVOKE_WRITE, objName: "DEVICE", name: "INVOKE_WRITE",
			noContext: true, run: runInvokeWrite,
			attrs: append([]attrSpec{
				constIn(abi.UVERBS_ATTR_WRITE_CMD, "WRITE_CMD", true),
				{abi.UVERBS_ATTR_CORE_IN, "CORE_IN", ptrIn, 0, 0, false, nil},
				{abi.UVERBS_ATTR_CORE_OUT, "CORE_OUT", ptrOut, 0, 0, false, nil},
			}, uhw(nil, nil)...)},
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_GET_CONTEXT, objName: "DEVICE", name: "GET_CONTEXT",
			noContext: true, run: runGetContext,
			attrs: append([]attrSpec{
				outOf[uint32](abi.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, "NUM_COMP_VECTORS", -1, false),
				outOf[uint64](abi.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, "CORE_SUPPORT", -1, false),
			}, uhw(new(abi.Mlx5IbAllocUcontextReqV2), new(abi.Mlx5IbAllocUcontextResp))...)},
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_QUERY_CONTEXT, objName: "DEVICE", name: "QUERY_CONTEXT",
			run: runQueryContext,
			attrs: []attrSpec{
				outOf[uint32](abi.UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, "NUM_COMP_VECTORS", -1, false),
				outOf[uint64](abi.UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, "CORE_SUPPORT", -1, false),
			}},
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_QUERY_PORT, objName: "DEVICE", name: "QUERY_PORT",
			run: runQueryPort,
			attrs: []attrSpec{
				constIn(abi.UVERBS_ATTR_QUERY_PORT_PORT_NUM, "PORT_NUM", true),
				outOf[abi.IbUverbsQueryPortRespEx](abi.UVERBS_ATTR_QUERY_PORT_RESP, "RESP", portRespMin, true),
			}},
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_QUERY_GID_TABLE, objName: "DEVICE", name: "QUERY_GID_TABLE",
			run: runQueryGIDTable,
			attrs: []attrSpec{
				constIn(abi.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE, "ENTRY_SIZE", true),
				flagsIn(abi.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, "FLAGS", false),
				{abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, "RESP_ENTRIES", ptrOut, 0, 0, true, nil},
				outOf[uint64](abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, "RESP_NUM_ENTRIES", -1, true),
			}},
		{object: abi.UVERBS_OBJECT_DEVICE, method: abi.UVERBS_METHOD_QUERY_GID_ENTRY, objName: "DEVICE", name: "QUERY_GID_ENTRY",
			run: runQueryGIDEntry,
			attrs: []attrSpec{
				constIn(abi.UVERBS_ATTR_QUERY_GID_ENTRY_PORT, "PORT", true),
				constIn(abi.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, "GID_INDEX", true),
				flagsIn(abi.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, "FLAGS", true),
				outOf[abi.IbUverbsGidEntry](abi.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, "RESP_ENTRY", -1, true),
			}},
		{object: abi.UVERBS_OBJECT_ASYNC_EVENT, method: abi.UVERBS_METHOD_ASYNC_EVENT_ALLOC, objName: "ASYNC_EVENT", name: "ASYNC_EVENT_ALLOC",
			run:   runAsyncEventAlloc,
			attrs: []attrSpec{idr(abi.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, "FD_HANDLE", fdNew, true)}},
		{object: abi.UVERBS_OBJECT_PD, method: abi.UVERBS_METHOD_PD_DESTROY, objName: "PD", name: "PD_DESTROY",
			run:   runPDDestroy,
			attrs: []attrSpec{idr(abi.UVERBS_ATTR_DESTROY_PD_HANDLE, "HANDLE", idrDestroy, true)}},
		{object: abi.UVERBS_OBJECT_MR, method: abi.UVERBS_METHOD_MR_DESTROY, objName: "MR", name: "MR_DESTROY",
			run:   runMRDestroy,
			attrs: []attrSpec{idr(abi.UVERBS_ATTR_DESTROY_MR_HANDLE, "HANDLE", idrDestroy, true)}},
		{object: abi.UVERBS_OBJECT_CQ, method: abi.UVERBS_METHOD_CQ_CREATE, objName: "CQ", name: "CQ_CREATE",
			run: runCQCreate,
			attrs: append([]attrSpec{
				idr(abi.UVERBS_ATTR_CREATE_CQ_HANDLE, "HANDLE", idrNew, true),
				u32In(abi.UVERBS_ATTR_CREATE_CQ_CQE, "CQE", true),
				u64In(abi.UVERBS_ATTR_CREATE_CQ_USER_HANDLE, "USER_HANDLE", true),
				idr(abi.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, "COMP_CHANNEL", fdRead, false),
				u32In(abi.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, "COMP_VECTOR", true),
				flagsIn(abi.UVERBS_ATTR_CREATE_CQ_FLAGS, "FLAGS", false),
				outOf[uint32](abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, "RESP_CQE", -1, true),
				idr(abi.UVERBS_ATTR_CREATE_CQ_EVENT_FD, "EVENT_FD", fdRead, false),
				u32In(abi.MLX5_IB_ATTR_CREATE_CQ_UAR_INDEX, "MLX5_UAR_INDEX", false),
			}, uhw(new(abi.Mlx5IbCreateCq), new(abi.Mlx5IbCreateCqResp))...)},
		{object: abi.UVERBS_OBJECT_CQ, method: abi.UVERBS_METHOD_CQ_DESTROY, objName: "CQ", name: "CQ_DESTROY",
			run: runCQDestroy,
			attrs: []attrSpec{
				idr(abi.UVERBS_ATTR_DESTROY_CQ_HANDLE, "HANDLE", idrDestroy, true),
				outOf[abi.IbUverbsDestroyCqResp](abi.UVERBS_ATTR_DESTROY_CQ_RESP, "RESP", -1, true),
			}},
		{object: abi.UVERBS_OBJECT_QP, method: abi.UVERBS_METHOD_QP_CREATE, objName: "QP", name: "QP_CREATE",
			run: runQPCreate,
			attrs: append([]attrSpec{
				idr(abi.UVERBS_ATTR_CREATE_QP_HANDLE, "HANDLE", idrNew, true),
				idr(abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE, "XRCD_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE, "PD_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, "SRQ_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, "SEND_CQ_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, "RECV_CQ_HANDLE", idrRead, false),
				idr(abi.UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE, "IND_TABLE_HANDLE", idrRead, false),
				u64In(abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE, "USER_HANDLE", true),
				structIn[abi.IbUverbsQpCap](abi.UVERBS_ATTR_CREATE_QP_CAP, "CAP", capSize, true),
				constIn(abi.UVERBS_ATTR_CREATE_QP_TYPE, "TYPE", true),
				flagsIn(abi.UVERBS_ATTR_CREATE_QP_FLAGS, "FLAGS", false),
				u32In(abi.UVERBS_ATTR_CREATE_QP_SOURCE_QPN, "SOURCE_QPN", false),
				idr(abi.UVERBS_ATTR_CREATE_QP_EVENT_FD, "EVENT_FD", fdRead, false),
				outOf[abi.IbUverbsQpCap](abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, "RESP_CAP", -1, true),
				outOf[uint32](abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, "RESP_QP_NUM", -1, true),
			}, uhw(new(abi.Mlx5IbCreateQp), new(abi.Mlx5IbCreateQpResp))...)},
		{object: abi.UVERBS_OBJECT_QP, method: abi.UVERBS_METHOD_QP_DESTROY, objName: "QP", name: "QP_DESTROY",
			run: runQPDestroy,
			attrs: []attrSpec{
				idr(abi.UVERBS_ATTR_DESTROY_QP_HANDLE, "HANDLE", idrDestroy, true),
				outOf[abi.IbUverbsDestroyQpResp](abi.UVERBS_ATTR_DESTROY_QP_RESP, "RESP", -1, true),
			}},
		{object: abi.MLX5_IB_OBJECT_UAR, method: abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, objName: "MLX5_UAR", name: "UAR_OBJ_ALLOC",
			run: runUARAlloc,
			attrs: []attrSpec{
				idr(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, "HANDLE", idrNew, true),
				constIn(abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, "TYPE", true),
				outOf[uint64](abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, "MMAP_OFFSET", -1, true),
				outOf[uint32](abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, "MMAP_LENGTH", -1, true),
				outOf[uint32](abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, "PAGE_ID", -1, true),
			}},
		{object: abi.MLX5_IB_OBJECT_UAR, method: abi.MLX5_IB_METHOD_UAR_OBJ_DESTROY, objName: "MLX5_UAR", name: "UAR_OBJ_DESTROY",
			run:   runUARDestroy,
			attrs: []attrSpec{idr(abi.MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, "HANDLE", idrDestroy, true)}},
		{object: abi.MLX5_IB_OBJECT_DEVX, method: abi.MLX5_IB_METHOD_DEVX_OTHER, objName: "MLX5_DEVX", name: "DEVX_OTHER",
			run: runDEVXOther,
			attrs: []attrSpec{
				{abi.MLX5_IB_ATTR_DEVX_OTHER_CMD_IN, "CMD_IN", ptrIn, 16, 0, true, nil},
				{abi.MLX5_IB_ATTR_DEVX_OTHER_CMD_OUT, "CMD_OUT", ptrOut, 16, 0, true, nil},
			}},
	} {
		methods[[2]uint16{m.object, m.method}] = m
	}
}

func runGetContext(c *call) error {
	f := c.f
	if f.ctx != nil {
		return refuse(syscall.EINVAL, "the file already has a ucontext")
	}
	outLen := 0
	if a, ok := c.attrs[abi.UVERBS_ATTR_UHW_OUT]; ok {
		outLen = int(a.len)
	}
	ctx, resp, err := f.allocUcontext(c.in(abi.UVERBS_ATTR_UHW_IN), outLen)
	if err != nil {
		return err
	}
	p := f.k.p
	if err := c.out(abi.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, bytesOf(&p.NumCompVectors)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, bytesOf(&p.CoreSupport)); err != nil {
		return err
	}
	if err := c.out(abi.UVERBS_ATTR_UHW_OUT, resp); err != nil {
		return err
	}
	f.ctx = ctx
	return nil
}

func runQueryContext(c *call) error {
	p := c.f.k.p
	if err := c.out(abi.UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, bytesOf(&p.NumCompVectors)); err != nil {
		return err
	}
	return c.out(abi.UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, bytesOf(&p.CoreSupport))
}

// portResp is port 1's answer (ib_uverbs_query_port_resp_ex).
func (k *Kernel) portResp() abi.IbUverbsQueryPortRespEx {
	return abi.IbUverbsQueryPortRespEx{Legacy_resp: k.p.Port, Port_cap_flags2: k.p.PortCapFlags2, Active_speed_ex: k.p.ActiveSpeedEx}
}

func runQueryPort(c *call) error {
	if port := c.u64(abi.UVERBS_ATTR_QUERY_PORT_PORT_NUM); port != 1 {
		return refuse(syscall.EINVAL, fmt.Sprintf("port %d invalid", port))
	}
	r := c.f.k.portResp()
	return c.out(abi.UVERBS_ATTR_QUERY_PORT_RESP, bytesOf(&r))
}

func runQueryGIDTable(c *call) error {
	size := c.u64(abi.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE)
	if c.u64(abi.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS) != 0 {
		return refuse(syscall.EINVAL, "flags")
	}
	a := c.attrs[abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES]
	if size == 0 || uint64(a.len)%size != 0 || uint64(a.len) < size {
		return refuse(syscall.EINVAL, "entries length not a multiple of entry_size")
	}
	p := c.f.k.p
	if uint64(len(p.GIDs)) > uint64(a.len)/size {
		return refuse(syscall.EINVAL, "more GIDs than entries")
	}
	buf := make([]byte, a.len)
	entSize := int(unsafe.Sizeof(abi.IbUverbsGidEntry{}))
	for i := range p.GIDs {
		e, _ := p.gidEntry(i)
		copy(buf[i*int(size):i*int(size)+min(int(size), entSize)], bytesOf(&e))
	}
	if err := c.m.WriteAt(buf, a.data); err != nil {
		return refuse(syscall.EFAULT, "writing entries")
	}
	a.outFlags = true
	for i := range p.GIDs {
		e, _ := p.gidEntry(i)
		c.ev.Out = append(c.ev.Out, structFields(fmt.Sprintf("RESP_ENTRIES[%d]", i), &e)...)
	}
	n := uint64(len(p.GIDs))
	return c.out(abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, bytesOf(&n))
}

func runQueryGIDEntry(c *call) error {
	p := c.f.k.p
	if c.u64(abi.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS) != 0 {
		return refuse(syscall.EINVAL, "flags")
	}
	if port := c.u64(abi.UVERBS_ATTR_QUERY_GID_ENTRY_PORT); port != 1 {
		return refuse(syscall.EINVAL, fmt.Sprintf("port %d invalid", port))
	}
	i := c.u64(abi.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX)
	if i >= uint64(p.Port.Gid_tbl_len) {
		return refuse(syscall.EINVAL, "index beyond the GID table")
	}
	e, ok := p.gidEntry(int(i))
	if !ok {
		return refuse(syscall.ENODATA, "empty GID entry")
	}
	return c.out(abi.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, bytesOf(&e))
}

// newFD installs a file in the target through the supervisor's hook.
func (f *File) newFD(kind string) (int, error) {
	if f.k.NewFD == nil {
		return -1, refuse(syscall.ENOSYS, "no NewFD hook to install a "+kind+" file")
	}
	fd, err := f.k.NewFD(kind)
	if err != nil {
		return -1, refuse(syscall.EMFILE, fmt.Sprintf("NewFD(%s): %v", kind, err))
	}
	f.fds[fd] = kind
	return fd, nil
}

func runAsyncEventAlloc(c *call) error {
	fd, err := c.f.newFD("async_event")
	if err != nil {
		return err
	}
	c.setNew(abi.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, uint64(fd))
	return nil
}

// fdOf checks an FD attribute names a file of the kind this context made.
func (c *call) fdOf(id uint16, kind string) (int, error) {
	v, ok := c.handle(id)
	if !ok {
		return -1, nil
	}
	fd := int(int32(v))
	if c.f.fds[fd] != kind {
		return -1, refuse(syscall.EBADF, fmt.Sprintf("fd %d is not a %s file", fd, kind))
	}
	return fd, nil
}

func runPDDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_PD_HANDLE)
	return c.f.deallocPD(h, syscall.ENOENT)
}

func (f *File) deallocPD(h uint32, missing syscall.Errno) error {
	pd, ok := lookup[*PD](f, objPD, h)
	if !ok {
		return refuse(missing, fmt.Sprintf("no PD %d", h))
	}
	if pd.users > 0 {
		return refuse(syscall.EBUSY, fmt.Sprintf("PD %d has %d users", h, pd.users))
	}
	delete(f.ids[objPD], h)
	return nil
}

func runMRDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_MR_HANDLE)
	return c.f.deregMR(h, syscall.ENOENT)
}

func (f *File) deregMR(h uint32, missing syscall.Errno) error {
	mr, ok := lookup[*MR](f, objMR, h)
	if !ok {
		return refuse(missing, fmt.Sprintf("no MR %d", h))
	}
	f.destroyLocked(mr)
	delete(f.ids[objMR], h)
	return nil
}

func runCQDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_CQ_HANDLE)
	cq, ok := lookup[*CQ](c.f, objCQ, h)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no CQ %d", h))
	}
	if cq.users > 0 {
		return refuse(syscall.EBUSY, fmt.Sprintf("CQ %d used by %d QPs", h, cq.users))
	}
	var r abi.IbUverbsDestroyCqResp
	if err := c.out(abi.UVERBS_ATTR_DESTROY_CQ_RESP, bytesOf(&r)); err != nil {
		return err
	}
	c.f.destroyLocked(cq)
	delete(c.f.ids[objCQ], h)
	return nil
}

func runQPDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_QP_HANDLE)
	qp, ok := lookup[*QP](c.f, objQP, h)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no QP %d", h))
	}
	var r abi.IbUverbsDestroyQpResp
	if err := c.out(abi.UVERBS_ATTR_DESTROY_QP_RESP, bytesOf(&r)); err != nil {
		return err
	}
	c.f.destroyLocked(qp)
	delete(c.f.ids[objQP], h)
	return nil
}

func runDEVXOther(c *call) error {
	in := c.in(abi.MLX5_IB_ATTR_DEVX_OTHER_CMD_IN)
	// The PRM command header: opcode (big endian u16) first.
	op := binary.BigEndian.Uint16(in)
	c.ev.In = append(c.ev.In, Field{"CMD_IN.opcode", Hex(op)})
	if !c.f.k.p.DEVX {
		return refuse(syscall.EOPNOTSUPP, "DEVX is off in the profile")
	}
	if op == queryHCACap {
		// Status 0 and a capability page of zeros, whatever the op_mod:
		// the device reports none of the optional features libmlx5
		// reads from these pages (LAG, QoS, crypto, signature, DMA MMO,
		// general objects, capabilities 2, PCI atomics), as firmware
		// from before those fields does. libmlx5 reads no other field,
		// and nothing it does with the ibv_* verbs depends on them.
		var hdr [16]byte // struct query_hca_cap_out's status, syndrome
		return c.out(abi.MLX5_IB_ATTR_DEVX_OTHER_CMD_OUT, hdr[:])
	}
	return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("DEVX command %#x not emulated", op))
}

// queryHCACap is MLX5_CMD_OP_QUERY_HCA_CAP.
const queryHCACap = 0x100

// readable checks that [addr, addr+n) is mapped in the target, as
// ib_umem_get's pinning would (first and last byte).
func readable(m Mem, addr, n uint64) bool {
	var b [1]byte
	if n == 0 || addr+n < addr {
		return false
	}
	return m.ReadAt(b[:], addr) == nil && m.ReadAt(b[:], addr+n-1) == nil
}
