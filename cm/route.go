package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// Route is what an ID knows of its addresses and path (struct rdma_route).
type Route struct {
	SrcAddr netip.AddrPort
	DstAddr netip.AddrPort
	// SGID and DGID are the source and destination GIDs; on RoCE, the
	// IP addresses as GIDs.
	SGID, DGID qp.GID
	PKey       uint16
	Paths      []PathRec
}

// PathRec is one path of a resolved route (struct ibv_sa_path_rec, from the
// kernel's struct ib_user_path_rec).
type PathRec struct {
	DGID, SGID     qp.GID
	DLID, SLID     uint16
	RawTraffic     bool
	FlowLabel      uint32
	Reversible     bool
	MTU            qp.MTU
	PKey           uint16
	HopLimit       uint8
	TrafficClass   uint8
	NumbPath       uint8
	SL             uint8
	MTUSelector    uint8
	RateSelector   uint8
	Rate           uint8
	PacketLifeTime uint8
	Preference     uint8
}

// Route returns the ID's addresses and path as last reported by the kernel.
func (id *ID) Route() Route {
	id.mu.Lock()
	defer id.mu.Unlock()
	r := id.route
	r.Paths = append([]PathRec(nil), r.Paths...)
	return r
}

// SrcAddr returns the local address (rdma_get_local_addr with
// rdma_get_src_port).
func (id *ID) SrcAddr() netip.AddrPort { return id.Route().SrcAddr }

// DstAddr returns the peer's address (rdma_get_peer_addr with
// rdma_get_dst_port).
func (id *ID) DstAddr() netip.AddrPort { return id.Route().DstAddr }

// queryRoute asks the kernel for the ID's addresses, route and device
// (RDMA_USER_CM_CMD_QUERY_ROUTE) and binds the ID to the device the first
// time one is named. The caller holds id.mu.
func (id *ID) queryRoute() error {
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCall[abi.RdmaUcmQuery, abi.RdmaUcmQueryRouteResp](abi.RDMA_USER_CM_CMD_QUERY_ROUTE)
	resp := &c.resp
	// Kernels that do not know ibdev_index leave it as it is.
	resp.Ibdev_index = ^uint32(0)
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	if err := exec(f, &c.ucmaCmd); err != nil {
		return wrapErr("query route", err)
	}
	r := &id.route
	r.SrcAddr = sockaddr(bytesOf(&resp.Src_addr))
	r.DstAddr = sockaddr(bytesOf(&resp.Dst_addr))
	r.SGID = resp.Ib_route[0].Sgid
	r.DGID = resp.Ib_route[0].Dgid
	r.PKey = binary.BigEndian.Uint16(bytesOf(&resp.Ib_route[0].Pkey))
	r.Paths = r.Paths[:0]
	for i := 0; i < int(resp.Num_paths) && i < len(resp.Ib_route); i++ {
		r.Paths = append(r.Paths, pathRec(&resp.Ib_route[i]))
	}
	if id.dev == nil && resp.Node_guid != 0 {
		var guid uverbs.GUID
		binary.NativeEndian.PutUint64(guid[:], resp.Node_guid)
		d, err := getDevice(guid, resp.Ibdev_index)
		if err != nil {
			return &Error{Op: "query route", Err: fmt.Errorf("opening the device with node GUID %v: %w", guid, err)}
		}
		id.dev = d
		if id.pd == nil {
			id.pd = d.pd
		}
		id.port = resp.Port_num
	}
	return nil
}

func pathRec(p *abi.IbUserPathRec) PathRec {
	be := binary.BigEndian
	return PathRec{
		DGID: p.Dgid, SGID: p.Sgid,
		DLID:           be.Uint16(bytesOf(&p.Dlid)),
		SLID:           be.Uint16(bytesOf(&p.Slid)),
		RawTraffic:     p.Raw_traffic != 0,
		FlowLabel:      be.Uint32(bytesOf(&p.Flow_label)),
		Reversible:     p.Reversible != 0,
		MTU:            qp.MTU(p.Mtu),
		PKey:           be.Uint16(bytesOf(&p.Pkey)),
		HopLimit:       p.Hop_limit,
		TrafficClass:   p.Traffic_class,
		NumbPath:       p.Numb_path,
		SL:             p.Sl,
		MTUSelector:    p.Mtu_selector,
		RateSelector:   p.Rate_selector,
		Rate:           p.Rate,
		PacketLifeTime: p.Packet_life_time,
		Preference:     p.Preference,
	}
}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). A
// specific address also binds it to the RDMA device that owns it; the
// unspecified address (0.0.0.0 or ::) listens on all devices. Port 0
// picks a free port (SrcAddr tells which).
func (id *ID) BindAddr(addr netip.AddrPort) error {
	return id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmBind](abi.RDMA_USER_CM_CMD_BIND)
		c.body.Id = id.handle
		if err := setSockaddr("bind addr", c.body.Addr.Anon0[:], &c.body.Addr_size, addr); err != nil {
			return err
		}
		if err := exec(f, c); err != nil {
			return wrapErr("bind addr", err)
		}
		return id.queryRoute()
	})
}

// timeoutMS converts an operation timeout to the kernel's milliseconds; 0
// means librdmacm's usual 2 s.
func timeoutMS(d time.Duration) uint32 {
	if d <= 0 {
		return 2000
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return uint32(ms)
}

// ResolveAddr resolves dst, and src if given (the zero AddrPort lets the
// kernel pick the source by route), to RDMA addresses (rdma_resolve_addr),
// which binds the ID to a device. The kernel gives up after timeout (0: 2 s)
// with ADDR_ERROR, status -ETIMEDOUT. A synchronous ID waits for the
// outcome; ctx ends the wait early (the kernel's resolution still runs; the
// ID should then be destroyed).
func (id *ID) ResolveAddr(ctx context.Context, src, dst netip.AddrPort, timeout time.Duration) error {
	err := id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmResolveAddr](abi.RDMA_USER_CM_CMD_RESOLVE_ADDR)
		c.body.Id = id.handle
		c.body.Timeout_ms = timeoutMS(timeout)
		if src.Addr().IsValid() {
			if err := setSockaddr("resolve addr", c.body.Src_addr.Anon0[:], &c.body.Src_size, src); err != nil {
				return err
			}
		}
		if err := setSockaddr("resolve addr", c.body.Dst_addr.Anon0[:], &c.body.Dst_size, dst); err != nil {
			return err
		}
		if err := exec(f, c); err != nil {
			return wrapErr("resolve addr", err)
		}
		id.route.DstAddr = dst
		return nil
	})
	if err != nil {
		return err
	}
	return id.complete(ctx, "resolve addr", EventAddrResolved)
}

// ResolveRoute resolves the route to the address ResolveAddr resolved
// (rdma_resolve_route), giving up after timeout (0: 2 s). A synchronous ID
// waits for the outcome, or until ctx is done.
func (id *ID) ResolveRoute(ctx context.Context, timeout time.Duration) error {
	err := id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmResolveRoute](abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE)
		c.body.Id = id.handle
		c.body.Timeout_ms = timeoutMS(timeout)
		return wrapErr("resolve route", exec(f, c))
	})
	if err != nil {
		return err
	}
	return id.complete(ctx, "resolve route", EventRouteResolved)
}
