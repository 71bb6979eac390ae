// Package qp holds queue-pair attributes and the queue-pair state machine:
// the part of ibv_modify_qp and ibv_query_qp that needs no kernel. It
// mirrors libibverbs' struct ibv_qp_attr and its attribute mask, checks a
// transition the way the kernel's ib_modify_qp_is_ok does (Validate), and
// builds the attributes of the usual RESET→INIT→RTR→RTS sequence (ToInit,
// ToRTR, ToRTS).
//
// Package uverbs turns the attributes into the kernel's commands and sends
// them (uverbs.QP.Modify, Query); this package never touches a device, so
// everything in it works on any host.
package qp

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/rdmago/rdma/wr"
)

// Type is a queue pair's transport (enum ibv_qp_type).
type Type uint32

// Queue pair types, with the values of enum ibv_qp_type.
const (
	RC Type = 2 // reliable connected
	UC Type = 3 // unreliable connected
	UD Type = 4 // unreliable datagram
	// XRCSend is the sending side of an extended reliable connection
	// (IBV_QPT_XRC_SEND, the kernel's XRC_INI): an RC-like send queue
	// whose sends name the target's SRQ (wr.SendWR.RemoteSRQN); it has no
	// receive queue.
	XRCSend Type = 9
	// XRCRecv is the receiving side (IBV_QPT_XRC_RECV, XRC_TGT): a QP of an
	// XRC domain with no queues of its own, whose incoming messages land in
	// the domain's XRC SRQ that each send names.
	XRCRecv Type = 10
)

func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	case XRCSend:
		return "XRC_SEND"
	case XRCRecv:
		return "XRC_RECV"
	}
	return fmt.Sprintf("Type(%d)", uint32(t))
}

// Caps are a queue pair's queue sizes (struct ibv_qp_cap): what a create
// asks for, and what the device granted (uverbs.QP.Caps).
type Caps struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// State is a queue pair's state (enum ibv_qp_state).
type State uint32

// Queue pair states, with the values of enum ibv_qp_state.
const (
	StateReset   State = 0
	StateInit    State = 1
	StateRTR     State = 2 // ready to receive
	StateRTS     State = 3 // ready to send
	StateSQD     State = 4 // send queue drained
	StateSQE     State = 5 // send queue error
	StateErr     State = 6
	StateUnknown State = 7
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

// String returns the state's name without the IBV_QPS_ prefix ("RTS").
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint32(s))
}

// MigState is the path migration state (enum ibv_mig_state).
type MigState uint8

// Path migration states.
const (
	MigMigrated MigState = 0
	MigRearm    MigState = 1
	MigArmed    MigState = 2
)

// AttrMask says which fields of an Attr a modify sets or a query asks for
// (enum ibv_qp_attr_mask).
type AttrMask uint32

// Attribute mask bits, with the values of IBV_QP_*. Bits 21 to 24 are
// reserved for the kernel.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
	AttrRateLimit        AttrMask = 1 << 25
)

// maskNames are the IBV_QP_* names without the prefix, by bit.
var maskNames = [...]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV",
	"PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH",
	"MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN",
	"", "", "", "", "RATE_LIMIT",
}

// String lists the mask's bits by name, joined by "|" ("STATE|PORT"); bits
// without a name come last, in hex. The empty mask is "0".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	return m.join("|")
}

func (m AttrMask) join(sep string) string {
	var names []string
	for rest := m; rest != 0; rest &= rest - 1 {
		b := bits.TrailingZeros32(uint32(rest))
		if b < len(maskNames) && maskNames[b] != "" {
			names = append(names, maskNames[b])
			m &^= 1 << b
		}
	}
	if m != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint32(m)))
	}
	return strings.Join(names, sep)
}

// AHAttr is an address vector: the primary or alternate path of a connected
// QP, or the destination of a UD address handle (struct ibv_ah_attr), RoCE
// v2 or IB.
type AHAttr struct {
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
	// The GRH, for RoCE and routed IB.
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// Attr holds a queue pair's attributes (struct ibv_qp_attr). A modify reads,
// and a query fills, only the fields its AttrMask names.
type Attr struct {
	State        State    // AttrState: the state to move to (modify) or the current one (query)
	CurState     State    // AttrCurState: the state the caller believes the QP is in
	PathMTU      MTU      // AttrPathMTU
	PathMigState MigState // AttrPathMigState
	QKey         uint32   // AttrQKey (UD)
	RQPSN        uint32   // AttrRQPSN: first PSN expected from the peer
	SQPSN        uint32   // AttrSQPSN: first PSN sent
	DestQPNum    uint32   // AttrDestQPN: the peer's QP number
	// AttrAccessFlags: the remote operations the QP accepts (RemoteWrite,
	// RemoteRead, RemoteAtomic).
	QPAccessFlags wr.Access
	Caps          Caps   // AttrCap: queue sizes (query only)
	AHAttr        AHAttr // AttrAV: the primary path
	AltAHAttr     AHAttr // AttrAltPath, with AltPKeyIndex, AltPortNum, AltTimeout
	PKeyIndex     uint16 // AttrPKeyIndex
	AltPKeyIndex  uint16
	// AttrEnSQDAsyncNotify: raise IBV_EVENT_SQ_DRAINED when SQD is reached.
	EnSQDAsyncNotify bool
	SQDraining       bool  // query only: the QP is in SQD and still draining
	MaxRdAtomic      uint8 // AttrMaxQPRdAtomic: outstanding reads and atomics this QP may issue
	MaxDestRdAtomic  uint8 // AttrMaxDestRdAtomic: incoming reads and atomics it accepts at once
	MinRNRTimer      uint8 // AttrMinRNRTimer: the RNR NAK timer code sent to the peer
	PortNum          uint8 // AttrPort
	Timeout          uint8 // AttrTimeout: local ACK timeout, 4.096 µs × 2^Timeout (0 = infinite)
	RetryCnt         uint8 // AttrRetryCnt
	RNRRetry         uint8 // AttrRNRRetry (7 = infinite)
	AltPortNum       uint8
	AltTimeout       uint8
	RateLimit        uint32 // AttrRateLimit, in kbps (extended modify only)
}

// InitAttr is what a query returns of the attributes the QP was created with
// (the part of struct ibv_qp_init_attr the kernel reports).
type InitAttr struct {
	Caps Caps
	// SQSigAll: every send work request completes with a completion.
	SQSigAll bool
}
