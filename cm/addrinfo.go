package cm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
)

// AIFlags control GetAddrInfo (RAI_*).
type AIFlags uint32

// Address-info flags.
const (
	// AIPassive: the result is for the listening side; without a node it
	// is the unspecified address.
	AIPassive AIFlags = 1 << 0
	// AINumericHost: the node must be a numeric address; no name lookup.
	AINumericHost AIFlags = 1 << 1
	// AINoRoute: skip route resolution (there is none to skip without an
	// IB address service; kept for code ported from C).
	AINoRoute AIFlags = 1 << 2
	// AIFamily: Family is a hint for interpreting the node.
	AIFamily AIFlags = 1 << 3
)

// AddrInfo is the result of GetAddrInfo and its hints (struct
// rdma_addrinfo).
type AddrInfo struct {
	Flags AIFlags
	// Family is unix.AF_INET or unix.AF_INET6, or 0 for any in hints.
	Family    int
	QPType    qp.Type   // qp.RC, qp.UD, qp.XRCSend or qp.XRCRecv; 0 in hints for any
	PortSpace PortSpace // PSTCP or PSUDP; 0 in hints for any
	// SrcAddr is the local address (passive results, or given in hints);
	// DstAddr the peer's (active results). The zero AddrPort is none.
	SrcAddr, DstAddr           netip.AddrPort
	SrcCanonName, DstCanonName string
	// Route is transport routing data (IB path records), empty on RoCE.
	Route []byte
	// Connect is data a connection must carry first in its private data.
	Connect []byte
}

// GetAddrInfo resolves node and service to the addresses and transport of
// an rdma_cm connection (rdma_getaddrinfo), for CreateEP. node is a name
// or a numeric IPv4 or IPv6 address (with AINumericHost, only the latter);
// service a port number or name. Without a node, a passive request gives
// the unspecified address (0.0.0.0, or :: for Family unix.AF_INET6) and an
// active one the loopback address. Hints may be nil. Without a QP type or
// port space in the hints, the result is RC over PSTCP; with one of them,
// the other follows (UD with PSUDP). As librdmacm, it returns the first
// address the name resolves to.
func GetAddrInfo(node, service string, hints *AddrInfo) (*AddrInfo, error) {
	return GetAddrInfoContext(context.Background(), node, service, hints)
}

// GetAddrInfoContext is GetAddrInfo with a context for the name lookup.
func GetAddrInfoContext(ctx context.Context, node, service string, hints *AddrInfo) (*AddrInfo, error) {
	const op = "getaddrinfo"
	if node == "" && service == "" && hints == nil {
		return nil, errf(op, unix.EINVAL, "no node, service or hints")
	}
	var h AddrInfo
	if hints != nil {
		h = *hints
	}
	res := &AddrInfo{}
	if node != "" || service != "" {
		stream, err := transportOf(h.QPType, h.PortSpace)
		if err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		res.QPType, res.PortSpace = h.QPType, h.PortSpace
		network := "udp"
		if stream {
			network = "tcp"
		}
		if res.QPType == 0 {
			res.QPType = qp.UD
			if stream {
				res.QPType = qp.RC
			}
		}
		if res.PortSpace == 0 {
			res.PortSpace = PSUDP
			if stream {
				res.PortSpace = PSTCP
			}
		}
		port, err := lookupPort(ctx, network, service)
		if err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		ip, err := lookupNode(ctx, node, h.Flags, h.Family)
		if err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		ap := netip.AddrPortFrom(ip, port)
		res.Family = unix.AF_INET6
		if ip.Is4() {
			res.Family = unix.AF_INET
		}
		if h.Flags&AIPassive != 0 {
			res.Flags = AIPassive
			res.SrcAddr = ap
		} else {
			res.DstAddr = ap
		}
	} else {
		res.Flags, res.Family, res.QPType, res.PortSpace = h.Flags, h.Family, h.QPType, h.PortSpace
		res.DstAddr = h.DstAddr
	}
	if !res.SrcAddr.Addr().IsValid() && h.SrcAddr.Addr().IsValid() {
		res.SrcAddr = h.SrcAddr
	}
	return res, nil
}

// transportOf reconciles a QP type and a port space as getaddrinfo's socket
// type and protocol: it reports whether the transport is a stream (RC).
func transportOf(t qp.Type, ps PortSpace) (bool, error) {
	const (
		unspec = iota
		stream
		dgram
	)
	sock, proto := unspec, unspec
	switch t {
	case 0:
	case qp.RC, qp.UC, qp.XRCSend, qp.XRCRecv:
		sock = stream
	case qp.UD:
		sock = dgram
	default:
		return false, fmt.Errorf("QP type %d: %w", t, unix.EPROTOTYPE)
	}
	switch ps {
	case 0:
	case PSTCP:
		proto = stream
	case PSUDP, PSIPoIB:
		proto = dgram
	case PSIB:
		proto = sock
	default:
		return false, fmt.Errorf("port space %v: %w", ps, unix.EPROTONOSUPPORT)
	}
	if sock != unspec && proto != unspec && sock != proto {
		return false, fmt.Errorf("QP type %d does not fit port space %v: %w", t, ps, unix.EPROTOTYPE)
	}
	return sock != dgram && proto != dgram, nil
}

func lookupPort(ctx context.Context, network, service string) (uint16, error) {
	if service == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(n), nil
	}
	p, err := net.DefaultResolver.LookupPort(ctx, network, service)
	if err != nil {
		return 0, err
	}
	return uint16(p), nil
}

func lookupNode(ctx context.Context, node string, flags AIFlags, family int) (netip.Addr, error) {
	want := func(a netip.Addr) bool {
		switch family {
		case unix.AF_INET:
			return a.Is4()
		case unix.AF_INET6:
			return a.Is6()
		}
		return true
	}
	if node == "" {
		a := netip.IPv4Unspecified()
		if flags&AIPassive == 0 {
			a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		if family == unix.AF_INET6 {
			a = netip.IPv6Unspecified()
			if flags&AIPassive == 0 {
				a = netip.IPv6Loopback()
			}
		}
		return a, nil
	}
	if a, err := netip.ParseAddr(node); err == nil {
		a = a.Unmap()
		if !want(a) {
			return netip.Addr{}, fmt.Errorf("address %v is not of family %d: %w", a, family, unix.EAFNOSUPPORT)
		}
		return a, nil
	}
	if flags&AINumericHost != 0 {
		return netip.Addr{}, fmt.Errorf("%q is not a numeric address: %w", node, unix.EINVAL)
	}
	network := "ip"
	switch family {
	case unix.AF_INET:
		network = "ip4"
	case unix.AF_INET6:
		network = "ip6"
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, node)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a = a.Unmap(); want(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no address of family %d for %q: %w", family, node, unix.EADDRNOTAVAIL)
}
