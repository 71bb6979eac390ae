//go:build linux

package fake

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// CREATE_AH and DESTROY_AH: ib_uverbs_create_ah, the core's checks of a
// RoCE address (rdma_check_ah_attr, ib_resolve_eth_dmac) and
// mlx5_ib_create_ah's driver data (struct mlx5_ib_create_ah_resp: the
// destination MAC, which libmlx5 puts in the address vector of every UD
// WQE and cannot learn otherwise without netlink).

// AH is an address handle.
type AH struct {
	Handle uint32
	File   *File
	PD     uint32
	Attr   abi.IbUverbsAhAttr
	DMAC   [6]byte
}

func init() {
	writes[abi.IB_USER_VERBS_CMD_CREATE_AH] = &writeSpec{name: "CREATE_AH", req: new(abi.IbUverbsCreateAh),
		resp: new(abi.IbUverbsCreateAhResp), reqSize: sizeOf[abi.IbUverbsCreateAh](),
		respSize: sizeOf[abi.IbUverbsCreateAhResp](), udOut: new(abi.Mlx5IbCreateAhResp), run: wCreateAH}
	writes[abi.IB_USER_VERBS_CMD_DESTROY_AH] = &writeSpec{name: "DESTROY_AH", req: new(abi.IbUverbsDestroyAh),
		reqSize: sizeOf[abi.IbUverbsDestroyAh](), run: wDestroyAH}
	// The ioctl form, which libibverbs and rdmago try first.
	methods[[2]uint16{abi.UVERBS_OBJECT_AH, abi.UVERBS_METHOD_AH_DESTROY}] = &methodSpec{
		object: abi.UVERBS_OBJECT_AH, method: abi.UVERBS_METHOD_AH_DESTROY, objName: "AH", name: "AH_DESTROY",
		run:   runAHDestroy,
		attrs: []attrSpec{idr(abi.UVERBS_ATTR_DESTROY_AH_HANDLE, "HANDLE", idrDestroy, true)}}
}

func wCreateAH(w *wcall) error {
	f, p := w.f, w.f.k.p
	req := fromBytes[abi.IbUverbsCreateAh](w.core)
	pd, ok := lookup[*PD](f, objPD, req.Pd_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no PD %d", req.Pd_handle))
	}
	a := req.Attr
	if a.Port_num != 1 {
		return refuse(syscall.EINVAL, fmt.Sprintf("port %d invalid", a.Port_num))
	}
	var dmac [6]byte
	if p.Port.Link_layer == 2 {
		// RoCE (rdma_check_ah_attr): the address must carry a GRH whose
		// SGID names an entry of the port's table.
		if a.Is_global == 0 {
			return refuse(syscall.EINVAL, "RoCE address handle without GRH")
		}
		if _, ok := p.gidEntry(int(a.Grh.Sgid_index)); !ok {
			return refuse(syscall.EINVAL, fmt.Sprintf("sgid_index %d not in the GID table", a.Grh.Sgid_index))
		}
		var err error
		if dmac, err = p.resolveDMAC(a.Grh.Dgid); err != nil {
			return err
		}
	}
	// mlx5_ib_create_ah: a user AH on RoCE must leave room for the MAC.
	minResp := int(unsafe.Offsetof(abi.Mlx5IbCreateAhResp{}.Dmac)) + 6
	if p.Port.Link_layer == 2 && w.udLen < minResp {
		return refuse(syscall.EINVAL, fmt.Sprintf("driver response %d bytes, need %d", w.udLen, minResp))
	}
	ah := &AH{File: f, PD: req.Pd_handle, Attr: a, DMAC: dmac}
	ah.Handle = f.alloc(objAH, ah)
	r := abi.IbUverbsCreateAhResp{Ah_handle: ah.Handle}
	if err := w.respond(bytesOf(&r)); err != nil {
		delete(f.ids[objAH], ah.Handle)
		return err
	}
	pd.users++
	if p.Port.Link_layer != 2 {
		return nil
	}
	resp := abi.Mlx5IbCreateAhResp{Response_length: uint32(minResp), Dmac: dmac}
	return w.udata(bytesOf(&resp)[:minResp])
}

func wDestroyAH(w *wcall) error {
	req := fromBytes[abi.IbUverbsDestroyAh](w.core)
	return w.f.destroyAH(req.Ah_handle, syscall.EINVAL)
}

func runAHDestroy(c *call) error {
	h, _ := c.handle(abi.UVERBS_ATTR_DESTROY_AH_HANDLE)
	return c.f.destroyAH(h, syscall.ENOENT)
}

func (f *File) destroyAH(h uint32, missing syscall.Errno) error {
	ah, ok := lookup[*AH](f, objAH, h)
	if !ok {
		return refuse(missing, fmt.Sprintf("no AH %d", h))
	}
	f.destroyLocked(ah)
	delete(f.ids[objAH], h)
	return nil
}

// resolveDMAC is ib_resolve_eth_dmac for the fake's one port: a multicast
// GID maps to its multicast MAC (ip_eth_mc_map for an IPv4-mapped one,
// ipv6_eth_mc_map otherwise); a link-local GID carries its MAC in its
// interface identifier (rdma_get_ll_mac); any other unicast GID goes
// through IP neighbour resolution, which the fake answers only for the
// port's own addresses (the loopback route: the netdev's own MAC, which
// is the one its link-local GID 0 carries). Anything else is unreachable.
func (p *Profile) resolveDMAC(dgid [16]byte) ([6]byte, error) {
	var mac [6]byte
	addr := netip.AddrFrom16(dgid)
	switch {
	case dgid[0] == 0xff: // rdma_is_multicast_addr, IPv6 form
		mac = [6]byte{0x33, 0x33, dgid[12], dgid[13], dgid[14], dgid[15]}
	case addr.Is4In6() && dgid[12]&0xf0 == 0xe0: // IPv4 multicast, mapped
		mac = [6]byte{0x01, 0x00, 0x5e, dgid[13] & 0x7f, dgid[14], dgid[15]}
	case dgid[0] == 0xfe && dgid[1]&0xc0 == 0x80: // fe80::/10
		mac = llMAC(dgid)
	default:
		own := false
		for _, g := range p.GIDs {
			if netip.MustParseAddr(g) == addr {
				own = true
			}
		}
		if !own || len(p.GIDs) == 0 {
			return mac, refuse(syscall.EHOSTUNREACH, fmt.Sprintf("no route to %s in the fake", addr))
		}
		g0 := netip.MustParseAddr(p.GIDs[0]).As16()
		mac = llMAC(g0)
	}
	return mac, nil
}

// llMAC is rdma_get_ll_mac: the MAC in a link-local GID's EUI-64.
func llMAC(gid [16]byte) [6]byte {
	return [6]byte{gid[8] ^ 2, gid[9], gid[10], gid[13], gid[14], gid[15]}
}
