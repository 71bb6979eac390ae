package cm

import (
	"fmt"
	"sync/atomic"

	"github.com/rdmago/rdma/qp"
)

// EventType is what happened to an ID (enum rdma_cm_event_type).
type EventType uint32

// Event types, with the values of enum rdma_cm_event_type.
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventAddrChange      EventType = 14
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String returns the name rdma_event_str gives ("RDMA_CM_EVENT_ESTABLISHED").
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint32(t))
}

// Limits of the private data the connection messages carry (the kernel
// checks them against the transport's limits and fails with EINVAL).
const (
	MaxPrivateData = 256 // RDMA_MAX_PRIVATE_DATA: the most any message carries
	// IB/RoCE limits per message, from the IB CM's message formats.
	MaxConnectPrivateData = 56  // REQ
	MaxAcceptPrivateData  = 196 // REP
	MaxRejectPrivateData  = 148 // REJ
	MaxUDConnectPrivate   = 180 // SIDR REQ
	MaxUDAcceptPrivate    = 136 // SIDR REP
)

// RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH: a ConnParam with these asks
// for the device's maximum.
const (
	MaxRespRes   = 0xff
	MaxInitDepth = 0xff
)

// UDPQKey is the Q_Key of UD QPs and multicast groups in the UDP port space
// (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ConnParam is the connection parameters of Connect and Accept and of the
// connection events (struct rdma_conn_param). Unlike librdmacm, where a
// NULL parameter means the defaults, the zero ConnParam asks for zeros;
// DefaultConnParam gives the defaults, and a nil *ConnParam means them too.
type ConnParam struct {
	// PrivateData goes with the request, reply or event (at most
	// MaxConnectPrivateData bytes on a connect, MaxAcceptPrivateData on an
	// accept, on IB and RoCE).
	PrivateData []byte
	// ResponderResources: RDMA reads and atomics the peer may have
	// outstanding against us (MaxRespRes: the device's maximum).
	ResponderResources uint8
	// InitiatorDepth: RDMA reads and atomics we may have outstanding
	// (MaxInitDepth: the device's maximum).
	InitiatorDepth uint8
	FlowControl    uint8
	RetryCount     uint8 // transport retries; ignored when accepting
	RNRRetryCount  uint8 // receiver-not-ready retries (7: infinite)
	// SRQ and QPNum describe the QP when the ID has none (Connect and Accept
	// take the ID's QP when it has one).
	SRQ   bool
	QPNum uint32
}

// DefaultConnParam returns what librdmacm uses without a parameter: the
// device's maximum read depths and seven transport and RNR retries.
func DefaultConnParam() ConnParam {
	return ConnParam{ResponderResources: MaxRespRes, InitiatorDepth: MaxInitDepth, RetryCount: 7, RNRRetryCount: 7}
}

// UDParam is what UD events carry (struct rdma_ud_param): the peer's
// address, QP number and Q_Key, from which an address handle for sending to
// it is built (ID.CreateAH). A CONNECT_REQUEST's carries only the private
// data; see ID.CreateAH for how a UD server answers.
type UDParam struct {
	PrivateData []byte
	AHAttr      qp.AHAttr
	QPNum       uint32
	QKey        uint32
}

// Event is one rdma_cm event (struct rdma_cm_event). Events are plain
// values the garbage collector reclaims; Ack exists for code ported from C
// and tells the ID its event was handled.
type Event struct {
	Type EventType
	// Status is 0 on success, a negative errno for failures, and for
	// REJECTED the reject reason (8, "invalid service ID", when nobody
	// listens on the port). Err turns it into an error.
	Status int
	// ID is the ID the event is for; for CONNECT_REQUEST, the new ID of the
	// incoming connection, with ListenID the listening one.
	ID       *ID
	ListenID *ID
	// Conn is set on the events of connected (RC) IDs, UD on those of UD
	// IDs and multicast events.
	Conn ConnParam
	UD   UDParam
	// UserData is, for multicast events, the value given to JoinMulticast.
	UserData any

	acked atomic.Bool
}

// Err returns the event's failure as an error wrapping its errno (see
// Error), or nil for a successful event.
func (e *Event) Err() error {
	if e.Status == 0 && e.Type != EventRejected && !isErrorEvent(e.Type) {
		return nil
	}
	return eventErr(e.Type.String(), e, e.Type)
}

func isErrorEvent(t EventType) bool {
	switch t {
	case EventAddrError, EventRouteError, EventConnectError, EventUnreachable, EventRejected, EventMulticastError:
		return true
	}
	return false
}

// PrivateData returns the private data of a connection or UD event.
func (e *Event) PrivateData() []byte {
	if e.Conn.PrivateData != nil {
		return e.Conn.PrivateData
	}
	return e.UD.PrivateData
}

// Ack acknowledges the event (rdma_ack_cm_event). Go needs no
// acknowledgment to free an event, and Close never waits for one, but an
// ID counts the events acknowledged (ID.EventsAcked) so ported code can
// keep librdmacm's bookkeeping. Acking twice counts once.
func (e *Event) Ack() error {
	if e.acked.Swap(true) {
		return nil
	}
	if e.ID != nil && e.ListenID == nil {
		e.ID.eventsAcked.Add(1)
	} else if e.ListenID != nil {
		e.ListenID.eventsAcked.Add(1)
	}
	return nil
}

func (e *Event) String() string {
	s := e.Type.String()
	if e.Status != 0 {
		s += fmt.Sprintf(" (status %d)", e.Status)
	}
	return s
}
