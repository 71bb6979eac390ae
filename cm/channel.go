package cm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/qpabi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// EventChannel is an open rdma_cm event channel (struct
// rdma_event_channel): a descriptor of /dev/infiniband/rdma_cm that carries
// the commands of the IDs created on it and reports their events. Waiting
// for an event parks the goroutine in the Go runtime's poller; no OS thread
// blocks. Its methods are safe for concurrent use.
type EventChannel struct {
	f ucmaFile

	mu     sync.Mutex
	closed bool
	// pending holds events read while a completion wait of a synchronous
	// ID watched the channel (ID.GetSendComp); GetEvent returns them first.
	pending []pendingEvent
	// kaIDs counts IDs with a keepalive (ID.SetKeepAlive), whose events
	// the library makes: GetEvent then also waits for wake, which is
	// closed when such an event is queued.
	kaIDs   atomic.Int32
	wake    chan struct{}
	cleanup runtime.Cleanup
}

// pendingEvent is a processed event kept on a synchronous ID's channel.
// The channel belongs to the ID, and what the ID holds must not point back
// to it (see idRes), so the event's IDs are kept by weak pointer; an event
// whose ID was dropped meanwhile is dropped too. A CONNECT_REQUEST's new
// ID, which only the event holds, is kept as it is.
type pendingEvent struct {
	ev         *Event // its ID and ListenID cleared
	id, listen weak.Pointer[ID]
	newID      *ID
}

func makePending(ev *Event) pendingEvent {
	p := pendingEvent{ev: ev}
	if ev.Type == EventConnectRequest {
		p.newID = ev.ID
	} else if ev.ID != nil {
		p.id = ev.ID.self
	}
	if ev.ListenID != nil {
		p.listen = ev.ListenID.self
	}
	ev.ID, ev.ListenID = nil, nil
	return p
}

// event restores the event, or returns nil if its ID is gone.
func (p pendingEvent) event() *Event {
	ev := p.ev
	switch {
	case p.newID != nil:
		ev.ID = p.newID
	case p.id != (weak.Pointer[ID]{}):
		if ev.ID = p.id.Value(); ev.ID == nil {
			return nil
		}
	}
	if p.listen != (weak.Pointer[ID]{}) {
		if ev.ListenID = p.listen.Value(); ev.ListenID == nil {
			return nil
		}
	}
	return ev
}

// keep queues an event for GetEvent.
func (ch *EventChannel) keep(ev *Event) {
	ch.mu.Lock()
	ch.pending = append(ch.pending, makePending(ev))
	ch.mu.Unlock()
}

// check returns ErrClosed once the channel is closed.
func (ch *EventChannel) check() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return ErrClosed
	}
	return nil
}

// abiVersion checks the kernel's rdma_cm ABI once: rdmago speaks version 4.
var abiVersion = sync.OnceValue(func() error {
	b, err := os.ReadFile("/sys/class/misc/rdma_cm/abi_version")
	if err != nil {
		// No sysfs, or an old layout: the open decides.
		return nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v != abi.RDMA_USER_CM_ABI_VERSION {
		return fmt.Errorf("cm: the kernel's rdma_cm ABI is version %q, rdmago speaks %d: %w",
			strings.TrimSpace(string(b)), abi.RDMA_USER_CM_ABI_VERSION, unix.EPROTONOSUPPORT)
	}
	return nil
})

// NewEventChannel opens an event channel (rdma_create_event_channel).
func NewEventChannel() (*EventChannel, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if err := abiVersion(); err != nil {
		return nil, err
	}
	f, err := openDevFile()
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			return nil, &noDeviceError{err}
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("cm: open %s (needs read-write access): %w", devPath, err)
		}
		return nil, fmt.Errorf("cm: open %s: %w", devPath, err)
	}
	return newEventChannel(f), nil
}

// noDeviceError is the connection manager's device file missing: the
// rdma_ucm module is not loaded, or the kernel has no RDMA at all. It
// matches syscall.ENODEV, the errno librdmacm gives there (ucma_init finds
// no device), and uverbs.ErrNoDevice, so that one test covers a host
// without RDMA whichever package the program reached first; it wraps the
// open's own errno (ENOENT, say).
type noDeviceError struct{ err error }

func (e *noDeviceError) Error() string {
	return fmt.Sprintf("cm: no RDMA connection manager: open %s (is the rdma_ucm module loaded?): %v", devPath, e.err)
}

func (e *noDeviceError) Unwrap() error { return e.err }

func (e *noDeviceError) Is(target error) bool {
	return target == unix.ENODEV || target == uverbs.ErrNoDevice
}

// newEventChannel makes a channel on f. A channel dropped without Close
// closes its file when the garbage collector finds it unreachable (which
// it is not while an ID on it is reachable); the kernel then destroys the
// IDs still on it.
func newEventChannel(f ucmaFile) *EventChannel {
	ch := &EventChannel{f: f}
	ch.cleanup = runtime.AddCleanup(ch, func(f ucmaFile) { f.close() }, f)
	return ch
}

// Close closes the channel (rdma_destroy_event_channel). The kernel then
// destroys every ID still on it; their methods fail with ErrClosed, and
// their Close only releases what they hold in the process. A goroutine
// waiting in GetEvent returns ErrClosed, as does every later GetEvent.
// Closing twice is not an error. A channel dropped without Close is
// closed once the garbage collector finds it and every ID on it
// unreachable.
func (ch *EventChannel) Close() error {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return nil
	}
	ch.closed = true
	ch.pending = nil
	ch.cleanup.Stop()
	ch.mu.Unlock()
	return ch.f.close()
}

// SyscallConn gives the channel's descriptor to a program that polls it
// itself (syscall.Conn, as os.File does): it is readable while events are
// queued, stays non-blocking and belongs to the channel. After Close the
// channel answers ErrClosed.
func (ch *EventChannel) SyscallConn() (syscall.RawConn, error) {
	if err := ch.check(); err != nil {
		return nil, err
	}
	rc, ok := ch.f.(interface{ rawConn() syscall.RawConn })
	if !ok {
		return nil, fmt.Errorf("cm: this channel's file has no descriptor: %w", errors.ErrUnsupported)
	}
	return rc.rawConn(), nil
}

// GetEvent waits for the next event (rdma_get_cm_event) until ctx is done.
// As librdmacm does before returning an event, it completes the work the
// event implies: an ADDR_RESOLVED or ROUTE_RESOLVED ID learns its device
// and route; a CONNECT_REQUEST brings a new ID (Event.ID); a
// CONNECT_RESPONSE on an ID with a QP moves the QP to RTS and establishes
// the connection, and is reported as ESTABLISHED; a MULTICAST_JOIN attaches
// the ID's QP to the group; a REJECTED, UNREACHABLE, CONNECT_ERROR or
// DEVICE_REMOVAL moves the ID's QP to the error state, so its outstanding
// work requests complete, flushed, and a DISCONNECTED does so a second
// later, which leaves requests the peer acknowledged just before it left
// the time to complete successfully (librdmacm moves the QP for REJECTED
// only, and leaves a QP whose peer disconnected in RTS, where requests the
// peer never answers wait for the transport's retries). When that work fails, the event reports the failure
// (ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, MULTICAST_ERROR) with the errno
// as status. Events of IDs destroyed meanwhile are dropped.
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return nil, ErrClosed
	}
	for len(ch.pending) > 0 {
		p := ch.pending[0]
		ch.pending[0] = pendingEvent{}
		ch.pending = ch.pending[1:]
		if ev := p.event(); ev != nil {
			ch.mu.Unlock()
			return ev, nil
		}
	}
	wctx, stop := ch.wakeable(ctx)
	ch.mu.Unlock()
	for {
		ev, err := ch.read(wctx)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errWoken) {
			stop()
			return ch.GetEvent(ctx) // the library queued an event
		}
		if err != nil || ev != nil {
			stop()
			return ev, err
		}
	}
}

// read reads one event from the kernel and processes it. It returns a nil
// event for one that is dropped.
func (ch *EventChannel) read(ctx context.Context) (*Event, error) {
	c := eventCalls.Get().(*eventCall)
	defer eventCalls.Put(c)
	// Zeroed: a kernel with a shorter response leaves the rest as it is.
	c.resp = abi.RdmaUcmEventResp{}
	resp := &c.resp
	c.body.Response = ptr(resp)
	if err := ch.f.getEvent(ctx, c.bytes()); err != nil {
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return nil, err
		}
		return nil, wrapErr("get event", err)
	}
	// processEvent copies what it keeps out of resp.
	return processEvent(ch, resp), nil
}

// eventCall is a GET_EVENT command with its response (352 bytes).
type eventCall = ucmaCall[abi.RdmaUcmGetEvent, abi.RdmaUcmEventResp]

// eventCalls recycles the GET_EVENT commands: a connection's events cost
// an allocation of each otherwise.
var eventCalls = sync.Pool{New: func() any {
	return newCall[abi.RdmaUcmGetEvent, abi.RdmaUcmEventResp](abi.RDMA_USER_CM_CMD_GET_EVENT)
}}

// The union in struct rdma_ucm_event_resp: rdma_ucm_conn_param or
// rdma_ucm_ud_param.
func connParamOf(r *abi.RdmaUcmEventResp) *abi.RdmaUcmConnParam {
	return (*abi.RdmaUcmConnParam)(unsafe.Pointer(&r.Param))
}

func udParamOf(r *abi.RdmaUcmEventResp) *abi.RdmaUcmUdParam {
	return (*abi.RdmaUcmUdParam)(unsafe.Pointer(&r.Param))
}

func copyConn(dst *ConnParam, src *abi.RdmaUcmConnParam) {
	if n := min(int(src.Private_data_len), len(src.Private_data)); n > 0 {
		dst.PrivateData = append([]byte(nil), src.Private_data[:n]...)
	}
	dst.ResponderResources = src.Responder_resources
	dst.InitiatorDepth = src.Initiator_depth
	dst.FlowControl = src.Flow_control
	dst.RetryCount = src.Retry_count
	dst.RNRRetryCount = src.Rnr_retry_count
	dst.SRQ = src.Srq != 0
	dst.QPNum = src.Qp_num
}

func copyUD(dst *UDParam, src *abi.RdmaUcmUdParam) {
	if n := min(int(src.Private_data_len), len(src.Private_data)); n > 0 {
		dst.PrivateData = append([]byte(nil), src.Private_data[:n]...)
	}
	dst.AHAttr = qpabi.DecodeAHAttr(&src.Ah_attr)
	dst.QPNum = src.Qp_num
	dst.QKey = src.Qkey
}

// copyParams copies the union as the ID's QP type reads it.
func copyParams(ev *Event, id *ID, r *abi.RdmaUcmEventResp) {
	if id.qpType == qp.UD {
		copyUD(&ev.UD, udParamOf(r))
	} else {
		copyConn(&ev.Conn, connParamOf(r))
	}
}

// processEvent turns the kernel's event into an Event, doing what
// rdma_get_cm_event does for each type, or returns nil when the event is
// dropped.
func processEvent(ch *EventChannel, r *abi.RdmaUcmEventResp) *Event {
	ev := &Event{Type: EventType(r.Event), Status: int(int32(r.Status))}

	switch ev.Type {
	case EventMulticastJoin, EventMulticastError:
		mc := lookupMulticast(r.Uid)
		if mc == nil {
			return nil // left meanwhile
		}
		id := mc.id.Value()
		if id == nil {
			return nil // dropped meanwhile
		}
		if !id.report(ev) {
			return nil
		}
		defer id.mu.Unlock()
		ev.UserData = mc.userData
		copyUD(&ev.UD, udParamOf(r))
		if ev.Type == EventMulticastJoin {
			if err := id.processJoin(mc, &ev.UD); err != nil {
				ev.Type = EventMulticastError
				ev.Status = negErrno(err)
			}
		}
		return ev
	}

	var id *ID
	if r.Uid != 0 {
		id = lookupUID(r.Uid)
	} else {
		// Old kernels could report an established connection with uid
		// 0; find the ID by its kernel handle then, as librdmacm does.
		id = lookupHandle(r.Id)
		if id == nil || ev.Type != EventEstablished {
			return nil
		}
	}
	if ev.Type == EventConnectRequest {
		if id != nil {
			if ok := id.processConnReq(ev, r); ok || ev.ID != nil {
				// Made, or made and destroyed again.
				if ok {
					return ev
				}
				return nil
			}
		}
		// The listener is gone: the kernel's new ID, reported now, has
		// nobody to answer it.
		destroyKernID(ch.f, r.Id)
		return nil
	}
	if id == nil {
		return nil // destroyed meanwhile
	}

	if !id.report(ev) {
		return nil
	}
	defer id.mu.Unlock()
	switch ev.Type {
	case EventAddrResolved:
		if err := id.queryRoute(); err != nil {
			ev.Type, ev.Status = EventAddrError, negErrno(err)
		}
	case EventRouteResolved:
		if err := id.queryRoute(); err != nil {
			ev.Type, ev.Status = EventRouteError, negErrno(err)
		}
	case EventConnectResponse:
		copyConn(&ev.Conn, connParamOf(r))
		if id.qp.Load() != nil {
			if err := id.establish(); err != nil {
				ev.Type, ev.Status = EventConnectError, negErrno(err)
				id.connectErr = true
			} else {
				ev.Type = EventEstablished
				id.setState(stateConnected)
			}
		}
	case EventEstablished:
		copyParams(ev, id, r)
		id.setState(stateConnected)
	case EventRejected:
		if id.connectErr {
			id.eventsAcked.Add(1)
			return nil
		}
		copyConn(&ev.Conn, connParamOf(r))
		id.modifyQPErr()
		id.setState(stateDisconnected)
	case EventDisconnected:
		if id.connectErr || id.kaErr != nil {
			// After a failed connect, the kernel's cleanup; after the
			// keepalive reported the peer gone, a second report.
			id.eventsAcked.Add(1)
			return nil
		}
		copyConn(&ev.Conn, connParamOf(r))
		// The QP is not flushed yet: work the peer took before it
		// disconnected may still be completing (its acknowledgement
		// received but not yet turned into a completion), and flushing
		// now would report it lost. It is flushed a grace period from
		// now, whether or not anybody waits for its completions: a
		// program that polls its CQ itself would otherwise wait for the
		// transport's retries, which need not end (librdmacm leaves the
		// QP alone on DISCONNECTED). Disconnect flushes at once.
		id.peerGone = time.Now()
		id.setState(stateDisconnected)
		if q := id.qp.Load(); q != nil {
			id.stopPeerTimer()
			id.peerTimer = time.AfterFunc(peerGoneGrace, func() { id.flushPeerGone(q) })
		}
	case EventUnreachable, EventConnectError, EventDeviceRemoval:
		copyParams(ev, id, r)
		id.modifyQPErr()
		id.setState(stateDisconnected)
		if ev.Type == EventDeviceRemoval && id.dev != nil {
			id.dev.removed()
		}
	default:
		copyParams(ev, id, r)
	}
	return ev
}

// negErrno is the status an event gets for err: its negated errno.
func negErrno(err error) int {
	var e unix.Errno
	if errors.As(err, &e) {
		return -int(e)
	}
	return -int(unix.EIO)
}

// processConnReq makes the ID of an incoming connection
// (ucma_process_conn_req): it belongs to the listener's channel, or, for a
// synchronous listener, gets a channel of its own, and learns its route
// and device. It reports false when the listener is gone (ev.ID is then
// nil) or the new ID could not be set up (it is then destroyed).
func (listen *ID) processConnReq(ev *Event, r *abi.RdmaUcmEventResp) bool {
	listen.mu.Lock()
	if listen.destroyed.Load() {
		listen.mu.Unlock()
		return false
	}
	listen.eventsReported++
	ch, sync, pd, qpInit, ud := listen.ch, listen.sync, listen.pd, listen.qpInit, listen.userData
	listen.mu.Unlock()

	id := newID(ch, false, ud, listen.ps, listen.qpType)
	id.handle = r.Id
	if qpInit != nil {
		// A passive endpoint's PD serves its connections too.
		id.pd = pd
	}
	copyParams(ev, id, r)
	id.initiatorDepth = ev.Conn.InitiatorDepth
	id.respRes = ev.Conn.ResponderResources
	ev.ID, ev.ListenID = id, listen
	id.track()

	id.mu.Lock()
	err := error(nil)
	if sync {
		err = id.migrate(nil)
	}
	if err == nil {
		err = id.queryRoute()
	}
	id.mu.Unlock()
	if err != nil {
		id.Close()
		listen.eventsAcked.Add(1)
		return false
	}
	return true
}

// report makes ev an event of id and counts it, with id.mu locked for the
// caller to finish the event and unlock; it returns false, unlocked, for
// an ID destroyed meanwhile, whose event is dropped.
func (id *ID) report(ev *Event) bool {
	id.mu.Lock()
	if id.destroyed.Load() {
		id.mu.Unlock()
		return false
	}
	id.eventsReported++
	ev.ID = id
	return true
}
