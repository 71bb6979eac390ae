package uverbs

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
)

// SelectGID returns the entry of port's GID table that traffic from addr
// should use, as rdma_cm picks it when it binds an ID to addr, so that a
// program that connects QPs itself (exchanging GIDs over TCP, as
// ibv_rc_pingpong and perftest do) needs no GID index from its user. An
// invalid addr (the zero netip.Addr) means any address of the port.
//
// On an Ethernet (RoCE) port the rule is:
//
//   - The entry's type is RoCE v2, rdma_cm's default RoCE mode (its
//     configfs default_roce_mode, when an administrator changed it, is
//     not read). A port with no RoCE v2 entry at all, as on kernels and
//     devices without it, falls back to RoCE v1.
//   - With addr, the entry's GID is addr (an IPv4 address as
//     ::ffff:a.b.c.d). Where several entries hold it (the same address on
//     a VLAN device and its parent), the one whose netdev carries addr
//     wins, as rdma_cm matches the netdev it routed through; then the
//     lowest index. No entry: an error matching unix.EADDRNOTAVAIL.
//   - Without addr: an IPv4 address first (what RoCE fabrics route, and
//     what perftest prefers), then a global IPv6 address, then a
//     link-local one (fe80::/10, which every RoCE port has and which
//     routes nowhere); within a kind, the lowest index.
//
// On an InfiniBand port the GID is the port's own, index 0, and addr
// must be invalid: an IP address on InfiniBand belongs to IPoIB, which
// rdma_cm resolves with ARP, not through the GID table (EINVAL).
//
// No usable entry gives an error matching unix.ENODATA.
func (c *Context) SelectGID(port uint8, addr netip.Addr) (GIDEntry, error) {
	const op = "select GID"
	pa, err := c.QueryPort(port)
	if err != nil {
		return GIDEntry{}, err
	}
	gids, err := c.QueryGIDTable()
	if err != nil {
		return GIDEntry{}, err
	}
	e, err := selectGID(gids, port, pa.LinkLayer, addr, netdevHas)
	if err != nil {
		return GIDEntry{}, &Error{Op: op, Err: fmt.Errorf("port %d: %w", port, err)}
	}
	return e, nil
}

// netdevHas tells whether the interface of index ifindex has addr.
func netdevHas(ifindex uint32, addr netip.Addr) bool {
	ifi, err := net.InterfaceByIndex(int(ifindex))
	if err != nil {
		return false
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr.Unmap() {
				return true
			}
		}
	}
	return false
}

// gidRank orders the entries SelectGID picks from without an address:
// lower is better, -1 never.
func gidRank(g qp.GID) int {
	a := g.Addr()
	switch {
	case a.Is4():
		return 0
	case a.IsLinkLocalUnicast():
		return 2
	case a.IsGlobalUnicast():
		return 1
	}
	return -1 // zero, multicast, loopback: nothing a connection uses
}

// selectGID is SelectGID's rule over a GID table (see there). has tells
// whether an interface has an address.
func selectGID(gids []GIDEntry, port uint8, ll LinkLayer, addr netip.Addr, has func(uint32, netip.Addr) bool) (GIDEntry, error) {
	if ll == LinkLayerInfiniBand {
		if addr.IsValid() {
			return GIDEntry{}, fmt.Errorf("an IP address (%v) selects no GID on an InfiniBand port: %w", addr, unix.EINVAL)
		}
		for _, g := range gids {
			if g.Port == port && g.Index == 0 {
				return g, nil
			}
		}
		return GIDEntry{}, fmt.Errorf("no GID at index 0: %w", unix.ENODATA)
	}
	typ := GIDTypeRoCEv1
	for _, g := range gids {
		if g.Port == port && g.Type == GIDTypeRoCEv2 {
			typ = GIDTypeRoCEv2
			break
		}
	}
	var want qp.GID
	if addr.IsValid() {
		want = addr.As16()
	}
	best, bestScore := -1, 0
	for i, g := range gids {
		if g.Port != port || g.Type != typ {
			continue
		}
		var score int
		if addr.IsValid() {
			if g.GID != want {
				continue
			}
			if g.NetdevIndex == 0 || !has(g.NetdevIndex, addr) {
				score = 1
			}
		} else if score = gidRank(g.GID); score < 0 {
			continue
		}
		if best < 0 || score < bestScore || (score == bestScore && g.Index < gids[best].Index) {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		if addr.IsValid() {
			return GIDEntry{}, fmt.Errorf("no %v GID holds %v: %w", typ, addr, unix.EADDRNOTAVAIL)
		}
		return GIDEntry{}, fmt.Errorf("no %v GID with an address: %w", typ, unix.ENODATA)
	}
	return gids[best], nil
}
