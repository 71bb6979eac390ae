package devinfo

// Invented devices for the devinfo golden tests: an rxe-like one, two
// mlx5-like ones (InfiniBand and RoCE), one full of odd and invalid values,
// and devices that fail at each step. The values look like what such
// devices report but are made up; what matters is that every branch of
// ibv_devinfo's printing is taken by some fixture.

import (
	"net/netip"
	"sort"
	"syscall"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// fakeDevice is a device of the fake backend.
type fakeDevice struct {
	Dev            uverbs.Device
	Attr           uverbs.DeviceAttr
	NumCompVectors int
	BoardID        string
	Ports          []uverbs.PortAttr // Ports[0] is port 1
	GIDs           []uverbs.GIDEntry

	FailOpen  bool   // opening it fails
	FailQuery bool   // querying the device fails (EIO)
	FailPort  uint32 // querying this port fails (EINVAL)
	FailGIDs  bool   // reading the GID table fails (EIO)
	FailClose bool   // closing it fails (EIO)
}

// fakeFixture is the set of devices a fake host has.
type fakeFixture struct {
	Devs    []*fakeDevice
	ListErr syscall.Errno // listing the devices fails with this errno
}

func mustGID(s string) qp.GID {
	return qp.GID(netip.MustParseAddr(s).As16())
}

func guid(v uint64) uverbs.GUID {
	var g uverbs.GUID
	for i := range g {
		g[i] = byte(v >> (56 - 8*i))
	}
	return g
}

// gidPair returns the RoCE v1 and v2 entries the kernel creates for one
// address, at index i and i+1.
func gidPair(port, i uint8, addr string) []uverbs.GIDEntry {
	g := mustGID(addr)
	return []uverbs.GIDEntry{
		{GID: g, Index: i, Port: port, Type: uverbs.GIDTypeRoCEv1, NetdevIndex: 2},
		{GID: g, Index: i + 1, Port: port, Type: uverbs.GIDTypeRoCEv2, NetdevIndex: 2},
	}
}

func concat[T any](ss ...[]T) []T {
	var r []T
	for _, s := range ss {
		r = append(r, s...)
	}
	return r
}

// rxeDevice is like a soft-RoCE device on a QEMU e1000 NIC (kernel 6.1).
func rxeDevice() *fakeDevice {
	caps := uverbs.DeviceBadPKeyCntr | uverbs.DeviceAutoPathMig | uverbs.DeviceChangePhyPort |
		uverbs.DeviceUDAVPortEnforce | uverbs.DevicePortActiveEvent | uverbs.DeviceSysImageGUID |
		uverbs.DeviceRCRNRNAKGen | uverbs.DeviceSRQResize | uverbs.DeviceMemWindow |
		uverbs.DeviceMemMgtExtensions | uverbs.DeviceMemWindowType2A | uverbs.DeviceMemWindowType2B
	return &fakeDevice{
		Dev: uverbs.Device{Name: "rxe0", NodeType: uverbs.NodeCA, Transport: uverbs.TransportIB, Driver: "rxe"},
		Attr: uverbs.DeviceAttr{
			FWVer:                 "0.0.0",
			NodeGUID:              guid(0x505400fffe123456),
			SysImageGUID:          guid(0x505400fffe123456),
			MaxMRSize:             ^uint64(0),
			PageSizeCap:           0xfffff000,
			VendorID:              0xffffff,
			VendorPartID:          0,
			HWVer:                 0,
			MaxQP:                 1048560,
			MaxQPWR:               1048576,
			DeviceCapFlags:        uverbs.DeviceCaps(uint32(caps)),
			MaxSGE:                32,
			MaxSGERd:              32,
			MaxCQ:                 1048576,
			MaxCQE:                32767,
			MaxMR:                 524287,
			MaxPD:                 1048576,
			MaxQPRdAtom:           128,
			MaxResRdAtom:          258048,
			MaxQPInitRdAtom:       128,
			AtomicCap:             uverbs.AtomicHCA,
			MaxMW:                 524287,
			MaxMcastGrp:           8192,
			MaxMcastQPAttach:      56,
			MaxTotalMcastQPAttach: 458752,
			MaxAH:                 32767,
			MaxSRQ:                917503,
			MaxSRQWR:              1048576,
			MaxSRQSGE:             27,
			MaxPKeys:              64,
			LocalCAAckDelay:       15,
			PhysPortCnt:           1,
			DeviceCapFlagsEx:      caps,
		},
		NumCompVectors: 1,
		Ports: []uverbs.PortAttr{{
			State:        uverbs.PortActive,
			MaxMTU:       qp.MTU4096,
			ActiveMTU:    qp.MTU1024,
			GIDTblLen:    1024,
			PortCapFlags: 0x00010000,
			MaxMsgSz:     0x800000,
			PKeyTblLen:   1,
			MaxVLNum:     1,
			ActiveWidth:  1,
			ActiveSpeed:  1,
			PhysState:    5,
			LinkLayer:    uverbs.LinkLayerEthernet,
		}},
		GIDs: concat(
			gidPair(1, 0, "fe80::5054:ff:fe12:3456"),
			gidPair(1, 2, "::ffff:10.0.2.15"),
			gidPair(1, 4, "2001:db8::5054:ff:fe12:3456"),
			gidPair(1, 6, "2001:db8:1::"), // no interface ID: not shown
			gidPair(1, 12, "fd00:0:0:1::1"),
		),
	}
}

// mlx5IBDevice is like a two-port ConnectX InfiniBand adapter, with a few
// bits no name exists for.
func mlx5IBDevice() *fakeDevice {
	caps := uverbs.DeviceCaps(0xed721c36) | 1<<15 | 1<<31
	ibPort := uverbs.PortAttr{
		State:         uverbs.PortActive,
		MaxMTU:        qp.MTU4096,
		ActiveMTU:     qp.MTU4096,
		GIDTblLen:     128,
		PortCapFlags:  0x2659e848,
		MaxMsgSz:      0x40000000,
		BadPKeyCntr:   0x1f,
		QKeyViolCntr:  0xa,
		PKeyTblLen:    128,
		LID:           5,
		SMLID:         1,
		LMC:           0,
		MaxVLNum:      4,
		SubnetTimeout: 18,
		ActiveWidth:   2,
		ActiveSpeed:   32,
		PhysState:     5,
		LinkLayer:     uverbs.LinkLayerInfiniBand,
		PortCapFlags2: 0x0032,
	}
	down := ibPort
	down.State, down.ActiveMTU, down.LID, down.SMLID = uverbs.PortDown, qp.MTU4096, 0xffff, 0
	down.LMC, down.ActiveSpeed, down.PhysState, down.BadPKeyCntr, down.QKeyViolCntr = 2, 1, 2, 0, 0
	return &fakeDevice{
		Dev: uverbs.Device{Name: "mlx5_0", NodeType: uverbs.NodeCA, Transport: uverbs.TransportIB, Driver: "mlx5"},
		Attr: uverbs.DeviceAttr{
			FWVer:                   "16.35.2000",
			NodeGUID:                guid(0x248a070300d4f0a8),
			SysImageGUID:            guid(0x248a070300d4f0a8),
			MaxMRSize:               0xffffffffffffffff,
			PageSizeCap:             0xfffffffffffff000,
			VendorID:                0x02c9,
			VendorPartID:            4119,
			HWVer:                   0x0,
			MaxQP:                   262144,
			MaxQPWR:                 32768,
			DeviceCapFlags:          uverbs.DeviceCaps(uint32(caps)),
			MaxSGE:                  30,
			MaxSGERd:                30,
			MaxCQ:                   16777216,
			MaxCQE:                  4194303,
			MaxMR:                   16777216,
			MaxPD:                   16777216,
			MaxQPRdAtom:             16,
			MaxResRdAtom:            4194304,
			MaxQPInitRdAtom:         16,
			AtomicCap:               uverbs.AtomicGlob,
			MaxMcastGrp:             2097152,
			MaxMcastQPAttach:        240,
			MaxTotalMcastQPAttach:   503316480,
			MaxAH:                   2147483647,
			MaxSRQ:                  8388608,
			MaxSRQWR:                32767,
			MaxSRQSGE:               31,
			MaxPKeys:                128,
			LocalCAAckDelay:         16,
			PhysPortCnt:             2,
			ODPCaps:                 uverbs.ODPCaps{GeneralCaps: 0x3 | 1<<5, RCODPCaps: 0x2f, UCODPCaps: 0, UDODPCaps: 0x3},
			XRCODPCaps:              0x3f | 1<<6,
			CompletionTimestampMask: 0x7fffffffffffffff,
			HCACoreClock:            156250,
			RawPacketCaps:           0xf,
			DeviceCapFlagsEx:        caps | uverbs.DeviceRawScatterFCS | uverbs.DevicePCIWriteEndPadding | 1<<40 | 1<<63,
			TSOCaps:                 uverbs.TSOCaps{MaxTSO: 262144, SupportedQPTs: 1<<8 | 1<<4 | 1<<2},
			RSSCaps: uverbs.RSSCaps{SupportedQPTs: 1 << 8, MaxRWQIndirectionTables: 1048576,
				MaxRWQIndirectionTableSize: 2048, RXHashFieldsMask: 0x800000ff, RXHashFunction: 1},
			MaxWQTypeRQ:      8388608,
			PacketPacingCaps: uverbs.PacketPacingCaps{QPRateLimitMin: 1, QPRateLimitMax: 100000000, SupportedQPTs: 1 << 8},
			TMCaps:           uverbs.TMCaps{MaxRndvHdrSize: 64, MaxNumTags: 511, Flags: 1, MaxOps: 32768, MaxSGE: 1},
			CQModCaps:        uverbs.CQModerationCaps{MaxCQCount: 65535, MaxCQPeriod: 4095},
			MaxDMSize:        131072,
		},
		NumCompVectors: 63,
		BoardID:        "MT_0000000012",
		Ports:          []uverbs.PortAttr{ibPort, down},
		GIDs: []uverbs.GIDEntry{
			{GID: mustGID("fe80::248a:703:d4:f0a8"), Index: 0, Port: 1, Type: uverbs.GIDTypeIB},
			{GID: mustGID("fec0:0:0:1:248a:703:d4:f0a8"), Index: 1, Port: 1, Type: uverbs.GIDTypeIB},
			{GID: mustGID("fe80::248a:703:d4:f0a9"), Index: 0, Port: 2, Type: uverbs.GIDTypeIB},
		},
	}
}

// mlx5RoCEDevice is like a one-port ConnectX Ethernet adapter: RoCE v1 and
// v2 GIDs, IPv4 and IPv6 addresses.
func mlx5RoCEDevice() *fakeDevice {
	d := mlx5IBDevice()
	d.Dev.Name = "mlx5_1"
	d.Attr.NodeGUID = guid(0x0c42a1030065e2b4)
	d.Attr.SysImageGUID = guid(0x0c42a1030065e2b4)
	d.Attr.PhysPortCnt = 1
	d.Attr.VendorPartID = 4121
	d.Attr.FWVer = "22.36.1010"
	d.Attr.TMCaps = uverbs.TMCaps{}
	d.BoardID = "MT_0000000359"
	p := d.Ports[0]
	p.LID, p.SMLID, p.MaxVLNum, p.ActiveWidth, p.ActiveSpeed = 0, 0, 0, 2, 64
	p.PortCapFlags, p.PortCapFlags2, p.PKeyTblLen, p.GIDTblLen = 0x04010000, 0, 1, 255
	p.ActiveMTU, p.BadPKeyCntr, p.QKeyViolCntr = qp.MTU1024, 0, 0
	p.LinkLayer = uverbs.LinkLayerEthernet
	d.Ports = []uverbs.PortAttr{p}
	d.GIDs = concat(
		gidPair(1, 0, "fe80::e42:a1ff:fe65:e2b4"),
		gidPair(1, 2, "::ffff:192.168.100.7"),
		gidPair(1, 4, "2001:db8:0:1:0:0:0:7"),
		gidPair(1, 6, "2001:0:0:1:1:0:0:1"),
	)
	return d
}

// oddDevice reports values outside every table of ibv_devinfo, signed
// reinterpretations, and each capability section in its rare form.
func oddDevice() *fakeDevice {
	return &fakeDevice{
		Dev: uverbs.Device{Name: "odd0", NodeType: uverbs.NodeRNIC, Transport: uverbs.TransportIWARP},
		Attr: uverbs.DeviceAttr{
			FWVer:            "",
			NodeGUID:         guid(0x0123456789abcdef),
			SysImageGUID:     guid(0xfedcba9876543210),
			MaxMRSize:        0x100000000,
			PageSizeCap:      0x1000,
			VendorID:         0x1,
			VendorPartID:     0xfffffffe,
			HWVer:            0xabc,
			MaxQP:            0x80000000,
			MaxQPWR:          0xffffffff,
			DeviceCapFlags:   1<<15 | 1<<16 | 1<<19 | 1<<22 | 1<<27 | 1<<28 | 1<<30 | 1<<31,
			MaxSGE:           1,
			AtomicCap:        7,
			MaxEE:            3,
			MaxRDD:           4,
			MaxEERdAtom:      5,
			MaxEEInitRdAtom:  6,
			MaxRawIPv6QP:     7,
			MaxRawEthyQP:     8,
			MaxFMR:           10,
			MaxMapPerFMR:     32,
			MaxSRQ:           0,
			MaxSRQWR:         99, // not shown: max_srq is 0
			MaxPKeys:         0xffff,
			LocalCAAckDelay:  255,
			PhysPortCnt:      2,
			ODPCaps:          uverbs.ODPCaps{GeneralCaps: 1 << 40, RCODPCaps: 1 << 31, UCODPCaps: 0x3f, UDODPCaps: 1 << 4},
			RawPacketCaps:    1 << 4, // only a bit with no name: the header alone
			DeviceCapFlagsEx: 0xffffffff,
			TSOCaps:          uverbs.TSOCaps{MaxTSO: 0x80000000, SupportedQPTs: 0},
			RSSCaps:          uverbs.RSSCaps{SupportedQPTs: 1 << 3, RXHashFieldsMask: 0xfedcba9876543210, RXHashFunction: 0xff},
			MaxWQTypeRQ:      0xffffffff,
			PacketPacingCaps: uverbs.PacketPacingCaps{QPRateLimitMin: 0xffffffff, QPRateLimitMax: 0, SupportedQPTs: 1 << 8},
			TMCaps:           uverbs.TMCaps{MaxRndvHdrSize: 0xffffffff, MaxNumTags: 1, Flags: 2, MaxOps: 0, MaxSGE: 0},
			CQModCaps:        uverbs.CQModerationCaps{MaxCQCount: 10, MaxCQPeriod: 0}, // incomplete: not shown
			MaxDMSize:        0xffffffffffffffff,
		},
		NumCompVectors: 0,
		BoardID:        "odd board\tid ",
		Ports: []uverbs.PortAttr{
			{State: 0, MaxMTU: 0, ActiveMTU: 6, GIDTblLen: 0, PortCapFlags: 0xffffffff, MaxMsgSz: 0xffffffff,
				BadPKeyCntr: 0xffffffff, QKeyViolCntr: 0xffff, PKeyTblLen: 0xffff, LID: 0xffff, SMLID: 0xfffe,
				LMC: 7, MaxVLNum: 0, SMSL: 15, SubnetTimeout: 31, InitTypeReply: 9, ActiveWidth: 3,
				ActiveSpeed: 0, PhysState: 9, LinkLayer: 3, PortCapFlags2: 0xffff},
			{State: 5, MaxMTU: qp.MTU256, ActiveMTU: qp.MTU512, GIDTblLen: 16, MaxVLNum: 5,
				ActiveWidth: 16, ActiveSpeed: 128, PhysState: 3, LinkLayer: uverbs.LinkLayerUnspecified},
		},
		GIDs: []uverbs.GIDEntry{
			{GID: mustGID("::1.2.3.4"), Index: 0, Port: 2, Type: uverbs.GIDTypeRoCEv2},
			{GID: mustGID("::2"), Index: 1, Port: 2, Type: uverbs.GIDTypeRoCEv2},
			{GID: mustGID("1:0:2::3"), Index: 2, Port: 2, Type: 3}, // unknown type: shown as RoCE v2
			{GID: mustGID("1:0:2:0:3:0:4:5"), Index: 3, Port: 2, Type: uverbs.GIDTypeRoCEv2},
			{GID: mustGID("::ffff:0:1.2.3.4"), Index: 4, Port: 2, Type: uverbs.GIDTypeRoCEv1},
			{GID: mustGID("0:0:0:1::"), Index: 5, Port: 2, Type: uverbs.GIDTypeRoCEv2}, // skipped
			{GID: mustGID("::1"), Index: 15, Port: 2, Type: uverbs.GIDTypeRoCEv2},
			{GID: mustGID("::3"), Index: 16, Port: 2, Type: uverbs.GIDTypeRoCEv2}, // beyond gid_tbl_len
			{GID: mustGID("::4"), Index: 3, Port: 1, Type: uverbs.GIDTypeRoCEv2},  // port 1 has no table
		},
	}
}

// noPortDevice has no ports and transports ibv_devinfo has no name for.
func noPortDevice(name string, t uverbs.Transport) *fakeDevice {
	return &fakeDevice{
		Dev:  uverbs.Device{Name: name, Transport: t},
		Attr: uverbs.DeviceAttr{FWVer: "1.2.3", NodeGUID: guid(1), SysImageGUID: guid(2), MaxSRQ: 1, MaxSRQWR: 2, MaxSRQSGE: 3},
	}
}

// failDevice is a plain device set up to fail somewhere.
func failDevice(name string, set func(*fakeDevice)) *fakeDevice {
	d := rxeDevice()
	d.Dev.Name = name
	d.Attr.PhysPortCnt = 3
	d.Ports = []uverbs.PortAttr{d.Ports[0], d.Ports[0], d.Ports[0]}
	d.Ports[1].GIDTblLen = 0
	d.GIDs = concat(d.GIDs[:4], gidPair(3, 0, "fe80::1:2"))
	set(d)
	return d
}

// fixtures are the fake hosts, by name. The C harness gets the same data;
// its device list is in the order of Devs, which is also their kernel
// index order.
func fixtures() map[string]*fakeFixture {
	m := map[string]*fakeFixture{
		"rxe":  {Devs: []*fakeDevice{rxeDevice()}},
		"mlx5": {Devs: []*fakeDevice{mlx5IBDevice(), mlx5RoCEDevice()}},
		"odd": {Devs: []*fakeDevice{oddDevice(),
			noPortDevice("odd1", uverbs.TransportUnknown),
			noPortDevice("odd2", uverbs.TransportUSNICUDP),
			noPortDevice("odd3", 9)}},
		"fail": {Devs: []*fakeDevice{
			failDevice("f0_ok", func(*fakeDevice) {}),
			failDevice("f1_open", func(d *fakeDevice) { d.FailOpen = true }),
			failDevice("f2_query", func(d *fakeDevice) { d.FailQuery = true }),
			failDevice("f3_port", func(d *fakeDevice) { d.FailPort = 2 }),
			failDevice("f4_gid", func(d *fakeDevice) { d.FailGIDs = true }),
			failDevice("f5_close", func(d *fakeDevice) { d.FailClose = true }),
			// The GID table of a device whose first port has none fails at
			// port 3: port 2 is shown in full.
			failDevice("f6_gid3", func(d *fakeDevice) { d.FailGIDs = true; d.Ports[0].GIDTblLen = 0 }),
		}},
		// Kernel index order is not name order.
		"order":    {Devs: []*fakeDevice{noPortDevice("zz_first", uverbs.TransportIB), noPortDevice("aa_second", uverbs.TransportIB)}},
		"none":     {},
		"listfail": {ListErr: syscall.ENOSYS},
	}
	for _, f := range m {
		for i, d := range f.Devs {
			d.Dev.Index = uint32(i)
		}
	}
	return m
}

// fakeBackend serves a fixture to devinfoMain.
type fakeBackend struct{ fx *fakeFixture }

func (b fakeBackend) Devices() ([]uverbs.Device, error) {
	if b.fx.ListErr != 0 {
		return nil, b.fx.ListErr
	}
	var devs []uverbs.Device
	for _, d := range b.fx.Devs {
		devs = append(devs, d.Dev)
	}
	// As uverbs.Devices does.
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

func (b fakeBackend) find(dev uverbs.Device) *fakeDevice {
	for _, d := range b.fx.Devs {
		if d.Dev.Name == dev.Name {
			return d
		}
	}
	return nil
}

func (b fakeBackend) Open(dev uverbs.Device) (devinfoContext, error) {
	d := b.find(dev)
	if d == nil || d.FailOpen {
		return nil, &uverbs.Error{Op: "open", Err: syscall.ENODEV}
	}
	return fakeContext{d}, nil
}

func (b fakeBackend) BoardID(dev uverbs.Device) string { return b.find(dev).BoardID }

type fakeContext struct{ d *fakeDevice }

func (c fakeContext) QueryDevice() (uverbs.DeviceAttr, error) {
	if c.d.FailQuery {
		return uverbs.DeviceAttr{}, &uverbs.Error{Op: "query device", Err: syscall.EIO}
	}
	return c.d.Attr, nil
}

func (c fakeContext) QueryPort(port uint8) (uverbs.PortAttr, error) {
	if uint32(port) == c.d.FailPort || port == 0 || int(port) > len(c.d.Ports) {
		return uverbs.PortAttr{}, &uverbs.Error{Op: "query port", Err: syscall.EINVAL}
	}
	return c.d.Ports[port-1], nil
}

func (c fakeContext) QueryGIDTable() ([]uverbs.GIDEntry, error) {
	if c.d.FailGIDs {
		return nil, &uverbs.Error{Op: "query gid table", Err: syscall.EIO}
	}
	return c.d.GIDs, nil
}

func (c fakeContext) NumCompVectors() int { return c.d.NumCompVectors }

func (c fakeContext) Close() error {
	if c.d.FailClose {
		return &uverbs.Error{Op: "close", Err: syscall.EIO}
	}
	return nil
}
