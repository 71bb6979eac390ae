package uverbs

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmago/rdma/qp"
)

// GUID is a 64-bit globally unique identifier, kept in the byte order the
// wire and the kernel use (big endian), as ibv's __be64 fields are.
type GUID [8]byte

// String formats the GUID as ibv_devinfo does: four groups of four hex digits.
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x",
		binary.BigEndian.Uint16(g[0:]), binary.BigEndian.Uint16(g[2:]),
		binary.BigEndian.Uint16(g[4:]), binary.BigEndian.Uint16(g[6:]))
}

// NodeType is the kind of node a device is (enum ibv_node_type).
type NodeType int

// Node types, with the values of enum ibv_node_type.
const (
	NodeUnknown     NodeType = -1
	NodeCA          NodeType = 1
	NodeSwitch      NodeType = 2
	NodeRouter      NodeType = 3
	NodeRNIC        NodeType = 4
	NodeUSNIC       NodeType = 5
	NodeUSNICUDP    NodeType = 6
	NodeUnspecified NodeType = 7
)

// String returns the name ibv_node_type_str gives.
func (t NodeType) String() string {
	switch t {
	case NodeCA:
		return "InfiniBand channel adapter"
	case NodeSwitch:
		return "InfiniBand switch"
	case NodeRouter:
		return "InfiniBand router"
	case NodeRNIC:
		return "iWARP NIC"
	case NodeUSNIC:
		return "usNIC"
	case NodeUSNICUDP:
		return "usNIC UDP"
	case NodeUnspecified:
		return "unspecified"
	}
	return "unknown"
}

// Transport is the transport a device speaks (enum ibv_transport_type).
type Transport int

// Transports, with the values of enum ibv_transport_type.
const (
	TransportUnknown     Transport = -1
	TransportIB          Transport = 0
	TransportIWARP       Transport = 1
	TransportUSNIC       Transport = 2
	TransportUSNICUDP    Transport = 3
	TransportUnspecified Transport = 4
)

// String returns the name ibv_devinfo prints for the transport.
func (t Transport) String() string {
	switch t {
	case TransportIB:
		return "InfiniBand"
	case TransportIWARP:
		return "iWARP"
	case TransportUSNIC:
		return "usNIC"
	case TransportUSNICUDP:
		return "usNIC UDP"
	case TransportUnspecified:
		return "unspecified"
	}
	return "invalid transport"
}

// AtomicCap says how a device's atomic operations are atomic (enum ibv_atomic_cap).
type AtomicCap uint32

// Atomic capabilities.
const (
	AtomicNone AtomicCap = 0 // no atomic operations
	AtomicHCA  AtomicCap = 1 // atomic with respect to this device only
	AtomicGlob AtomicCap = 2 // atomic with respect to the CPU and other devices too
)

// String returns the name ibv_devinfo prints.
func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

// DeviceCaps are a device's capability flags (enum ibv_device_cap_flags
// and its 64-bit extension): DeviceAttr.DeviceCapFlags has the first 32,
// DeviceCapFlagsEx all of them.
type DeviceCaps uint64

// Device capability flags.
const (
	DeviceResizeMaxWR         DeviceCaps = 1 << 0
	DeviceBadPKeyCntr         DeviceCaps = 1 << 1
	DeviceBadQKeyCntr         DeviceCaps = 1 << 2
	DeviceRawMulti            DeviceCaps = 1 << 3
	DeviceAutoPathMig         DeviceCaps = 1 << 4
	DeviceChangePhyPort       DeviceCaps = 1 << 5
	DeviceUDAVPortEnforce     DeviceCaps = 1 << 6
	DeviceCurrQPStateMod      DeviceCaps = 1 << 7
	DeviceShutdownPort        DeviceCaps = 1 << 8
	DeviceInitType            DeviceCaps = 1 << 9
	DevicePortActiveEvent     DeviceCaps = 1 << 10
	DeviceSysImageGUID        DeviceCaps = 1 << 11
	DeviceRCRNRNAKGen         DeviceCaps = 1 << 12
	DeviceSRQResize           DeviceCaps = 1 << 13
	DeviceNNotifyCQ           DeviceCaps = 1 << 14
	DeviceMemWindow           DeviceCaps = 1 << 17
	DeviceUDIPCsum            DeviceCaps = 1 << 18
	DeviceXRC                 DeviceCaps = 1 << 20
	DeviceMemMgtExtensions    DeviceCaps = 1 << 21
	DeviceMemWindowType2A     DeviceCaps = 1 << 23
	DeviceMemWindowType2B     DeviceCaps = 1 << 24
	DeviceRCIPCsum            DeviceCaps = 1 << 25
	DeviceRawIPCsum           DeviceCaps = 1 << 26
	DeviceManagedFlowSteering DeviceCaps = 1 << 29
	DeviceRawScatterFCS       DeviceCaps = 1 << 34
	DevicePCIWriteEndPadding  DeviceCaps = 1 << 36
)

// ODPCaps are the on-demand-paging capabilities (struct ibv_odp_caps).
type ODPCaps struct {
	GeneralCaps ODPGeneralCaps
	RCODPCaps   ODPTransportCaps
	UCODPCaps   ODPTransportCaps
	UDODPCaps   ODPTransportCaps
}

// TSOCaps are the TCP segmentation offload capabilities (struct ibv_tso_caps).
type TSOCaps struct {
	MaxTSO        uint32
	SupportedQPTs uint32
}

// RSSCaps are the receive-side scaling capabilities (struct ibv_rss_caps).
type RSSCaps struct {
	SupportedQPTs              uint32
	MaxRWQIndirectionTables    uint32
	MaxRWQIndirectionTableSize uint32
	RXHashFieldsMask           uint64
	RXHashFunction             uint8
}

// PacketPacingCaps are the rate-limiting capabilities (struct ibv_packet_pacing_caps).
type PacketPacingCaps struct {
	QPRateLimitMin uint32 // kbps
	QPRateLimitMax uint32 // kbps
	SupportedQPTs  uint32
}

// TMCaps are the tag-matching capabilities (struct ibv_tm_caps).
type TMCaps struct {
	MaxRndvHdrSize uint32
	MaxNumTags     uint32
	Flags          uint32
	MaxOps         uint32
	MaxSGE         uint32
}

// CQModerationCaps are the completion moderation limits (struct ibv_cq_moderation_caps).
type CQModerationCaps struct {
	MaxCQCount  uint16
	MaxCQPeriod uint16 // microseconds
}

// PCIAtomicCaps are the PCIe atomic operation sizes supported (struct ibv_pci_atomic_caps).
type PCIAtomicCaps struct {
	FetchAdd    uint16
	Swap        uint16
	CompareSwap uint16
}

// DeviceAttr holds what a device can do: the fields of struct ibv_device_attr_ex.
type DeviceAttr struct {
	FWVer                 string // formatted by the device's provider, as ibv_query_device does
	FWVerRaw              uint64 // the kernel's raw value
	NodeGUID              GUID
	SysImageGUID          GUID
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        DeviceCaps // the 32 bits of ibv_query_device
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEERdAtom           int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEEInitRdAtom       int
	AtomicCap             AtomicCap
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8

	// Extended attributes (ibv_query_device_ex). Zero where the kernel or
	// provider does not report them.
	ODPCaps                 ODPCaps
	CompletionTimestampMask uint64
	HCACoreClock            uint64 // kHz
	DeviceCapFlagsEx        DeviceCaps
	TSOCaps                 TSOCaps
	RSSCaps                 RSSCaps
	MaxWQTypeRQ             uint32
	PacketPacingCaps        PacketPacingCaps
	RawPacketCaps           uint32
	TMCaps                  TMCaps
	CQModCaps               CQModerationCaps
	MaxDMSize               uint64
	PCIAtomicCaps           PCIAtomicCaps
	XRCODPCaps              ODPTransportCaps
	PhysPortCntEx           uint32
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

// String returns the name ibv_port_state_str gives.
func (s PortState) String() string {
	switch s {
	case PortNop:
		return "PORT_NOP"
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	case PortActiveDefer:
		return "PORT_ACTIVE_DEFER"
	}
	return "invalid state"
}

// LinkLayer is the link layer of a port (IBV_LINK_LAYER_*).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// String returns the name ibv_devinfo prints.
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerUnspecified:
		return "Unspecified"
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// PortAttr holds a port's attributes: the fields of struct ibv_port_attr.
type PortAttr struct {
	State         PortState
	MaxMTU        qp.MTU
	ActiveMTU     qp.MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     LinkLayer
	Flags         uint8
	PortCapFlags2 uint16
	ActiveSpeedEx uint32 // zero where the kernel does not report it
}

// GIDType is the kind of a GID table entry (enum ibv_gid_type).
type GIDType uint32

// GID types.
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

// String returns the name ibv_devinfo prints.
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "unknown"
}

// GIDEntry is one entry of a port's GID table (struct ibv_gid_entry).
type GIDEntry struct {
	GID qp.GID
	// Index and Port have the width of qp.AHAttr's SGIDIndex and PortNum,
	// which name the entry: a table's entries past 255, which no address
	// handle or QP can name, are left out.
	Index       uint8
	Port        uint8
	Type        GIDType
	NetdevIndex uint32 // 0 when no netdev is bound to the entry
}
