package uverbs

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// tableSource answers InitAHFromWC's queries from fixed values and counts
// them, so that a test sees which ones a path needs.
type tableSource struct {
	link          LinkLayer
	gids          []GIDEntry
	err           error
	ports, tables int
}

func (s *tableSource) QueryPort(port uint8) (PortAttr, error) {
	s.ports++
	return PortAttr{LinkLayer: s.link}, s.err
}

func (s *tableSource) QueryGIDTable() ([]GIDEntry, error) {
	s.tables++
	return s.gids, s.err
}

func gidOf(s string) qp.GID { return qp.GID(netip.MustParseAddr(s).As16()) }

// roceTable is an rxe port with an IPv6 link-local and an IPv4 address,
// each as a RoCE v1 and a RoCE v2 GID, and a second port holding the same
// IPv4 address, which must never be picked for port 1.
func roceTable() []GIDEntry {
	return []GIDEntry{
		{GID: gidOf("fe80::5054:ff:fe00:a"), Index: 0, Port: 1, Type: GIDTypeRoCEv1},
		{GID: gidOf("fe80::5054:ff:fe00:a"), Index: 1, Port: 1, Type: GIDTypeRoCEv2},
		{GID: gidOf("::ffff:10.0.2.15"), Index: 0, Port: 2, Type: GIDTypeRoCEv2},
		{GID: gidOf("::ffff:10.0.2.15"), Index: 2, Port: 1, Type: GIDTypeRoCEv1},
		{GID: gidOf("::ffff:10.0.2.15"), Index: 3, Port: 1, Type: GIDTypeRoCEv2},
		{GID: gidOf("2001:db8::1"), Index: 5, Port: 1, Type: GIDTypeRoCEv2},
	}
}

// ipv4GRH returns the 40 bytes a RoCE v2 datagram over IPv4 leaves at the
// start of a receive buffer: 20 undefined bytes (filled with fill), then
// the IPv4 header with its checksum.
func ipv4GRH(fill byte, src, dst string, tos, ttl, proto uint8) []byte {
	b := make([]byte, GRHSize)
	for i := range 20 {
		b[i] = fill
	}
	h := b[20:]
	h[0] = 0x45
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:], 20+8+12+100) // total length: UDP, BTH+DETH, payload
	binary.BigEndian.PutUint16(h[6:], 0x4000)      // don't fragment
	h[8], h[9] = ttl, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
	return b
}

// ipv6GRH returns an IPv6 header (or IB GRH, with next header 0x1b).
func ipv6GRH(tclass uint8, flow uint32, next, hop uint8, sgid, dgid string) []byte {
	b := make([]byte, GRHSize)
	binary.BigEndian.PutUint32(b, 6<<28|uint32(tclass)<<20|flow&0xfffff)
	binary.BigEndian.PutUint16(b[4:], 8+12+100)
	b[6], b[7] = next, hop
	s, d := gidOf(sgid), gidOf(dgid)
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return b
}

func recvWC(flags wr.WCFlags) *wr.Completion {
	return &wr.Completion{ID: 7, Opcode: wr.WCRecv, ByteLen: GRHSize + 100, SrcQP: 0x11, Flags: flags | wr.WCWithImm,
		SLID: 0x1234, SL: 3, DLIDPathBits: 1}
}

func TestInitAHFromWC(t *testing.T) {
	for _, tc := range []struct {
		name string
		grh  []byte
		want qp.AHAttr
	}{
		{"IPv4", ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0x60, 63, grhNextUDP),
			qp.AHAttr{DGID: gidOf("::ffff:10.0.2.20"), SGIDIndex: 3, HopLimit: 63, TrafficClass: 0x60}},
		// The undefined first 20 bytes may look like an IPv6 header; a
		// correct IPv4 checksum behind them decides.
		{"IPv4 behind IPv6-like bytes", ipv4GRH(0x66, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP),
			qp.AHAttr{DGID: gidOf("::ffff:10.0.2.20"), SGIDIndex: 3, HopLimit: 64}},
		{"IPv6", ipv6GRH(0x28, 0xabcde, grhNextUDP, 60, "2001:db8::2", "2001:db8::1"),
			qp.AHAttr{DGID: gidOf("2001:db8::2"), SGIDIndex: 5, HopLimit: 60, TrafficClass: 0x28, FlowLabel: 0xabcde}},
		// An IPv6 header between IPv4-mapped GIDs is RoCE v2 all the same.
		{"IPv6 with IPv4-mapped GIDs", ipv6GRH(0, 0, grhNextUDP, 64, "::ffff:10.0.2.20", "::ffff:10.0.2.15"),
			qp.AHAttr{DGID: gidOf("::ffff:10.0.2.20"), SGIDIndex: 3, HopLimit: 64}},
		{"RoCE v1", ipv6GRH(0, 1, grhNextIB, 1, "fe80::5054:ff:fe00:b", "fe80::5054:ff:fe00:a"),
			qp.AHAttr{DGID: gidOf("fe80::5054:ff:fe00:b"), SGIDIndex: 0, HopLimit: 1, FlowLabel: 1}},
		// A longer buffer (the whole receive) is fine: only the GRH is read.
		{"whole buffer", append(ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP), make([]byte, 100)...),
			qp.AHAttr{DGID: gidOf("::ffff:10.0.2.20"), SGIDIndex: 3, HopLimit: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &tableSource{link: LinkLayerEthernet, gids: roceTable()}
			got, err := initAHFromWC(src, 1, recvWC(wr.WCGRH), tc.grh)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.IsGlobal, want.PortNum, want.DLID, want.SL, want.SrcPathBits = true, 1, 0x1234, 3, 1
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if src.ports != 0 || src.tables != 1 {
				t.Errorf("%d port queries and %d GID table queries, want 0 and 1", src.ports, src.tables)
			}
		})
	}
}

func TestInitAHFromWCInfiniBand(t *testing.T) {
	src := &tableSource{link: LinkLayerInfiniBand, gids: []GIDEntry{
		{GID: gidOf("fe80::2:c903:1:a"), Index: 0, Port: 1, Type: GIDTypeIB},
	}}
	// Without a GRH the answer goes to the sender's LID, and the buffer is
	// not read.
	got, err := initAHFromWC(src, 1, recvWC(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := qp.AHAttr{DLID: 0x1234, SL: 3, SrcPathBits: 1, PortNum: 1}
	if got != want {
		t.Errorf("no GRH: got %+v, want %+v", got, want)
	}
	if src.tables != 0 {
		t.Errorf("the GID table was queried without a GRH")
	}
	// With one (a routed IB packet) the GID of type IB matches.
	got, err = initAHFromWC(src, 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, grhNextIB, 255, "fe80::2:c903:1:b", "fe80::2:c903:1:a"))
	if err != nil {
		t.Fatal(err)
	}
	want.IsGlobal, want.DGID, want.HopLimit = true, gidOf("fe80::2:c903:1:b"), 255
	if got != want {
		t.Errorf("GRH: got %+v, want %+v", got, want)
	}
}

func TestInitAHFromWCErrors(t *testing.T) {
	good := ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP)
	badSum := ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP)
	badSum[30] ^= 0xff
	badSum[0], badSum[6] = 0x60, grhNextUDP
	// An IPv4 header with options does not fit the GRH: RoCE v2 sends none.
	ipv4Options := ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP)
	ipv4Options[20] = 0x46
	failed := recvWC(wr.WCGRH)
	failed.Status = wr.WRFlushErr
	send := recvWC(wr.WCGRH)
	send.Opcode = wr.WCSend
	queryErr := &Error{Op: "query GID table", Err: unix.EIO}
	for _, tc := range []struct {
		name  string
		port  uint8
		wc    *wr.Completion
		grh   []byte
		table []GIDEntry
		qerr  error
		want  error
	}{
		{"nil completion", 1, nil, good, nil, nil, unix.EINVAL},
		{"port 0", 0, recvWC(wr.WCGRH), good, nil, nil, unix.EINVAL},
		{"failed completion", 1, failed, good, nil, nil, unix.EINVAL},
		{"send completion", 1, send, good, nil, nil, unix.EINVAL},
		{"no GRH on RoCE", 1, recvWC(0), good, nil, nil, unix.EINVAL},
		{"short buffer", 1, recvWC(wr.WCGRH), good[:39], nil, nil, unix.EINVAL},
		{"nil buffer", 1, recvWC(wr.WCGRH), nil, nil, nil, unix.EINVAL},
		{"unknown GID", 1, recvWC(wr.WCGRH), ipv4GRH(0, "10.0.2.20", "10.0.2.99", 0, 64, grhNextUDP), nil, nil, unix.ENOENT},
		{"GID of another port", 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, grhNextUDP, 64, "2001:db8::2", "2001:db8::1"),
			[]GIDEntry{{GID: gidOf("2001:db8::1"), Index: 0, Port: 2, Type: GIDTypeRoCEv2}}, nil, unix.ENOENT},
		// RoCE v1 traffic must not be answered from a RoCE v2 GID, nor the reverse.
		{"GID of another type", 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, grhNextIB, 64, "2001:db8::2", "2001:db8::1"), nil, nil, unix.ENOENT},
		{"IPv4 multicast", 1, recvWC(wr.WCGRH), ipv4GRH(0, "10.0.2.20", "239.1.2.3", 0, 64, grhNextUDP), nil, nil, unix.EINVAL},
		{"IPv6 multicast", 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, grhNextUDP, 64, "2001:db8::2", "ff0e::1"), nil, nil, unix.EINVAL},
		{"IPv4-mapped multicast in IPv6", 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, grhNextUDP, 64, "::ffff:10.0.2.20", "::ffff:224.0.0.1"), nil, nil, unix.EINVAL},
		{"IPv4 options", 1, recvWC(wr.WCGRH), ipv4Options, nil, nil, unix.EPROTONOSUPPORT},
		{"IPv4 not UDP", 1, recvWC(wr.WCGRH), ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, unix.IPPROTO_TCP), nil, nil, unix.EPROTONOSUPPORT},
		{"IPv6 not UDP", 1, recvWC(wr.WCGRH), ipv6GRH(0, 0, unix.IPPROTO_TCP, 64, "2001:db8::2", "2001:db8::1"), nil, nil, unix.EPROTONOSUPPORT},
		{"no header", 1, recvWC(wr.WCGRH), make([]byte, GRHSize), nil, nil, unix.EPROTONOSUPPORT},
		// A first nibble of 6 with a wrong IPv4 checksum behind it is
		// IPv6, whose addresses are then not in the table.
		{"IPv4 bad checksum", 1, recvWC(wr.WCGRH), badSum, nil, nil, unix.ENOENT},
		{"query fails", 1, recvWC(wr.WCGRH), good, nil, queryErr, unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := tc.table
			if table == nil {
				table = roceTable()
			}
			src := &tableSource{link: LinkLayerEthernet, gids: table, err: tc.qerr}
			a, err := initAHFromWC(src, tc.port, tc.wc, tc.grh)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %+v, %v; want %v", a, err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("%v is not a *uverbs.Error", err)
			}
			if a != (qp.AHAttr{}) {
				t.Errorf("attributes %+v returned with the error", a)
			}
			t.Log(err)
		})
	}
}

func TestParseGRH(t *testing.T) {
	h, err := ParseGRH(ipv4GRH(0, "192.0.2.1", "192.0.2.2", 0xb8, 17, grhNextUDP))
	want := GRH{Version: 4, TrafficClass: 0xb8, NextHdr: grhNextUDP, HopLimit: 17,
		SGID: gidOf("::ffff:192.0.2.1"), DGID: gidOf("::ffff:192.0.2.2")}
	if err != nil || h != want {
		t.Errorf("IPv4: got %+v, %v; want %+v", h, err, want)
	}
	if h.SGID.Addr() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("IPv4 source %v", h.SGID.Addr())
	}
	h, err = ParseGRH(ipv6GRH(0xff, 0xfffff, grhNextIB, 0xff, "fe80::1", "fe80::2"))
	want = GRH{Version: 6, TrafficClass: 0xff, FlowLabel: 0xfffff, NextHdr: grhNextIB, HopLimit: 0xff,
		SGID: gidOf("fe80::1"), DGID: gidOf("fe80::2")}
	if err != nil || h != want {
		t.Errorf("IPv6: got %+v, %v; want %+v", h, err, want)
	}
}

func TestAHFromWCNil(t *testing.T) {
	var c *Context
	if _, err := c.InitAHFromWC(1, recvWC(wr.WCGRH), nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("nil context: %v", err)
	}
	var pd *PD
	if _, err := pd.CreateAHFromWC(recvWC(wr.WCGRH), nil, 1); !errors.Is(err, unix.EINVAL) {
		t.Errorf("nil PD: %v", err)
	}
}

// FuzzInitAHFromWC feeds arbitrary receive buffers to the GRH decoder and
// the answer's construction: no input may panic, and an answer must go to
// the packet's source from a local GID equal to its destination.
func FuzzInitAHFromWC(f *testing.F) {
	f.Add(ipv4GRH(0, "10.0.2.20", "10.0.2.15", 0, 64, grhNextUDP))
	f.Add(ipv4GRH(0x66, "10.0.2.20", "10.0.2.15", 0x60, 1, grhNextUDP))
	f.Add(ipv6GRH(0x28, 0xabcde, grhNextUDP, 60, "2001:db8::2", "2001:db8::1"))
	f.Add(ipv6GRH(0, 0, grhNextIB, 1, "fe80::5054:ff:fe00:b", "fe80::5054:ff:fe00:a"))
	f.Add(ipv4GRH(0, "10.0.2.20", "239.1.2.3", 0, 64, grhNextUDP))
	f.Add(make([]byte, GRHSize))
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, perr := ParseGRH(b)
		if perr == nil && h.Version != 4 && h.Version != 6 {
			t.Fatalf("version %d", h.Version)
		}
		table := roceTable()
		a, err := initAHFromWC(&tableSource{link: LinkLayerEthernet, gids: table}, 1, recvWC(wr.WCGRH), b)
		if perr != nil {
			if err == nil {
				t.Fatalf("ParseGRH failed (%v) but InitAHFromWC did not", perr)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPROTONOSUPPORT) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !a.IsGlobal || a.DGID != h.SGID || a.PortNum != 1 {
			t.Fatalf("answer %+v to %+v", a, h)
		}
		for _, e := range table {
			if e.Port == 1 && e.Index == a.SGIDIndex && e.GID == h.DGID {
				return
			}
		}
		t.Fatalf("SGID index %d is not the destination %v", a.SGIDIndex, h.DGID)
	})
}
