package uverbs

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// GRHSize is the size of the Global Route Header (struct ibv_grh) that
// starts every receive buffer of a UD QP, whether or not the datagram
// carried one (wr.WCGRH says whether it did).
const GRHSize = 40

// Next-header values of a GRH: RoCE v2 is carried in UDP; IB and RoCE v1
// put the IB transport header straight after the GRH.
const (
	grhNextUDP = 17
	grhNextIB  = 0x1b
)

// GRH is the network header of a received UD datagram, decoded from the
// first GRHSize bytes of the receive buffer. On IB and RoCE v1 it is an IB
// GRH, on RoCE v2 an IPv6 header, or, over IPv4, an IPv4 header in its last
// 20 bytes (the first 20 are undefined).
type GRH struct {
	// Version is 6 for an IB GRH or an IPv6 header, 4 for an IPv4 header.
	Version int
	// TrafficClass is the IPv6 or IB traffic class, or the IPv4 TOS byte.
	TrafficClass uint8
	// FlowLabel is the IPv6 or IB flow label; zero for IPv4.
	FlowLabel uint32
	// NextHdr is the IPv6 next header or the IPv4 protocol: 17 (UDP) for
	// RoCE v2, 0x1b for IB and RoCE v1.
	NextHdr uint8
	// HopLimit is the IPv6 or IB hop limit, or the IPv4 TTL.
	HopLimit uint8
	// SGID and DGID are the sender's and the receiver's addresses; IPv4
	// addresses in their IPv4-mapped form, as RoCE v2 GIDs hold them.
	SGID, DGID qp.GID
}

// ParseGRH decodes the GRH at the start of a UD receive buffer. It needs
// GRHSize bytes. It tells an IPv4 header from an IPv6 one as libibverbs
// does: the IPv6 version nibble is in bytes the IPv4 form leaves
// undefined, so a first nibble of 6 is taken for IPv6 unless the last 20
// bytes hold an option-less IPv4 header with a correct checksum.
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < GRHSize {
		return GRH{}, &Error{Op: "parse GRH", Err: fmt.Errorf("%d bytes, a GRH has %d: %w", len(b), GRHSize, unix.EINVAL)}
	}
	b = b[:GRHSize]
	ip4 := b[20:]
	isIPv4 := ip4[0] == 0x45 // version 4, five 32-bit words: no options
	if b[0]>>4 == 6 {
		isIPv4 = isIPv4 && ipv4Checksum(ip4) == 0
	} else if !isIPv4 {
		return GRH{}, &Error{Op: "parse GRH", Err: fmt.Errorf("neither an IPv6 header (version %d) nor an option-less IPv4 header (first byte %#02x): %w",
			b[0]>>4, ip4[0], unix.EPROTONOSUPPORT)}
	}
	var h GRH
	if isIPv4 {
		h.Version = 4
		h.TrafficClass = ip4[1]
		h.HopLimit = ip4[8]
		h.NextHdr = ip4[9]
		h.SGID = ipv4GID(ip4[12:16])
		h.DGID = ipv4GID(ip4[16:20])
		return h, nil
	}
	w := binary.BigEndian.Uint32(b[0:4])
	h.Version = 6
	h.TrafficClass = uint8(w >> 20)
	h.FlowLabel = w & 0xfffff
	h.NextHdr = b[6]
	h.HopLimit = b[7]
	copy(h.SGID[:], b[8:24])
	copy(h.DGID[:], b[24:40])
	return h, nil
}

// ipv4Checksum returns the ones' complement sum of a 20-byte IPv4 header,
// folded and complemented: zero when the header's checksum is right.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ipv4GID returns the IPv4-mapped GID of an IPv4 address.
func ipv4GID(a []byte) qp.GID {
	var g qp.GID
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], a)
	return g
}

// isMulticast reports whether a GID is a multicast one: IPv6 (and IB)
// multicast, or an IPv4-mapped 224.0.0.0/4 address.
func isMulticast(g qp.GID) bool {
	if g[0] == 0xff {
		return true
	}
	mapped := [10]byte(g[:10]) == [10]byte{} && g[10] == 0xff && g[11] == 0xff
	return mapped && g[12]>>4 == 0xe
}

// ahSource is what answering a datagram needs to know of the device; a
// Context provides it, tests a table.
type ahSource interface {
	QueryPort(port uint8) (PortAttr, error)
	QueryGIDTable() ([]GIDEntry, error)
}

// InitAHFromWC returns the address-handle attributes for answering the
// sender of a datagram received on port (ibv_init_ah_from_wc): wc is the
// receive's completion and grh the first GRHSize bytes of its buffer.
//
// With a GRH (wc.Flags has wr.WCGRH, always the case on RoCE), the answer
// goes to the packet's source GID, from the local GID that the packet was
// sent to: SGIDIndex is the index of that GID in port's table, among
// entries of the packet's kind (RoCE v2 for UDP over IPv4 or IPv6, IB or
// RoCE v1 otherwise). The hop limit and traffic class are the received
// ones, as libibverbs sets them. Without a GRH the answer goes to wc.SLID,
// which only an InfiniBand port can use.
//
// The errors wrap an errno: EINVAL for a nil or failed completion, a short
// grh, a missing GRH on a RoCE port or a datagram sent to a multicast
// group (no local GID answers for a group); EPROTONOSUPPORT for a header
// that is none of IPv4, IPv6 and IB; ENOENT when no GID of the port equals
// the packet's destination.
func (c *Context) InitAHFromWC(port uint8, wc *wr.Completion, grh []byte) (qp.AHAttr, error) {
	if c == nil {
		return qp.AHAttr{}, &Error{Op: "init AH from WC", Err: fmt.Errorf("nil context: %w", unix.EINVAL)}
	}
	return initAHFromWC(c, port, wc, grh)
}

func initAHFromWC(src ahSource, port uint8, wc *wr.Completion, grh []byte) (qp.AHAttr, error) {
	const op = "init AH from WC"
	fail := func(errno unix.Errno, format string, args ...any) (qp.AHAttr, error) {
		return qp.AHAttr{}, &Error{Op: op, Err: fmt.Errorf(format+": %w", append(args, errno)...)}
	}
	switch {
	case wc == nil:
		return fail(unix.EINVAL, "nil completion")
	case port == 0:
		return fail(unix.EINVAL, "port 0 (ports are numbered from 1)")
	case wc.Status != wr.Success:
		// A failed completion's fields other than ID and status are undefined.
		return fail(unix.EINVAL, "completion %d has status %q", wc.ID, wc.Status.String())
	case wc.Opcode&wr.WCRecv == 0:
		return fail(unix.EINVAL, "completion %d is a %v, not a receive", wc.ID, wc.Opcode)
	}
	a := qp.AHAttr{DLID: wc.SLID, SL: wc.SL, SrcPathBits: wc.DLIDPathBits, PortNum: port}
	if wc.Flags&wr.WCGRH == 0 {
		pa, err := src.QueryPort(port)
		if err != nil {
			return qp.AHAttr{}, err
		}
		if pa.LinkLayer == LinkLayerEthernet {
			// RoCE addresses by GID only; an AH without one is refused by
			// the kernel with a bare EINVAL, so say why here.
			return fail(unix.EINVAL, "completion %d has no GRH, and port %d is RoCE, where the sender is known only from it", wc.ID, port)
		}
		return a, nil
	}
	h, err := ParseGRH(grh)
	if err != nil {
		return qp.AHAttr{}, err
	}
	if isMulticast(h.DGID) {
		return fail(unix.EINVAL, "the datagram was sent to multicast group %v, which no local GID answers for", h.DGID)
	}
	// The kinds of GID table entry the packet can have been sent to.
	var kinds [2]GIDType
	switch {
	case h.Version == 4 && h.NextHdr == grhNextUDP, h.Version == 6 && h.NextHdr == grhNextUDP:
		kinds = [2]GIDType{GIDTypeRoCEv2, GIDTypeRoCEv2}
	case h.Version == 6 && h.NextHdr == grhNextIB:
		kinds = [2]GIDType{GIDTypeIB, GIDTypeRoCEv1}
	default:
		return fail(unix.EPROTONOSUPPORT, "IPv%d header with next header %d, neither RoCE v2 (UDP) nor IB", h.Version, h.NextHdr)
	}
	gids, err := src.QueryGIDTable()
	if err != nil {
		return qp.AHAttr{}, err
	}
	idx := -1
	for _, e := range gids {
		if e.Port == port && e.GID == h.DGID && (e.Type == kinds[0] || e.Type == kinds[1]) {
			idx = int(e.Index)
			break
		}
	}
	if idx < 0 {
		// A GID past index 255, which no address handle can name, is
		// not in the table QueryGIDTable gives either.
		return fail(unix.ENOENT, "no %v GID %v in port %d's table (at indexes 0 to 255)", kinds[0], h.DGID, port)
	}
	a.IsGlobal = true
	a.DGID = h.SGID
	a.SGIDIndex = uint8(idx)
	a.FlowLabel = h.FlowLabel
	a.HopLimit = h.HopLimit
	a.TrafficClass = h.TrafficClass
	return a, nil
}

// CreateAHFromWC creates an address handle for answering the sender of a
// datagram received on port (ibv_create_ah_from_wc): InitAHFromWC on the
// PD's context, then CreateAH. This is how a UD server answers a client it
// knows only from the client's first datagram; the client's QP number is
// wc.SrcQP. The caller closes the handle.
func (pd *PD) CreateAHFromWC(wc *wr.Completion, grh []byte, port uint8) (*AH, error) {
	if pd == nil {
		return nil, &Error{Op: "create AH from WC", Err: fmt.Errorf("nil PD: %w", unix.EINVAL)}
	}
	attr, err := pd.Context().InitAHFromWC(port, wc, grh)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(attr)
}
