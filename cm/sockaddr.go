package cm

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// Sizes of struct sockaddr_in and struct sockaddr_in6.
const (
	sizeofSockaddrIn  = 16
	sizeofSockaddrIn6 = 28
)

// setSockaddr puts a into a command's address field b and its length into
// size, or returns op's error for an address it cannot write.
func setSockaddr(op string, b []byte, size *uint16, a netip.AddrPort) error {
	n, err := putSockaddr(b, a)
	if err != nil {
		return &Error{Op: op, Err: err}
	}
	*size = uint16(n)
	return nil
}

// putSockaddr writes a as a struct sockaddr_in (IPv4, including
// IPv4-mapped IPv6 addresses) or sockaddr_in6 into b and returns its
// length. An IPv6 zone becomes the scope id: an interface name or a number.
func putSockaddr(b []byte, a netip.AddrPort) (int, error) {
	ip := a.Addr()
	if !ip.IsValid() {
		return 0, fmt.Errorf("cm: no address: %w", unix.EINVAL)
	}
	ne := binary.NativeEndian
	if ip.Is4() || ip.Is4In6() {
		ne.PutUint16(b[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], a.Port())
		v4 := ip.Unmap().As4()
		copy(b[4:8], v4[:])
		return sizeofSockaddrIn, nil
	}
	var scope uint32
	if z := ip.Zone(); z != "" {
		if n, err := strconv.ParseUint(z, 10, 32); err == nil {
			scope = uint32(n)
		} else {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return 0, fmt.Errorf("cm: zone of %v: %w", ip, err)
			}
			scope = uint32(ifi.Index)
		}
	}
	ne.PutUint16(b[0:], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], a.Port())
	v6 := ip.As16()
	copy(b[8:24], v6[:])
	ne.PutUint32(b[24:], scope)
	return sizeofSockaddrIn6, nil
}

// sockaddr decodes a struct sockaddr_in or sockaddr_in6; anything else (an
// unset address, AF_IB) is the zero AddrPort.
func sockaddr(b []byte) netip.AddrPort {
	if len(b) < 2 {
		return netip.AddrPort{}
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) < sizeofSockaddrIn {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:]))
	case unix.AF_INET6:
		if len(b) < sizeofSockaddrIn6 {
			return netip.AddrPort{}
		}
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		if scope := binary.NativeEndian.Uint32(b[24:]); scope != 0 {
			zone := strconv.FormatUint(uint64(scope), 10)
			if ifi, err := net.InterfaceByIndex(int(scope)); err == nil {
				zone = ifi.Name
			}
			ip = ip.WithZone(zone)
		}
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:]))
	}
	return netip.AddrPort{}
}
