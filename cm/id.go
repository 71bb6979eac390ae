package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/uverbs/abi"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space): which
// transport an ID's port numbers belong to.
type PortSpace uint16

// Port spaces.
const (
	PSIPoIB PortSpace = abi.RDMA_PS_IPOIB
	PSTCP   PortSpace = abi.RDMA_PS_TCP // reliable connected (RC) QPs
	PSUDP   PortSpace = abi.RDMA_PS_UDP // unreliable datagram (UD) QPs
	PSIB    PortSpace = abi.RDMA_PS_IB
)

func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "RDMA_PS_IPOIB"
	case PSTCP:
		return "RDMA_PS_TCP"
	case PSUDP:
		return "RDMA_PS_UDP"
	case PSIB:
		return "RDMA_PS_IB"
	}
	return fmt.Sprintf("PortSpace(%#x)", uint16(ps))
}

// qpTypeOf is the QP type rdma_create_id gives a port space.
func qpTypeOf(ps PortSpace) qp.Type {
	if ps == PSUDP || ps == PSIPoIB {
		return qp.UD
	}
	return qp.RC
}

// connState tracks a connected ID for the posting calls.
type connState uint32

const (
	stateIdle         connState = iota // never connected
	stateConnected                     // ESTABLISHED seen
	stateDisconnected                  // disconnected, rejected or failed
)

// Route is what an ID knows of its addresses and path (struct rdma_route).
type Route struct {
	SrcAddr netip.AddrPort
	DstAddr netip.AddrPort
	// SGID and DGID are the source and destination GIDs; on RoCE, the
	// IP addresses as GIDs.
	SGID, DGID uverbs.GID
	PKey       uint16
	Paths      []PathRec
}

// PathRec is one path of a resolved route (struct ibv_sa_path_rec, from the
// kernel's struct ib_user_path_rec).
type PathRec struct {
	DGID, SGID     uverbs.GID
	DLID, SLID     uint16
	RawTraffic     bool
	FlowLabel      uint32
	Reversible     bool
	MTU            uverbs.MTU
	PKey           uint16
	HopLimit       uint8
	TrafficClass   uint8
	NumbPath       uint8
	SL             uint8
	MTUSelector    uint8
	RateSelector   uint8
	Rate           uint8
	PacketLifeTime uint8
	Preference     uint8
}

// ID is an rdma_cm identifier (struct rdma_cm_id): the analogue of a
// socket. It is bound to an address and, once the address is resolved or
// bound, to an RDMA device, whose uverbs context and protection domain it
// shares with the other IDs on that device (Verbs, PD). It may own a queue
// pair (CreateQP) with its completion queues, on which the rdma_verbs.h
// calls (PostSend, GetSendComp, …) work.
//
// An ID created on an event channel is asynchronous: operations such as
// ResolveAddr or Connect return once the kernel has started them, and
// their outcome arrives as an event on the channel. An ID created without a
// channel (a nil *EventChannel) is synchronous, as in librdmacm: it gets a
// channel of its own, and each such operation waits for its event and
// returns its outcome as an error.
//
// Its methods are safe for concurrent use. Destroy releases it; an ID
// dropped without Destroy is destroyed when the garbage collector finds
// it unreachable, with what it holds (see Destroy).
type ID struct {
	// idRes is what the ID holds in the kernel and in files, and all its
	// release needs; an ID dropped without Destroy is released by a
	// cleanup that gets the idRes alone.
	*idRes
	ps      PortSpace
	qpType  qp.Type
	context any

	mu    sync.Mutex
	pd    *uverbs.PD // the PD for QPs and memory: dev.pd unless given
	port  uint8
	route Route
	event *Event        // the last event of a synchronous ID's operation
	state atomic.Uint32 // connState, read by the posting calls
	// connectErr marks a CONNECT_RESPONSE that could not be completed:
	// the REJECTED or DISCONNECTED that follow are the kernel's cleanup.
	connectErr   bool
	disconnected bool // Disconnect succeeded
	// peerGone is when the peer's disconnect was processed; the QP is
	// flushed a grace period later (see flushPeerGone), or by Disconnect.
	peerGone time.Time
	// kaErr is why the keepalive declared the peer gone (SetKeepAlive).
	kaErr          error
	initiatorDepth uint8
	respRes        uint8
	connectData    []byte             // ai_connect of CreateEP, sent first
	qpInit         *uverbs.QPInitAttr // CreateEP's QP for GetRequest's IDs
	eventsReported int                // events reported for this ID
	eventsAcked    atomic.Int64       // acknowledged with Event.Ack
	scratch        scratch            // the posting calls' work requests
	cleanup        runtime.Cleanup
}

// idRes is what an ID holds outside the Go heap: its kernel ID on its
// channel's file, the channel of a synchronous ID, its hold on the device,
// its QP, CQs, completion channels and SRQ, and its multicast groups. It
// is the argument of the cleanup that releases a dropped ID, so nothing
// reachable from it may point to the ID: the ID would then stay reachable
// from its own cleanup and never be collected. The registry and multicast
// groups name the ID by weak pointer for that reason. Its fields are
// guarded by ID.mu.
type idRes struct {
	self      weak.Pointer[ID]
	uid       uint64
	handle    uint32
	ch        *EventChannel
	sync      bool
	destroyed atomic.Bool // set under ID.mu; read without it by the posting calls
	dev       *device
	srq       *uverbs.SRQ  // CreateSRQ's
	verbs     verbsState   // QP, CQs, completion channels
	mcs       []*multicast // joined groups
	qp        atomic.Pointer[uverbs.QP]
	kaChannel bool // counted in ch.kaIDs (SetKeepAlive)
}

// newID makes an ID on channel ch, not yet known to the kernel.
func newID(ch *EventChannel, sync bool, userContext any, ps PortSpace, qpType qp.Type) *ID {
	id := &ID{idRes: &idRes{uid: newUID(), ch: ch, sync: sync}, ps: ps, qpType: qpType, context: userContext}
	id.self = weak.Make(id)
	return id
}

// track registers the ID, whose kernel handle is set, for the events that
// name it, and arms the cleanup that destroys it if it is dropped.
func (id *ID) track() {
	registerID(id)
	id.cleanup = runtime.AddCleanup(id, (*idRes).dropped, id.idRes)
}

// dropped releases what an ID that was never destroyed held, once the
// garbage collector found it unreachable: as Destroy, but nothing else
// can reach the idRes, so no lock is taken.
func (r *idRes) dropped() {
	if !r.destroyed.Load() {
		r.release()
	}
}

func (id *ID) setState(s connState) { id.state.Store(uint32(s)) }
func (id *ID) getState() connState  { return connState(id.state.Load()) }

// registry maps the uids the kernel echoes in events back to IDs and
// multicast groups, and kernel handles to IDs. It holds IDs by weak
// pointer, so that it does not keep a dropped ID reachable; an event for
// an ID already unreachable is dropped, as one for a destroyed ID.
var registry = struct {
	mu      sync.Mutex
	next    uint64
	ids     map[uint64]weak.Pointer[ID]
	handles map[uint32]weak.Pointer[ID]
	mcs     map[uint64]*multicast
}{ids: map[uint64]weak.Pointer[ID]{}, handles: map[uint32]weak.Pointer[ID]{}, mcs: map[uint64]*multicast{}}

func newUID() uint64 {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.next++
	return registry.next
}

func registerID(id *ID) {
	registry.mu.Lock()
	registry.ids[id.uid] = id.self
	registry.handles[id.handle] = id.self
	registry.mu.Unlock()
}

func unregisterID(r *idRes) {
	registry.mu.Lock()
	if registry.ids[r.uid] == r.self {
		delete(registry.ids, r.uid)
	}
	if registry.handles[r.handle] == r.self {
		delete(registry.handles, r.handle)
	}
	registry.mu.Unlock()
}

func lookupUID(uid uint64) *ID {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.ids[uid].Value()
}

func lookupHandle(h uint32) *ID {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.handles[h].Value()
}

// CreateID creates an ID in port space ps (rdma_create_id): PSTCP for RC
// connections, PSUDP for UD. userContext is returned by Context. With a nil
// channel the ID is synchronous (see ID).
func CreateID(ch *EventChannel, userContext any, ps PortSpace) (*ID, error) {
	return createID(ch, userContext, ps, qpTypeOf(ps))
}

// CreateIDQPType is CreateID with an explicit QP type, for the PSIB port
// space, where the kernel cannot infer it.
func CreateIDQPType(ch *EventChannel, userContext any, ps PortSpace, qpType qp.Type) (*ID, error) {
	return createID(ch, userContext, ps, qpType)
}

// newChannel opens the channel of a synchronous ID; tests replace it.
var newChannel = NewEventChannel

func createID(ch *EventChannel, userContext any, ps PortSpace, qpType qp.Type) (*ID, error) {
	if ch != nil {
		if err := ch.check(); err != nil {
			return nil, err
		}
	}
	id := newID(ch, ch == nil, userContext, ps, qpType)
	if ch == nil {
		var err error
		if id.ch, err = newChannel(); err != nil {
			return nil, err
		}
	}
	resp := new(abi.RdmaUcmCreateIdResp)
	c := newCmd[abi.RdmaUcmCreateId](abi.RDMA_USER_CM_CMD_CREATE_ID, int(unsafe.Sizeof(*resp)))
	c.body.Uid = id.uid
	c.body.Response = ptr(resp)
	c.body.Ps = uint16(ps)
	c.body.Qp_type = uint8(qpType)
	if err := exec(id.ch.f, c, unsafe.Pointer(resp)); err != nil {
		if id.sync {
			id.ch.Close()
		}
		return nil, wrapErr("create id", err)
	}
	id.handle = resp.Id
	id.track()
	return id, nil
}

// file returns the ID's channel file for a command, or ErrClosed. The
// caller holds id.mu.
func (id *ID) file() (ucmaFile, error) {
	if id.destroyed.Load() {
		return nil, ErrClosed
	}
	return id.ch.f, nil
}

// destroyKernID destroys the kernel's ID with handle h on f and returns how
// many events the kernel reported for it.
func destroyKernID(f ucmaFile, h uint32) (int, error) {
	resp := new(abi.RdmaUcmDestroyIdResp)
	c := newCmd[abi.RdmaUcmDestroyId](abi.RDMA_USER_CM_CMD_DESTROY_ID, int(unsafe.Sizeof(*resp)))
	c.body.Response = ptr(resp)
	c.body.Id = h
	if err := exec(f, c, unsafe.Pointer(resp)); err != nil {
		return 0, err
	}
	return int(resp.Events_reported), nil
}

// Destroy destroys the ID (rdma_destroy_id) and returns the number of
// events the kernel reported for it. It also destroys the QP, CQs and
// completion channels CreateQP made and the SRQ CreateSRQ made, which
// librdmacm leaves to rdma_destroy_qp. The device's context and shared PD
// stay open (see Verbs).
//
// Unlike rdma_destroy_id, Destroy does not wait for the ID's events to be
// acknowledged, so it cannot hang on an event a program never acked: Go's
// garbage collector keeps an event valid for as long as the program holds
// it. Destroy waits only for an event of the ID that another goroutine's
// GetEvent is processing. Events for the ID still queued in the kernel are
// discarded. Destroying twice is not an error; every other method of a
// destroyed ID returns ErrClosed.
//
// An ID dropped without Destroy is destroyed, as by Destroy, once the
// garbage collector finds it unreachable, whatever its state: a connected
// one disconnects, a listening one stops listening, and events still
// queued for it are dropped. Destroy stays the way to release an ID at a
// known time.
func (id *ID) Destroy() (int, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return 0, nil
	}
	if q := id.qp.Swap(nil); q != nil {
		id.waitPosts()
		q.Close()
	}
	n, err := id.release()
	if err != nil {
		return 0, err
	}
	id.cleanup.Stop()
	if id.event != nil {
		id.event.Ack()
		id.event = nil
	}
	return n, nil
}

// release destroys the QP, CQs, completion channels and SRQ, then the
// kernel's ID, and lets go of the device and a synchronous ID's channel.
// It is Destroy's work for an ID nothing else uses: the caller holds
// ID.mu, or is the cleanup of an unreachable ID.
func (r *idRes) release() (int, error) {
	r.destroyVerbs()
	if r.srq != nil {
		r.srq.Close()
		r.srq = nil
	}
	n, err := destroyKernID(r.ch.f, r.handle)
	if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, unix.ENOENT) {
		return 0, wrapErr("destroy id", err)
	}
	r.destroyed.Store(true)
	if r.kaChannel {
		r.ch.kaIDs.Add(-1)
		r.kaChannel = false
	}
	unregisterID(r)
	for _, mc := range r.mcs {
		unregisterMulticast(mc)
	}
	r.mcs = nil
	if r.dev != nil {
		r.dev.put()
		r.dev = nil
	}
	if r.sync {
		r.ch.Close()
	}
	return n, nil
}

// Close destroys the ID; it is Destroy for io.Closer.
func (id *ID) Close() error {
	_, err := id.Destroy()
	return err
}

// Channel returns the event channel the ID reports on; a synchronous ID's
// own one.
func (id *ID) Channel() *EventChannel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ch
}

// Context returns the value given to CreateID (for an ID from a connection
// request, the listening ID's).
func (id *ID) Context() any { return id.context }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QPType returns the type of QP the ID works with.
func (id *ID) QPType() qp.Type { return id.qpType }

// PortNum returns the device port the ID is bound to (0 before it is).
func (id *ID) PortNum() uint8 {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.port
}

// Verbs returns the uverbs context of the device the ID is bound to, or
// nil before it is and after Destroy. The context is shared by all IDs on
// the device and, as librdmacm's, kept open for the life of the process:
// PDs, CQs and memory regions a program makes on it stay valid after the
// last ID on the device is gone, and serve the device's next IDs. Do not
// close it. Only a device the kernel removes (DEVICE_REMOVAL) is closed,
// with the last ID on it.
func (id *ID) Verbs() *uverbs.Context {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil {
		return nil
	}
	return id.dev.ctx
}

// PD returns the protection domain the ID's QP and memory use: the device's
// shared one, or the one given to CreateEP or CreateQP. It is nil before the
// ID is bound to a device and after Destroy, as Verbs is. The shared one is
// kept open with the device's context (see Verbs): do not close it.
func (id *ID) PD() *uverbs.PD {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return nil
	}
	return id.pd
}

// Route returns the ID's addresses and path as last reported by the kernel.
func (id *ID) Route() Route {
	id.mu.Lock()
	defer id.mu.Unlock()
	r := id.route
	r.Paths = append([]PathRec(nil), r.Paths...)
	return r
}

// SrcAddr returns the local address (rdma_get_local_addr with
// rdma_get_src_port).
func (id *ID) SrcAddr() netip.AddrPort { return id.Route().SrcAddr }

// DstAddr returns the peer's address (rdma_get_peer_addr with
// rdma_get_dst_port).
func (id *ID) DstAddr() netip.AddrPort { return id.Route().DstAddr }

// Event returns the event that ended the last operation of a synchronous
// ID (its id->event): for an ID from GetRequest, the CONNECT_REQUEST with
// the peer's private data; after Accept or Connect, the ESTABLISHED event.
func (id *ID) Event() *Event {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.event
}

// EventsReported returns how many events the ID has received;
// EventsAcked how many of them were acknowledged.
func (id *ID) EventsReported() int {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.eventsReported
}

// EventsAcked returns how many of the ID's events were acknowledged.
func (id *ID) EventsAcked() int { return int(id.eventsAcked.Load()) }

// queryRoute asks the kernel for the ID's addresses, route and device
// (RDMA_USER_CM_CMD_QUERY_ROUTE) and binds the ID to the device the first
// time one is named. The caller holds id.mu.
func (id *ID) queryRoute() error {
	f, err := id.file()
	if err != nil {
		return err
	}
	resp := new(abi.RdmaUcmQueryRouteResp)
	// Kernels that do not know ibdev_index leave it as it is.
	resp.Ibdev_index = ^uint32(0)
	c := newCmd[abi.RdmaUcmQuery](abi.RDMA_USER_CM_CMD_QUERY_ROUTE, int(unsafe.Sizeof(*resp)))
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	if err := exec(f, c, unsafe.Pointer(resp)); err != nil {
		return wrapErr("query route", err)
	}
	r := &id.route
	r.SrcAddr = sockaddr(bytesOf(&resp.Src_addr))
	r.DstAddr = sockaddr(bytesOf(&resp.Dst_addr))
	r.SGID = resp.Ib_route[0].Sgid
	r.DGID = resp.Ib_route[0].Dgid
	r.PKey = binary.BigEndian.Uint16(bytesOf(&resp.Ib_route[0].Pkey))
	r.Paths = r.Paths[:0]
	for i := 0; i < int(resp.Num_paths) && i < len(resp.Ib_route); i++ {
		r.Paths = append(r.Paths, pathRec(&resp.Ib_route[i]))
	}
	if id.dev == nil && resp.Node_guid != 0 {
		var guid uverbs.GUID
		binary.NativeEndian.PutUint64(guid[:], resp.Node_guid)
		d, err := getDevice(guid, resp.Ibdev_index)
		if err != nil {
			return &Error{Op: "query route", Err: fmt.Errorf("opening the device with node GUID %v: %w", guid, err)}
		}
		id.dev = d
		if id.pd == nil {
			id.pd = d.pd
		}
		id.port = resp.Port_num
	}
	return nil
}

func pathRec(p *abi.IbUserPathRec) PathRec {
	be := binary.BigEndian
	return PathRec{
		DGID: p.Dgid, SGID: p.Sgid,
		DLID:           be.Uint16(bytesOf(&p.Dlid)),
		SLID:           be.Uint16(bytesOf(&p.Slid)),
		RawTraffic:     p.Raw_traffic != 0,
		FlowLabel:      be.Uint32(bytesOf(&p.Flow_label)),
		Reversible:     p.Reversible != 0,
		MTU:            uverbs.MTU(p.Mtu),
		PKey:           be.Uint16(bytesOf(&p.Pkey)),
		HopLimit:       p.Hop_limit,
		TrafficClass:   p.Traffic_class,
		NumbPath:       p.Numb_path,
		SL:             p.Sl,
		MTUSelector:    p.Mtu_selector,
		RateSelector:   p.Rate_selector,
		Rate:           p.Rate,
		PacketLifeTime: p.Packet_life_time,
		Preference:     p.Preference,
	}
}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). A
// specific address also binds it to the RDMA device that owns it; the
// unspecified address (0.0.0.0 or ::) listens on all devices. Port 0
// picks a free port (SrcAddr tells which).
func (id *ID) BindAddr(addr netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmBind](abi.RDMA_USER_CM_CMD_BIND, 0)
	c.body.Id = id.handle
	n, err := putSockaddr(c.body.Addr.Anon0[:], addr)
	if err != nil {
		return &Error{Op: "bind addr", Err: err}
	}
	c.body.Addr_size = uint16(n)
	if err := exec(f, c, nil); err != nil {
		return wrapErr("bind addr", err)
	}
	return id.queryRoute()
}

// timeoutMS converts an operation timeout to the kernel's milliseconds; 0
// means librdmacm's usual 2 s.
func timeoutMS(d time.Duration) uint32 {
	if d <= 0 {
		return 2000
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return uint32(ms)
}

// ResolveAddr resolves dst, and src if given (the zero AddrPort lets the
// kernel pick the source by route), to RDMA addresses (rdma_resolve_addr),
// which binds the ID to a device. The kernel gives up after timeout (0: 2 s)
// with ADDR_ERROR, status -ETIMEDOUT. A synchronous ID waits for the
// outcome; ctx ends the wait early (the kernel's resolution still runs; the
// ID should then be destroyed).
func (id *ID) ResolveAddr(ctx context.Context, src, dst netip.AddrPort, timeout time.Duration) error {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return err
	}
	c := newCmd[abi.RdmaUcmResolveAddr](abi.RDMA_USER_CM_CMD_RESOLVE_ADDR, 0)
	c.body.Id = id.handle
	c.body.Timeout_ms = timeoutMS(timeout)
	if src.Addr().IsValid() {
		n, err := putSockaddr(c.body.Src_addr.Anon0[:], src)
		if err != nil {
			id.mu.Unlock()
			return &Error{Op: "resolve addr", Err: err}
		}
		c.body.Src_size = uint16(n)
	}
	n, err := putSockaddr(c.body.Dst_addr.Anon0[:], dst)
	if err != nil {
		id.mu.Unlock()
		return &Error{Op: "resolve addr", Err: err}
	}
	c.body.Dst_size = uint16(n)
	err = exec(f, c, nil)
	if err == nil {
		id.route.DstAddr = dst
	}
	id.mu.Unlock()
	if err != nil {
		return wrapErr("resolve addr", err)
	}
	return id.complete(ctx, "resolve addr", EventAddrResolved)
}

// ResolveRoute resolves the route to the address ResolveAddr resolved
// (rdma_resolve_route), giving up after timeout (0: 2 s). A synchronous ID
// waits for the outcome, or until ctx is done.
func (id *ID) ResolveRoute(ctx context.Context, timeout time.Duration) error {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return err
	}
	c := newCmd[abi.RdmaUcmResolveRoute](abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE, 0)
	c.body.Id = id.handle
	c.body.Timeout_ms = timeoutMS(timeout)
	err = exec(f, c, nil)
	id.mu.Unlock()
	if err != nil {
		return wrapErr("resolve route", err)
	}
	return id.complete(ctx, "resolve route", EventRouteResolved)
}

// Listen listens for connection requests (rdma_listen) on the bound
// address; backlog ≤ 0 means the kernel's maximum. Requests arrive as
// CONNECT_REQUEST events, or through GetRequest on a synchronous ID.
func (id *ID) Listen(backlog int) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmListen](abi.RDMA_USER_CM_CMD_LISTEN, 0)
	c.body.Id = id.handle
	if backlog > 0 {
		c.body.Backlog = uint32(min(backlog, 1<<31-1))
	}
	if err := exec(f, c, nil); err != nil {
		return wrapErr("listen", err)
	}
	return id.queryRoute()
}

// complete waits, on a synchronous ID, for the event that ends op and
// returns its outcome (librdmacm's ucma_complete); asynchronous IDs return
// at once.
func (id *ID) complete(ctx context.Context, op string, want EventType) error {
	id.mu.Lock()
	if !id.sync {
		id.mu.Unlock()
		return nil
	}
	ch := id.ch
	if id.event != nil {
		id.event.Ack()
		id.event = nil
	}
	id.mu.Unlock()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		var ce *Error
		if errors.As(err, &ce) {
			return err
		}
		return &Error{Op: op, Err: err}
	}
	id.mu.Lock()
	id.event = ev
	id.mu.Unlock()
	if ev.ID != id && ev.ListenID != id {
		return &Error{Op: op, Event: ev.Type, Status: ev.Status, HasEvent: true,
			Err: fmt.Errorf("event of another ID on a synchronous ID's channel: %w", unix.EPROTO)}
	}
	return eventErr(op, ev, want)
}

// validParam checks a connection parameter as librdmacm's ucma_valid_param.
// The caller holds id.mu.
func (id *ID) validParam(op string, p *ConnParam) error {
	if id.ps != PSTCP {
		return nil
	}
	if id.qp.Load() == nil && p == nil {
		return errf(op, unix.EINVAL, "an ID without a QP needs a ConnParam with its QP number")
	}
	if p == nil {
		return nil
	}
	if id.dev == nil {
		return errf(op, unix.EINVAL, "the ID is not bound to a device (resolve its address and route first)")
	}
	if p.ResponderResources != MaxRespRes && p.ResponderResources > id.dev.maxRespRes {
		return errf(op, unix.EINVAL, "responder resources %d exceed the device's %d", p.ResponderResources, id.dev.maxRespRes)
	}
	if p.InitiatorDepth != MaxInitDepth && p.InitiatorDepth > id.dev.maxInitDepth {
		return errf(op, unix.EINVAL, "initiator depth %d exceeds the device's %d", p.InitiatorDepth, id.dev.maxInitDepth)
	}
	return nil
}

// connParamToKern fills the kernel's connection parameter as librdmacm's
// ucma_copy_conn_param_to_kern. The caller holds id.mu.
func (id *ID) connParamToKern(op string, dst *abi.RdmaUcmConnParam, src *ConnParam, qpNum uint32, srq bool) error {
	dst.Qp_num = qpNum
	if srq {
		dst.Srq = 1
	}
	dst.Responder_resources = id.respRes
	dst.Initiator_depth = id.initiatorDepth
	dst.Valid = 1
	n := copy(dst.Private_data[:], id.connectData)
	if src != nil {
		dst.Flow_control = src.FlowControl
		dst.Retry_count = src.RetryCount
		dst.Rnr_retry_count = src.RNRRetryCount
		// The kernel's buffer has 256 bytes but its length is one byte
		// (as librdmacm's private_data_len): 256 would go as 0.
		if n+len(src.PrivateData) > math.MaxUint8 {
			return errf(op, unix.EINVAL, "%d bytes of private data, more than %d", n+len(src.PrivateData), math.MaxUint8)
		}
		n += copy(dst.Private_data[n:], src.PrivateData)
	} else {
		dst.Retry_count = 7
		dst.Rnr_retry_count = 7
	}
	dst.Private_data_len = uint8(n)
	return nil
}

// qpNumOf returns the QP number and SRQ flag Connect and Accept announce.
func (id *ID) qpNumOf(p *ConnParam) (uint32, bool) {
	if q := id.qp.Load(); q != nil {
		return q.Num(), id.verbs.hasSRQ
	}
	if p != nil {
		return p.QPNum, p.SRQ
	}
	return 0, false
}

// Connect connects to the peer whose address and route were resolved
// (rdma_connect): an RC connection, or on a UD ID a service ID resolution
// that returns the peer's QP number and Q_Key in the ESTABLISHED event. A
// nil param means DefaultConnParam. With a QP on the ID, the QP is moved to
// RTS when the peer accepts; without one, the peer's acceptance is a
// CONNECT_RESPONSE event, after which the program moves its own QP (see
// InitQPAttr) and calls Establish. A synchronous ID waits until the
// connection is established (or, without a QP, accepted): a rejection,
// including the peer's kernel's when nobody listens on the port, gives an
// error wrapping unix.ECONNREFUSED, an unreachable peer unix.ETIMEDOUT or
// the like (see Error).
func (id *ID) Connect(ctx context.Context, param *ConnParam) error {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return err
	}
	if err := id.validParam("connect", param); err != nil {
		id.mu.Unlock()
		return err
	}
	if id.dev == nil {
		id.mu.Unlock()
		return errf("connect", unix.EINVAL, "the ID is not bound to a device (resolve its address and route first)")
	}
	if param != nil && param.InitiatorDepth != MaxInitDepth {
		id.initiatorDepth = param.InitiatorDepth
	} else {
		id.initiatorDepth = id.dev.maxInitDepth
	}
	if param != nil && param.ResponderResources != MaxRespRes {
		id.respRes = param.ResponderResources
	} else {
		id.respRes = id.dev.maxRespRes
	}
	c := newCmd[abi.RdmaUcmConnect](abi.RDMA_USER_CM_CMD_CONNECT, 0)
	c.body.Id = id.handle
	n, srq := id.qpNumOf(param)
	if err := id.connParamToKern("connect", &c.body.Conn_param, param, n, srq); err != nil {
		id.mu.Unlock()
		return err
	}
	err = exec(f, c, nil)
	if err == nil {
		id.connectData = nil
		id.connectErr = false
	}
	// Without a QP on an RC ID the connection stops at CONNECT_RESPONSE,
	// for the program to move its QP and call Establish.
	want := EventEstablished
	if id.qp.Load() == nil && id.qpType != qp.UD {
		want = EventConnectResponse
	}
	id.mu.Unlock()
	if err != nil {
		return wrapErr("connect", err)
	}
	return id.complete(ctx, "connect", want)
}

// Accept accepts the connection request that created the ID (rdma_accept).
// With a QP on an RC ID, the QP is moved to RTS first. A nil param keeps
// the depths the peer asked for, within the device's limits. A synchronous
// RC ID waits until the connection is established; UD IDs do not wait.
func (id *ID) Accept(ctx context.Context, param *ConnParam) error {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return err
	}
	if err := id.validParam("accept", param); err != nil {
		id.mu.Unlock()
		return err
	}
	if id.dev == nil {
		id.mu.Unlock()
		return errf("accept", unix.EINVAL, "the ID is not bound to a device (not from a connection request?)")
	}
	if param == nil || param.InitiatorDepth == MaxInitDepth {
		id.initiatorDepth = min(id.initiatorDepth, id.dev.maxInitDepth)
	} else {
		id.initiatorDepth = param.InitiatorDepth
	}
	if param == nil || param.ResponderResources == MaxRespRes {
		id.respRes = min(id.respRes, id.dev.maxRespRes)
	} else {
		id.respRes = param.ResponderResources
	}
	if id.qpType != qp.UD {
		if err := id.modifyQPRTR(id.respRes); err != nil {
			id.mu.Unlock()
			return wrapErr("accept", err)
		}
		if err := id.modifyQPRTS(id.initiatorDepth); err != nil {
			id.mu.Unlock()
			return wrapErr("accept", err)
		}
	}
	c := newCmd[abi.RdmaUcmAccept](abi.RDMA_USER_CM_CMD_ACCEPT, 0)
	c.body.Id = id.handle
	c.body.Uid = id.uid
	n, srq := id.qpNumOf(param)
	if err := id.connParamToKern("accept", &c.body.Conn_param, param, n, srq); err != nil {
		id.mu.Unlock()
		return err
	}
	if err := exec(f, c, nil); err != nil {
		id.modifyQPErr()
		id.mu.Unlock()
		return wrapErr("accept", err)
	}
	ud := id.qpType == qp.UD
	id.mu.Unlock()
	if ud {
		return nil
	}
	return id.complete(ctx, "accept", EventEstablished)
}

// Reject rejects the connection request that created the ID (rdma_reject),
// sending privateData (at most MaxRejectPrivateData bytes on IB and RoCE)
// with the reject. The peer's REJECTED event carries it, with status 28
// (IB_CM_REJ_CONSUMER_DEFINED). The ID still has to be destroyed.
func (id *ID) Reject(privateData []byte) error {
	return id.reject(privateData, 0)
}

// RejectECE rejects with reason 35, "vendor option not supported"
// (rdma_reject_ece), for a peer whose enhanced connection establishment
// options are refused.
func (id *ID) RejectECE(privateData []byte) error {
	return id.reject(privateData, 35)
}

func (id *ID) reject(privateData []byte, reason uint8) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmReject](abi.RDMA_USER_CM_CMD_REJECT, 0)
	c.body.Id = id.handle
	c.body.Reason = reason
	if len(privateData) > math.MaxUint8 {
		return errf("reject", unix.EINVAL, "%d bytes of private data, more than %d (the length is one byte)", len(privateData), math.MaxUint8)
	}
	c.body.Private_data_len = uint8(copy(c.body.Private_data[:], privateData))
	return wrapErr("reject", exec(f, c, nil))
}

// Establish completes a connection on an ID without a QP (rdma_establish):
// after the CONNECT_RESPONSE event, once the program has moved its own QP
// to RTS, it tells the peer the connection is up.
func (id *ID) Establish() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if _, err := id.file(); err != nil {
		return err
	}
	if id.qp.Load() != nil {
		return errf("establish", unix.EINVAL, "the ID has a QP; its CONNECT_RESPONSE is handled by GetEvent")
	}
	if err := id.establish(); err != nil {
		return err
	}
	id.setState(stateConnected)
	return nil
}

// establish is librdmacm's ucma_process_conn_resp: the QP, if any, to RTR
// and RTS with the kernel's attributes, then the ready-to-use message (an
// ACCEPT without parameters). The caller holds id.mu.
func (id *ID) establish() error {
	if err := id.modifyQPRTR(MaxRespRes); err != nil {
		id.modifyQPErr()
		return err
	}
	if err := id.modifyQPRTS(MaxInitDepth); err != nil {
		id.modifyQPErr()
		return err
	}
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmAccept](abi.RDMA_USER_CM_CMD_ACCEPT, 0)
	c.body.Id = id.handle
	if err := exec(f, c, nil); err != nil {
		id.modifyQPErr()
		return wrapErr("establish", err)
	}
	return nil
}

// Notify reports an asynchronous QP event to the rdma_cm (rdma_notify),
// such as uverbs.EventCommEst when a message arrives on a QP before its
// ESTABLISHED event.
func (id *ID) Notify(event uverbs.EventType) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmNotify](abi.RDMA_USER_CM_CMD_NOTIFY, 0)
	c.body.Id = id.handle
	c.body.Event = uint32(event)
	return wrapErr("notify", exec(f, c, nil))
}

// Disconnect disconnects (rdma_disconnect): it moves the ID's QP to the
// error state, which flushes its outstanding work requests, and tells the
// peer. A synchronous ID waits for the DISCONNECTED event, which comes when
// the peer disconnects too or stops answering, unless the peer's
// DISCONNECTED came first (its DREP is then sent, and nothing more comes).
// Disconnecting again does nothing, as does disconnecting after the
// keepalive (SetKeepAlive) reported the peer gone: the keepalive
// disconnected already.
func (id *ID) Disconnect(ctx context.Context) error {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return err
	}
	if id.disconnected {
		id.mu.Unlock()
		return nil
	}
	if id.dev == nil {
		id.mu.Unlock()
		return errf("disconnect", unix.EINVAL, "the ID is not bound to a device")
	}
	// ucma_shutdown: IB and RoCE flush the QP, iWARP drains it.
	if id.dev.transport() == uverbs.TransportIWARP {
		err = id.modifyQPState(qp.StateSQD)
	} else {
		err = id.modifyQPErr()
	}
	if err != nil {
		id.mu.Unlock()
		return wrapErr("disconnect", err)
	}
	c := newCmd[abi.RdmaUcmDisconnect](abi.RDMA_USER_CM_CMD_DISCONNECT, 0)
	c.body.Id = id.handle
	err = exec(f, c, nil)
	id.setState(stateDisconnected)
	id.disconnected = err == nil
	peerDead, peerLeft := id.kaErr != nil, !id.peerGone.IsZero()
	id.mu.Unlock()
	if err != nil {
		return wrapErr("disconnect", err)
	}
	if peerDead || peerLeft {
		// The keepalive reported the peer gone: the DREQ will not be
		// answered, and the kernel's DISCONNECTED comes only when its
		// resends give up. Or the peer disconnected first, and its
		// DISCONNECTED was processed already: the command sent the
		// DREP, and no second DISCONNECTED follows (librdmacm's
		// rdma_disconnect then waits for TIMEWAIT_EXIT, the end of the
		// CM's time-wait, which tells the caller nothing). Nothing is
		// waiting for either.
		return nil
	}
	return id.complete(ctx, "disconnect", EventDisconnected)
}

// InitQPAttr asks the kernel for the attributes that move a QP of this ID
// to state (rdma_init_qp_attr), for a QP the program manages itself.
func (id *ID) InitQPAttr(state qp.State) (qp.Attr, qp.AttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.initQPAttr(state)
}

func (id *ID) initQPAttr(state qp.State) (qp.Attr, qp.AttrMask, error) {
	f, err := id.file()
	if err != nil {
		return qp.Attr{}, 0, err
	}
	resp := new(abi.IbUverbsQpAttr)
	c := newCmd[abi.RdmaUcmInitQpAttr](abi.RDMA_USER_CM_CMD_INIT_QP_ATTR, int(unsafe.Sizeof(*resp)))
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	c.body.Qp_state = uint32(state)
	if err := exec(f, c, unsafe.Pointer(resp)); err != nil {
		return qp.Attr{}, 0, wrapErr(fmt.Sprintf("init QP attr %v", state), err)
	}
	a, mask := qp.DecodeUverbsAttr(resp)
	return a, mask &^ qp.MaskReserved, nil
}

// Migrate moves the ID to another event channel (rdma_migrate_id); a nil
// channel makes it synchronous with a channel of its own. Events not yet
// read move with it.
func (id *ID) Migrate(ch *EventChannel) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.migrate(ch)
}

func (id *ID) migrate(ch *EventChannel) error {
	old, err := id.file()
	if err != nil {
		return err
	}
	if ch != nil {
		if err := ch.check(); err != nil {
			return err
		}
	}
	if id.sync && ch == nil {
		return errf("migrate id", unix.EINVAL, "the ID is already synchronous")
	}
	sync := ch == nil
	if sync {
		if ch, err = newChannel(); err != nil {
			return err
		}
	}
	fd := old.fd()
	resp := new(abi.RdmaUcmMigrateResp)
	c := newCmd[abi.RdmaUcmMigrateId](abi.RDMA_USER_CM_CMD_MIGRATE_ID, int(unsafe.Sizeof(*resp)))
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	c.body.Fd = uint32(fd)
	if err := exec(ch.f, c, unsafe.Pointer(resp)); err != nil {
		if sync {
			ch.Close()
		}
		return wrapErr("migrate id", err)
	}
	if id.sync {
		if id.event != nil {
			id.event.Ack()
			id.event = nil
		}
		id.ch.Close()
	}
	id.sync = sync
	id.ch = ch
	return nil
}

// Options of SetOption (RDMA_OPTION_*).
const (
	OptionLevelID = abi.RDMA_OPTION_ID // level of the ID options below
	OptionLevelIB = abi.RDMA_OPTION_IB

	OptionIDTOS        = abi.RDMA_OPTION_ID_TOS         // u8: type of service
	OptionIDReuseAddr  = abi.RDMA_OPTION_ID_REUSEADDR   // int: reuse the port while in timewait
	OptionIDAFOnly     = abi.RDMA_OPTION_ID_AFONLY      // int: an IPv6 bind excludes IPv4
	OptionIDAckTimeout = abi.RDMA_OPTION_ID_ACK_TIMEOUT // u8: the QP's local ACK timeout
	OptionIBPath       = abi.RDMA_OPTION_IB_PATH        // struct ibv_path_data[]: set the route
)

// SetOption sets an option (rdma_set_option) with the value's bytes as the
// kernel reads them; the typed setters below are easier.
func (id *ID) SetOption(level, name uint32, value []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	f, err := id.file()
	if err != nil {
		return err
	}
	val := make([]byte, max(len(value), 1)) // heap memory, pinned below
	copy(val, value)
	c := newCmd[abi.RdmaUcmSetOption](abi.RDMA_USER_CM_CMD_SET_OPTION, 0)
	c.body.Optval = ptr(&val[0])
	c.body.Id = id.handle
	c.body.Level = level
	c.body.Optname = name
	c.body.Optlen = uint32(len(value))
	return wrapErr("set option", exec(f, c, unsafe.Pointer(&val[0])))
}

func int32Bytes(v bool) []byte {
	b := make([]byte, 4)
	if v {
		binary.NativeEndian.PutUint32(b, 1)
	}
	return b
}

// SetTOS sets the type of service of the ID's traffic (RDMA_OPTION_ID_TOS).
func (id *ID) SetTOS(tos uint8) error { return id.SetOption(OptionLevelID, OptionIDTOS, []byte{tos}) }

// SetReuseAddr lets the ID bind a port still in timewait
// (RDMA_OPTION_ID_REUSEADDR).
func (id *ID) SetReuseAddr(on bool) error {
	return id.SetOption(OptionLevelID, OptionIDReuseAddr, int32Bytes(on))
}

// SetAFOnly makes an IPv6 bind exclude IPv4 (RDMA_OPTION_ID_AFONLY).
func (id *ID) SetAFOnly(on bool) error {
	return id.SetOption(OptionLevelID, OptionIDAFOnly, int32Bytes(on))
}

// SetAckTimeout sets the local ACK timeout of the ID's QP, 4.096 µs ×
// 2^timeout (RDMA_OPTION_ID_ACK_TIMEOUT).
func (id *ID) SetAckTimeout(timeout uint8) error {
	return id.SetOption(OptionLevelID, OptionIDAckTimeout, []byte{timeout})
}
