package uverbs

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSelectGID(t *testing.T) {
	// A RoCE port as rxe and mlx5 fill it: each address twice, v1 then v2,
	// link-local first; a VLAN device (netdev 7) with the same IPv4
	// address as its parent (netdev 3); port 2 with v1 entries only.
	roce := []GIDEntry{
		{Port: 1, Index: 0, Type: GIDTypeRoCEv1, GID: gidOf("fe80::1"), NetdevIndex: 3},
		{Port: 1, Index: 1, Type: GIDTypeRoCEv2, GID: gidOf("fe80::1"), NetdevIndex: 3},
		{Port: 1, Index: 2, Type: GIDTypeRoCEv1, GID: gidOf("2001:db8::1"), NetdevIndex: 3},
		{Port: 1, Index: 3, Type: GIDTypeRoCEv2, GID: gidOf("2001:db8::1"), NetdevIndex: 3},
		{Port: 1, Index: 4, Type: GIDTypeRoCEv1, GID: gidOf("::ffff:10.0.0.1"), NetdevIndex: 7},
		{Port: 1, Index: 5, Type: GIDTypeRoCEv2, GID: gidOf("::ffff:10.0.0.1"), NetdevIndex: 7},
		{Port: 1, Index: 6, Type: GIDTypeRoCEv1, GID: gidOf("::ffff:10.0.0.1"), NetdevIndex: 3},
		{Port: 1, Index: 7, Type: GIDTypeRoCEv2, GID: gidOf("::ffff:10.0.0.1"), NetdevIndex: 3},
		{Port: 2, Index: 0, Type: GIDTypeRoCEv1, GID: gidOf("fe80::2"), NetdevIndex: 4},
		{Port: 2, Index: 1, Type: GIDTypeRoCEv1, GID: gidOf("::ffff:10.0.1.1"), NetdevIndex: 4},
	}
	ib := []GIDEntry{
		{Port: 1, Index: 0, Type: GIDTypeIB, GID: gidOf("fe80::2:c903:0:1")},
		{Port: 1, Index: 1, Type: GIDTypeIB, GID: gidOf("fec0::2:c903:0:1")},
	}
	// Netdev 3 has 10.0.0.1, netdev 7 (the VLAN) is down: no addresses.
	has := func(ifindex uint32, a netip.Addr) bool { return ifindex == 3 }
	onlyV2LL := roce[:2]
	for _, c := range []struct {
		name  string
		gids  []GIDEntry
		port  uint8
		ll    LinkLayer
		addr  string
		index uint8
		err   error
	}{
		{"any address: IPv4 v2, the lowest index", roce, 1, LinkLayerEthernet, "", 5, nil},
		{"IPv4 address: the netdev that has it", roce, 1, LinkLayerEthernet, "10.0.0.1", 7, nil},
		{"IPv6 address", roce, 1, LinkLayerEthernet, "2001:db8::1", 3, nil},
		{"link-local address", roce, 1, LinkLayerEthernet, "fe80::1", 1, nil},
		{"only link-local", onlyV2LL, 1, LinkLayerEthernet, "", 1, nil},
		{"address not on the port", roce, 1, LinkLayerEthernet, "10.9.9.9", 0, unix.EADDRNOTAVAIL},
		{"no v2 on the port: v1", roce, 2, LinkLayerEthernet, "", 1, nil},
		{"no v2 on the port: v1 by address", roce, 2, LinkLayerEthernet, "fe80::2", 0, nil},
		{"no port", roce, 3, LinkLayerEthernet, "", 0, unix.ENODATA},
		{"empty table", nil, 1, LinkLayerEthernet, "", 0, unix.ENODATA},
		{"InfiniBand: index 0", ib, 1, LinkLayerInfiniBand, "", 0, nil},
		{"InfiniBand with an IP", ib, 1, LinkLayerInfiniBand, "10.0.0.1", 0, unix.EINVAL},
	} {
		t.Run(c.name, func(t *testing.T) {
			var addr netip.Addr
			if c.addr != "" {
				addr = netip.MustParseAddr(c.addr)
			}
			e, err := selectGID(c.gids, c.port, c.ll, addr, has)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("got %+v, %v; want %v", e, err, c.err)
				}
				return
			}
			if err != nil || e.Index != c.index || e.Port != c.port {
				t.Fatalf("got %+v, %v; want index %d of port %d", e, err, c.index, c.port)
			}
		})
	}
}
