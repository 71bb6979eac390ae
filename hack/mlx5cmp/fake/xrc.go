//go:build linux

package fake

import (
	"fmt"
	"syscall"

	"github.com/rdmago/rdma/internal/abi"
)

// XRC domains (ib_uverbs_open_xrcd, UVERBS_METHOD_XRCD_DESTROY). XRC SRQs
// are in srq.go, XRC QPs in mlx5.go.

// xrcdnBase numbers XRC domains as a device's firmware might.
const xrcdnBase = 0x30

func init() {
	writes[abi.IB_USER_VERBS_CMD_OPEN_XRCD] = &writeSpec{name: "OPEN_XRCD", req: new(abi.IbUverbsOpenXrcd),
		resp: new(abi.IbUverbsOpenXrcdResp), reqSize: sizeOf[abi.IbUverbsOpenXrcd](),
		respSize: sizeOf[abi.IbUverbsOpenXrcdResp](), run: wOpenXRCD}
	m := &methodSpec{object: abi.UVERBS_OBJECT_XRCD, method: abi.UVERBS_METHOD_XRCD_DESTROY, objName: "XRCD", name: "XRCD_DESTROY",
		run:   runXRCDDestroy,
		attrs: []attrSpec{idr(abi.UVERBS_ATTR_DESTROY_XRCD_HANDLE, "HANDLE", idrDestroy, true)}}
	methods[[2]uint16{m.object, m.method}] = m
}

// wOpenXRCD is ib_uverbs_open_xrcd for a new domain (fd -1, which needs
// O_CREAT). A domain shared through a file's inode is not modelled.
func wOpenXRCD(w *wcall) error {
	req := fromBytes[abi.IbUverbsOpenXrcd](w.core)
	if req.Fd != ^uint32(0) {
		return refuse(syscall.EOPNOTSUPP, "an XRCD shared through a file (fd != -1) not emulated")
	}
	if req.Oflags&syscall.O_CREAT == 0 {
		return refuse(syscall.EINVAL, "a new XRCD without O_CREAT")
	}
	if p := w.f.k.p; p.Device.Device_cap_flags&abi.IB_UVERBS_DEVICE_XRC == 0 {
		return refuse(syscall.EOPNOTSUPP, "the profile's device has no XRC (mlx5_ib_alloc_xrcd)")
	}
	f, k := w.f, w.f.k
	if k.nextXRCDN == 0 {
		k.nextXRCDN = xrcdnBase
	}
	x := &XRCD{File: f, XRCDN: k.nextXRCDN}
	h := f.alloc(objXRCD, x)
	x.Handle = h
	r := abi.IbUverbsOpenXrcdResp{Xrcd_handle: h}
	if err := w.respond(bytesOf(&r)); err != nil {
		delete(f.ids[objXRCD], h)
		return err
	}
	k.nextXRCDN++
	return nil
}

func runXRCDDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_XRCD_HANDLE)
	x, ok := lookup[*XRCD](c.f, objXRCD, h)
	if !ok {
		return refuse(syscall.ENOENT, fmt.Sprintf("no XRCD %d", h))
	}
	if x.users > 0 {
		// ib_dealloc_xrcd_user: the domain's QPs and SRQs first.
		return refuse(syscall.EBUSY, fmt.Sprintf("XRCD %d has %d users", h, x.users))
	}
	delete(c.f.ids[objXRCD], h)
	return nil
}
