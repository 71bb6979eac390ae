package cm_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
)

// linkLocal returns dummy0's IPv6 link-local address, with its zone.
func linkLocal(t *testing.T) netip.Addr {
	t.Helper()
	ifi, err := net.InterfaceByName("dummy0")
	if err != nil {
		t.Skipf("no dummy0: %v", err)
	}
	addrs, err := ifi.Addrs()
	rdmatest.Must(t, err)
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			return p.Addr().WithZone(ifi.Name)
		}
	}
	t.Skipf("dummy0 has no IPv6 link-local address: %v", addrs)
	return netip.Addr{}
}

// TestDeviceIPv6 connects over IPv6, through GetAddrInfo and endpoints.
func TestDeviceIPv6(t *testing.T) {
	ctx := rdmatest.Context(t)
	ll := linkLocal(t)
	res, err := cm.GetAddrInfo(ll.String(), "0", &cm.AddrInfo{Flags: cm.AIPassive, PortSpace: cm.PSTCP})
	rdmatest.Must(t, err)
	attr := epAttr()
	listen, err := cm.CreateEP(ctx, res, nil, &attr)
	rdmatest.Must(t, err)
	defer listen.Close()
	rdmatest.Must(t, listen.Listen(0))
	src := listen.SrcAddr()
	t.Logf("listening on %v", src)
	if !src.Addr().Is6() {
		t.Fatalf("bound to %v", src)
	}
	srv := make(chan error, 1)
	go func() { srv <- rdmaServer(ctx, t, listen) }()
	cres, err := cm.GetAddrInfo(src.Addr().String(), "", &cm.AddrInfo{PortSpace: cm.PSTCP})
	rdmatest.Must(t, err)
	cres.DstAddr = netip.AddrPortFrom(cres.DstAddr.Addr(), src.Port())
	id, err := cm.CreateEP(ctx, cres, nil, &attr)
	rdmatest.Must(t, err)
	if r := id.Route(); !r.DstAddr.Addr().Is6() || qp.GID(r.DGID).Addr() != src.Addr().WithZone("") {
		t.Errorf("route %+v", r)
	}
	err = rdmaClient(ctx, t, id, goServerMsg)
	rdmatest.Must(t, id.Close())
	rdmatest.Must(t, err)
	rdmatest.Must(t, <-srv)
}
