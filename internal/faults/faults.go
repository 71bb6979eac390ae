// Package faults is a deterministic packet-fault injector for RoCEv2, for
// tests. It attaches an XDP program to the receiving interface that parses
// Ethernet/IPv4/UDP (destination port 4791) and the InfiniBand base transport
// header (BTH), and drops or corrupts the packets a Policy selects: by BTH
// opcode, destination QPN, PSN range or, for the rdma_cm MADs that travel as
// UD packets to QP1, the MAD attribute id; with a probability or every Nth
// match; at most a given number of times. Counters say what it did.
//
// The program is built with cilium/ebpf's asm package at run time, so using
// it needs no C compiler, only a kernel with XDP (generic XDP, which every
// driver supports, is the fallback when the driver has no native XDP).
//
// AttachEgress puts the same program on the sending side instead, with TCX
// (Linux 6.6 and later), to drop packets the host sends.
//
// XDP and TC see only packets that cross a network interface: rxe traffic
// between two addresses of one host is looped back inside the kernel and never
// reaches them, so faults need two hosts (the VM pair).
package faults

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Action is what the injector does to a selected packet.
type Action uint32

const (
	// Drop discards the packet before the stack sees it.
	Drop Action = iota
	// Corrupt flips every bit of one byte (Policy.CorruptOffset, counted from
	// the start of the BTH), so the receiver's ICRC check fails.
	Corrupt
)

// Policy selects packets and says what to do with them. The zero Policy
// selects nothing: Enabled must be set. All match conditions that are set
// must hold for a packet to match; of the matching packets, Every and
// Probability choose the ones acted on (both set: both must choose it), and
// Limit caps how many.
type Policy struct {
	Enabled bool
	Action  Action

	// Opcode matches the BTH opcode (for example 0x0a, RC RDMA WRITE ONLY);
	// nil matches any.
	Opcode *uint8
	// DestQPN matches the BTH destination QP number (24 bits); nil matches any.
	DestQPN *uint32
	// PSNFirst..PSNLast (inclusive, 24 bits) when PSNRange is set.
	PSNRange          bool
	PSNFirst, PSNLast uint32
	// MADAttr matches the attribute id of a MAD to QP1 (the rdma_cm's REQ,
	// REP, RTU, DREQ…, see the Attr constants); nil matches any packet.
	// Setting it implies DestQPN 1.
	MADAttr *uint16
	// SkipQP1 leaves packets to QP1 (the CM's MADs) alone, so that loss on
	// a data stream does not also stretch connection setup and teardown by
	// the CM's retry timeouts.
	SkipQP1 bool

	// Every acts on every Nth matching packet (the Nth, 2Nth…); 0 or 1 acts
	// on each.
	Every uint32
	// Probability in [0,1] that a matching packet is acted on; 0 means
	// "not random" (every match, subject to Every), use Enabled=false to
	// act on none.
	Probability float64
	// Limit is the most packets acted on; 0 is no limit.
	Limit uint32
	// CorruptOffset is the byte (from the start of the BTH, below 1024)
	// that Corrupt flips. The default 12 is the first byte after the BTH.
	CorruptOffset uint32
}

// The rdma_cm's MAD attribute ids (InfiniBand spec, chapter 12).
const (
	AttrREQ  uint16 = 0x0010
	AttrMRA  uint16 = 0x0011
	AttrREJ  uint16 = 0x0012
	AttrREP  uint16 = 0x0013
	AttrRTU  uint16 = 0x0014
	AttrDREQ uint16 = 0x0015
	AttrDREP uint16 = 0x0016
)

// Counters are what the program has seen and done since Attach (or the last
// ResetCounters).
type Counters struct {
	Seen      uint64 // RoCEv2 packets (IPv4, UDP port 4791, a whole BTH)
	Matched   uint64 // of those, matching the policy's conditions
	Dropped   uint64
	Corrupted uint64
}

func (c Counters) String() string {
	return fmt.Sprintf("seen %d matched %d dropped %d corrupted %d", c.Seen, c.Matched, c.Dropped, c.Corrupted)
}

// Injector is the program attached to one interface.
type Injector struct {
	Iface string
	// Mode is "driver" or "generic", the XDP mode the program runs in on
	// the receive path, or "tcx-egress" (AttachEgress).
	Mode string

	egress bool // a TC program (AttachEgress)
	policy *ebpf.Map
	stats  *ebpf.Map
	prog   *ebpf.Program
	link   link.Link
}

// Attach loads the program and attaches it to the interface, in the driver's
// native XDP mode when it has one and in generic mode otherwise. The policy
// starts disabled: packets are counted but none is touched.
func Attach(iface string) (*Injector, error) {
	inj, index, err := loadFor(iface, xdpHook)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			inj.Close()
		}
	}()
	var errs []error
	for _, m := range []struct {
		name  string
		flags link.XDPAttachFlags
	}{{"driver", link.XDPDriverMode}, {"generic", link.XDPGenericMode}} {
		l, err := link.AttachXDP(link.XDPOptions{Program: inj.prog, Interface: index, Flags: m.flags})
		if err == nil {
			inj.link, inj.Mode = l, m.name
			ok = true
			return inj, nil
		}
		errs = append(errs, fmt.Errorf("%s mode: %w", m.name, err))
	}
	return nil, fmt.Errorf("faults: attaching XDP to %s: %w", iface, errors.Join(errs...))
}

// AttachEgress attaches the program to the interface's egress with TCX
// (Linux 6.6 and later; on earlier kernels the error says so): packets the
// host sends are dropped before they leave, so one host can lose its own
// ACKs or the last packet of its own message. Corrupt is refused there (see
// Set). The policy starts disabled.
func AttachEgress(iface string) (*Injector, error) {
	inj, index, err := loadFor(iface, tcHook)
	if err != nil {
		return nil, err
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: index, Program: inj.prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		inj.Close()
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("faults: attaching to the egress of %s: this kernel has no TCX (Linux 6.6 added it): %w", iface, err)
		}
		return nil, fmt.Errorf("faults: attaching to the egress of %s with TCX: %w", iface, err)
	}
	inj.Mode, inj.link = "tcx-egress", l
	return inj, nil
}

// loadFor finds the interface named iface and loads the program for hook
// h (load), for the caller to attach there; it returns the interface's
// index.
func loadFor(iface string, h hook) (*Injector, int, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, 0, fmt.Errorf("faults: %w", err)
	}
	inj, err := load(h)
	if err != nil {
		return nil, 0, err
	}
	inj.Iface = iface
	return inj, ifc.Index, nil
}

// load creates the maps and loads the program for hook h.
func load(h hook) (_ *Injector, err error) {
	inj := &Injector{}
	defer func() {
		if err != nil {
			inj.Close()
		}
	}()
	inj.policy, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rdma_fault_pol", Type: ebpf.Array, KeySize: 4, ValueSize: policySize, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("faults: policy map: %w", err)
	}
	inj.stats, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rdma_fault_cnt", Type: ebpf.Array, KeySize: 4, ValueSize: statsSize, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("faults: counter map: %w", err)
	}
	typ := ebpf.XDP
	if h == tcHook {
		typ = ebpf.SchedCLS
	}
	inj.egress = h == tcHook
	inj.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "rdma_fault",
		Type:         typ,
		License:      "Dual MIT/GPL",
		Instructions: program(h, inj.policy.FD(), inj.stats.FD()),
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("faults: the verifier refused the program: %+v", ve)
		}
		return nil, fmt.Errorf("faults: loading the %v program: %w", typ, err)
	}
	return inj, nil
}

// Close detaches the program and frees it and its maps.
func (inj *Injector) Close() error {
	var errs []error
	if inj.link != nil {
		errs = append(errs, inj.link.Close())
		inj.link = nil
	}
	for _, c := range []interface{ Close() error }{inj.prog, inj.policy, inj.stats} {
		if c != nil && !isNilPtr(c) {
			errs = append(errs, c.Close())
		}
	}
	inj.prog, inj.policy, inj.stats = nil, nil, nil
	return errors.Join(errs...)
}

func isNilPtr(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *ebpf.Program:
		return v == nil
	case *ebpf.Map:
		return v == nil
	}
	return false
}

// Set replaces the policy. The packet counter behind Every restarts.
func (inj *Injector) Set(p Policy) error {
	if inj.egress && p.Action == Corrupt {
		// On egress the UDP checksum may still be the stack's partial
		// one, for the NIC to finish: a corrupted byte would then travel
		// with a valid checksum, or the cleared checksum would be
		// overwritten. Only the receiver's XDP corrupts reliably.
		return errors.New("faults: corrupting on egress is not supported; attach to the receiver (Attach)")
	}
	b, err := p.encode()
	if err != nil {
		return err
	}
	if err := inj.policy.Update(uint32(0), b, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("faults: setting the policy: %w", err)
	}
	return nil
}

// Counters reads the counters.
func (inj *Injector) Counters() (Counters, error) {
	b := make([]byte, statsSize)
	if err := inj.stats.Lookup(uint32(0), &b); err != nil {
		return Counters{}, fmt.Errorf("faults: reading the counters: %w", err)
	}
	le := binary.LittleEndian
	return Counters{Seen: le.Uint64(b[0:]), Matched: le.Uint64(b[8:]), Dropped: le.Uint64(b[16:]), Corrupted: le.Uint64(b[24:])}, nil
}

// ResetCounters sets the counters to zero.
func (inj *Injector) ResetCounters() error {
	return inj.stats.Update(uint32(0), make([]byte, statsSize), ebpf.UpdateAny)
}

// The policy map's value, as the program reads it (host byte order, which
// is little endian on every architecture this runs on; encode checks).
const (
	polFlags    = 0  // flag bits below
	polOpcode   = 4  // BTH opcode
	polQPN      = 8  // 24-bit destination QPN
	polPSNFirst = 12 // 24-bit PSN range, inclusive
	polPSNLast  = 16
	polProb     = 20 // act when bpf_get_prandom_u32() < prob
	polEvery    = 24 // act on every Nth match
	polLimit    = 28 // at most this many actions
	polCorrupt  = 32 // corrupt offset from the BTH
	polAttr     = 36 // MAD attribute id, as the packet holds it (big endian) read as a little-endian u16
	polCount    = 40 // matches so far (the program's own counter for Every)
	polActed    = 44 // actions so far (for Limit)
	policySize  = 48

	flagEnabled = 1 << 0
	flagOpcode  = 1 << 1
	flagQPN     = 1 << 2
	flagPSN     = 1 << 3
	flagProb    = 1 << 4
	flagEvery   = 1 << 5
	flagLimit   = 1 << 6
	flagCorrupt = 1 << 7
	flagAttr    = 1 << 8
	flagSkipQP1 = 1 << 9

	statSeen      = 0
	statMatched   = 8
	statDropped   = 16
	statCorrupted = 24
	statsSize     = 32
)

// validOpcodes are the BTH opcodes of RC, UC and UD (IBA 9.2, table 38) and
// CNP; anything else is refused so that a typo cannot match nothing silently.
func validOpcode(op uint8) bool {
	switch {
	case op <= 0x17: // RC
		return true
	case op >= 0x20 && op <= 0x2b: // UC
		return true
	case op == 0x64 || op == 0x65: // UD
		return true
	}
	return op == 0x81 // CNP
}

func (p Policy) encode() ([]byte, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("faults: big-endian hosts are not supported")
	}
	b := make([]byte, policySize)
	le := binary.LittleEndian
	var fl uint32
	if p.Enabled {
		fl |= flagEnabled
	}
	switch p.Action {
	case Drop:
	case Corrupt:
		fl |= flagCorrupt
		off := p.CorruptOffset
		if off == 0 {
			off = 12
		}
		if off >= 1024 {
			return nil, fmt.Errorf("faults: corrupt offset %d is not below 1024", off)
		}
		le.PutUint32(b[polCorrupt:], off)
	default:
		return nil, fmt.Errorf("faults: unknown action %d", p.Action)
	}
	if p.Opcode != nil {
		if !validOpcode(*p.Opcode) {
			return nil, fmt.Errorf("faults: %#02x is not a RoCE BTH opcode", *p.Opcode)
		}
		fl |= flagOpcode
		le.PutUint32(b[polOpcode:], uint32(*p.Opcode))
	}
	qpn := p.DestQPN
	if p.SkipQP1 {
		if p.MADAttr != nil || (p.DestQPN != nil && *p.DestQPN == 1) {
			return nil, errors.New("faults: SkipQP1 with a match on QP1 matches nothing")
		}
		fl |= flagSkipQP1
	}
	if p.MADAttr != nil {
		one := uint32(1)
		if qpn != nil && *qpn != 1 {
			return nil, fmt.Errorf("faults: MADs go to QP1, not QP %d", *qpn)
		}
		qpn = &one
		fl |= flagAttr
		// The program reads the big-endian attribute with a little-endian load.
		le.PutUint32(b[polAttr:], uint32(*p.MADAttr>>8|*p.MADAttr<<8))
	}
	if qpn != nil {
		if *qpn >= 1<<24 {
			return nil, fmt.Errorf("faults: QPN %#x does not fit in 24 bits", *qpn)
		}
		fl |= flagQPN
		le.PutUint32(b[polQPN:], *qpn)
	}
	if p.PSNRange {
		if p.PSNFirst >= 1<<24 || p.PSNLast >= 1<<24 || p.PSNFirst > p.PSNLast {
			return nil, fmt.Errorf("faults: bad PSN range %#x..%#x", p.PSNFirst, p.PSNLast)
		}
		fl |= flagPSN
		le.PutUint32(b[polPSNFirst:], p.PSNFirst)
		le.PutUint32(b[polPSNLast:], p.PSNLast)
	}
	if math.IsNaN(p.Probability) || p.Probability < 0 || p.Probability > 1 {
		return nil, fmt.Errorf("faults: probability %v is not in [0,1]", p.Probability)
	}
	if p.Probability > 0 && p.Probability < 1 {
		fl |= flagProb
		le.PutUint32(b[polProb:], uint32(p.Probability*(1<<32)))
	}
	if p.Every > 1 {
		fl |= flagEvery
		le.PutUint32(b[polEvery:], p.Every)
	}
	if p.Limit > 0 {
		fl |= flagLimit
		le.PutUint32(b[polLimit:], p.Limit)
	}
	le.PutUint32(b[polFlags:], fl)
	return b, nil
}

// ParseOpcode accepts a BTH opcode as a number (0x0a, 10) or one of the names
// in opcodeNames (case-insensitive).
func ParseOpcode(s string) (uint8, error) {
	for op, n := range opcodeNames {
		if strings.EqualFold(n, s) {
			return op, nil
		}
	}
	var v uint64
	if _, err := fmt.Sscan(s, &v); err != nil || v > 0xff || !validOpcode(uint8(v)) {
		return 0, fmt.Errorf("faults: %q is not a RoCE BTH opcode", s)
	}
	return uint8(v), nil
}

var opcodeNames = map[uint8]string{
	0x00: "send_first", 0x01: "send_middle", 0x02: "send_last", 0x04: "send_only",
	0x06: "write_first", 0x07: "write_middle", 0x08: "write_last", 0x0a: "write_only",
	0x0c: "read_request", 0x0d: "read_response_first", 0x0e: "read_response_middle",
	0x0f: "read_response_last", 0x10: "read_response_only", 0x11: "ack",
	0x64: "ud_send_only", 0x81: "cnp",
}
