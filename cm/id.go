package cm

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space): which
// transport an ID's port numbers belong to.
type PortSpace uint16

// Port spaces.
const (
	PSIPoIB PortSpace = 0x002 // RDMA_PS_IPOIB
	PSTCP   PortSpace = 0x106 // RDMA_PS_TCP: reliable connected (RC) QPs
	PSUDP   PortSpace = 0x111 // RDMA_PS_UDP: unreliable datagram (UD) QPs
	PSIB    PortSpace = 0x13f // RDMA_PS_IB
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
// Its methods are safe for concurrent use. Close releases it; an ID
// dropped without Close is destroyed when the garbage collector finds
// it unreachable, with what it holds (see Close).
type ID struct {
	// idRes is what the ID holds in the kernel and in files, and all its
	// release needs; an ID dropped without Close is released by a
	// cleanup that gets the idRes alone.
	*idRes
	ps       PortSpace
	qpType   qp.Type
	userData any

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
	// peerTimer is that flush, stopped when the QP goes first.
	peerGone  time.Time
	peerTimer *time.Timer
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
	id := &ID{idRes: &idRes{uid: newUID(), ch: ch, sync: sync}, ps: ps, qpType: qpType, userData: userContext}
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
// garbage collector found it unreachable: as Close, but nothing else
// can reach the idRes, so no lock is taken.
func (r *idRes) dropped() {
	if !r.destroyed.Load() {
		r.release()
	}
}

func (id *ID) setState(s connState) { id.state.Store(uint32(s)) }
func (id *ID) getState() connState  { return connState(id.state.Load()) }

// CreateID creates an ID in port space ps (rdma_create_id): PSTCP for RC
// connections, PSUDP for UD. userData is returned by UserData. With a nil
// channel the ID is synchronous (see ID). The port space implies the QP
// type; WithQPType sets another, as the PSIB port space needs.
func CreateID(ch *EventChannel, userData any, ps PortSpace, opts ...IDOption) (*ID, error) {
	o := idOptions{qpType: qpTypeOf(ps)}
	for _, opt := range opts {
		opt(&o)
	}
	return createID(ch, userData, ps, o.qpType)
}

// IDOption is an option of CreateID.
type IDOption func(*idOptions)

type idOptions struct{ qpType qp.Type }

// WithQPType gives the ID QPs of type t, where its port space does not
// say: PSIB carries RC and UD alike (librdmacm's rdma_create_id2 with a
// QP type).
func WithQPType(t qp.Type) IDOption { return func(o *idOptions) { o.qpType = t } }

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
	c := newCall[abi.RdmaUcmCreateId, abi.RdmaUcmCreateIdResp](abi.RDMA_USER_CM_CMD_CREATE_ID)
	resp := &c.resp
	c.body.Uid = id.uid
	c.body.Response = ptr(resp)
	c.body.Ps = uint16(ps)
	c.body.Qp_type = uint8(qpType)
	if err := exec(id.ch.f, &c.ucmaCmd); err != nil {
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

// lockFile locks id.mu and returns the ID's file, or ErrClosed with id.mu
// unlocked again for a destroyed ID.
func (id *ID) lockFile() (ucmaFile, error) {
	id.mu.Lock()
	f, err := id.file()
	if err != nil {
		id.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// withFile runs do with id.mu held and the ID's file, as most commands on
// an ID need, or returns ErrClosed for a destroyed ID.
func (id *ID) withFile(do func(f ucmaFile) error) error {
	f, err := id.lockFile()
	if err != nil {
		return err
	}
	defer id.mu.Unlock()
	return do(f)
}

// locked returns get's reading of the ID's fields under id.mu: the body
// of the ID's getters. get takes the ID rather than capturing it, so that
// it is a static function: a capturing one would be allocated in callers
// in other packages, which inline the getter, and the polling loops call
// SendCQ and RecvCQ.
func locked[T any](id *ID, get func(*ID) T) T {
	id.mu.Lock()
	defer id.mu.Unlock()
	return get(id)
}

// destroyKernID destroys the kernel's ID with handle h on f and returns how
// many events the kernel reported for it.
func destroyKernID(f ucmaFile, h uint32) (int, error) {
	c := newCall[abi.RdmaUcmDestroyId, abi.RdmaUcmDestroyIdResp](abi.RDMA_USER_CM_CMD_DESTROY_ID)
	resp := &c.resp
	c.body.Response = ptr(resp)
	c.body.Id = h
	if err := exec(f, &c.ucmaCmd); err != nil {
		return 0, err
	}
	return int(resp.Events_reported), nil
}

// destroy is Close, returning the number of events the kernel reported
// for the ID.
func (id *ID) destroy() (int, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return 0, nil
	}
	id.stopPeerTimer()
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
// It is Close's work for an ID nothing else uses: the caller holds
// ID.mu, or is the cleanup of an unreachable ID.
func (r *idRes) release() (int, error) {
	if r.srq != nil && r.verbs.ownRecv && r.verbs.hasXRCSRQ {
		// An XRC SRQ holds the receive CQ made for it: it goes first.
		r.srq.Close()
		r.srq = nil
	}
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

// Close destroys the ID (rdma_destroy_id, and rdma_destroy_ep for an ID
// from CreateEP): it also destroys the QP, CQs and
// completion channels CreateQP made and the SRQ CreateSRQ made, which
// librdmacm leaves to rdma_destroy_qp. The device's context and shared PD
// stay open (see Verbs).
//
// Unlike rdma_destroy_id, Close does not wait for the ID's events to be
// acknowledged, so it cannot hang on an event a program never acked: Go's
// garbage collector keeps an event valid for as long as the program holds
// it. Close waits only for an event of the ID that another goroutine's
// GetEvent is processing. Events for the ID still queued in the kernel are
// discarded. Closing twice is not an error; every other method of a
// destroyed ID returns ErrClosed.
//
// An ID dropped without Close is destroyed, as by Close, once the
// garbage collector finds it unreachable, whatever its state: a connected
// one disconnects, a listening one stops listening, and events still
// queued for it are dropped. Close stays the way to release an ID at a
// known time. Neither the channel nor the kernel's events keep an ID
// reachable: a server that accepts a connection and means to find it
// again only in its DISCONNECTED event must hold it meanwhile (a map of
// live connections, say), or the collector may end the connection first,
// as it did to rdmago cmtime's server past a few hundred connections.
func (id *ID) Close() error {
	_, err := id.destroy()
	return err
}

// Channel returns the event channel the ID reports on; a synchronous ID's
// own one.
func (id *ID) Channel() *EventChannel {
	return locked(id, func(id *ID) *EventChannel { return id.ch })
}

// UserData returns the program's value for the ID: the one given to
// CreateID (for an ID from a connection request, the listening ID's, as
// librdmacm copies its context), or the last SetUserData.
func (id *ID) UserData() any {
	return locked(id, func(id *ID) any { return id.userData })
}

// SetUserData replaces the program's value for the ID (rdma_cm_id's
// context, which C programs assign): an accepted ID can carry its
// connection's state from then on.
func (id *ID) SetUserData(v any) {
	id.mu.Lock()
	id.userData = v
	id.mu.Unlock()
}

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QPType returns the type of QP the ID works with.
func (id *ID) QPType() qp.Type { return id.qpType }

// PortNum returns the device port the ID is bound to (0 before it is).
func (id *ID) PortNum() uint8 {
	return locked(id, func(id *ID) uint8 { return id.port })
}

// Verbs returns the uverbs context of the device the ID is bound to, or
// nil before it is and after Close. The context is shared by all IDs on
// the device and, as librdmacm's, kept open for the life of the process:
// PDs, CQs and memory regions a program makes on it stay valid after the
// last ID on the device is gone, and serve the device's next IDs. Do not
// close it. Only a device the kernel removes (DEVICE_REMOVAL) is closed,
// with the last ID on it.
func (id *ID) Verbs() *uverbs.Context {
	return locked(id, func(id *ID) *uverbs.Context {
		if id.dev == nil {
			return nil
		}
		return id.dev.ctx
	})
}

// PD returns the protection domain the ID's QP and memory use: the device's
// shared one, or the one given to CreateEP or CreateQP. It is nil before the
// ID is bound to a device and after Close, as Verbs is. The shared one is
// kept open with the device's context (see Verbs): do not close it.
func (id *ID) PD() *uverbs.PD {
	return locked(id, func(id *ID) *uverbs.PD {
		if id.destroyed.Load() {
			return nil
		}
		return id.pd
	})
}

// Event returns the event that ended the last operation of a synchronous
// ID (its id->event): for an ID from GetRequest, the CONNECT_REQUEST with
// the peer's private data; after Accept or Connect, the ESTABLISHED event.
func (id *ID) Event() *Event {
	return locked(id, func(id *ID) *Event { return id.event })
}

// EventsReported returns how many events the ID has received;
// EventsAcked how many of them were acknowledged.
func (id *ID) EventsReported() int {
	return locked(id, func(id *ID) int { return id.eventsReported })
}

// EventsAcked returns how many of the ID's events were acknowledged.
func (id *ID) EventsAcked() int { return int(id.eventsAcked.Load()) }

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
	c := newCall[abi.RdmaUcmMigrateId, abi.RdmaUcmMigrateResp](abi.RDMA_USER_CM_CMD_MIGRATE_ID)
	resp := &c.resp
	c.body.Response = ptr(resp)
	c.body.Id = id.handle
	c.body.Fd = uint32(fd)
	if err := exec(ch.f, &c.ucmaCmd); err != nil {
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
