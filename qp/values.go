package qp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// MTU is a path MTU code (enum ibv_mtu).
type MTU uint8

// MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// String returns the MTU in bytes as ibv_devinfo prints it.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return "invalid MTU"
}

// GID is a 128-bit global identifier (union ibv_gid), in network byte order.
type GID [16]byte

// IsZero reports whether the GID is all zeroes (an empty table slot).
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as ibv_devinfo does: eight groups of four hex digits.
func (g GID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x",
		binary.BigEndian.Uint16(g[0:]), binary.BigEndian.Uint16(g[2:]),
		binary.BigEndian.Uint16(g[4:]), binary.BigEndian.Uint16(g[6:]),
		binary.BigEndian.Uint16(g[8:]), binary.BigEndian.Uint16(g[10:]),
		binary.BigEndian.Uint16(g[12:]), binary.BigEndian.Uint16(g[14:]))
}

// Addr returns the GID as an IP address: RoCE GIDs are IPv6 or IPv4-mapped
// addresses. The IPv4-mapped form is unmapped.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }
