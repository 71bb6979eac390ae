package uverbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// EventType is the kind of an asynchronous event (enum ibv_event_type).
type EventType uint32

// Asynchronous event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
	EventWQFatal          EventType = 19
	// EventDeviceSpeedChange: a port's link speed changed (mlx5).
	EventDeviceSpeedChange EventType = 20
)

// eventNames are ibv_event_type_str's texts.
var eventNames = [...]string{
	"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
	"local access violation work queue error", "communication established", "send queue drained",
	"path migrated", "path migration request error", "local catastrophic error", "port active",
	"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
	"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
	"WQ fatal", "Device link speed change",
}

// String returns the text ibv_event_type_str gives.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "unknown"
}

// AsyncEvent is an asynchronous event (struct ibv_async_event). Exactly one
// of CQ, QP, SRQ and Port names what it is about, by its type.
type AsyncEvent struct {
	Type EventType
	CQ   *CQ
	QP   *QP
	SRQ  *SRQ
	Port uint8
	// Element is the kernel's raw element: the object's user handle, or
	// the port number.
	Element uint64
}

func (e AsyncEvent) String() string {
	switch {
	case e.CQ != nil:
		return fmt.Sprintf("%v on CQ %d", e.Type, e.CQ.handle)
	case e.QP != nil:
		return fmt.Sprintf("%v on QP %d", e.Type, e.QP.num)
	case e.SRQ != nil:
		return fmt.Sprintf("%v on SRQ %d", e.Type, e.SRQ.handle)
	case e.Port != 0:
		return fmt.Sprintf("%v on port %d", e.Type, e.Port)
	}
	return e.Type.String()
}

// asyncEvents reads the context's asynchronous event file from the moment
// the context is opened, in a goroutine parked in the runtime poller, and
// queues the events for GetAsyncEvent. Reading them as they come is what
// lets a CQ overrun reach the CQ's Poll (ErrCQOverrun) whether or not the
// program waits for events. The reader holds the registry, which holds
// only weak pointers, and never the Context.
type asyncEvents struct {
	file   *os.File
	reg    *registry
	notify chan struct{} // one token: an event was queued
	done   chan struct{} // closed when the reader ends

	mu      sync.Mutex
	queue   []rawEvent
	dropped int   // events dropped from a full queue
	err     error // why the reader ended
}

// rawEvent is struct ib_uverbs_async_event_desc.
type rawEvent struct {
	element uint64
	typ     EventType
}

// maxQueuedEvents bounds the events kept for a program that never asks
// for them; the oldest go first.
const maxQueuedEvents = 4096

// startEvents hands the async event descriptor to the runtime poller,
// which owns it from then on, and starts the reader.
func (c *Context) startEvents() error {
	f, err := pollableFile(c.asyncFD, "async_event")
	if err != nil {
		return &Error{Op: "async event file", Err: err}
	}
	c.res.async = f
	c.events = &asyncEvents{file: f, reg: c.reg, notify: make(chan struct{}, 1), done: make(chan struct{})}
	go c.events.run()
	return nil
}

func (ev *asyncEvents) run() {
	defer close(ev.done)
	var buf [32 * 16]byte
	var parsed [32]rawEvent
	for {
		n, err := ev.file.Read(buf[:])
		if err == nil && n == 0 {
			err = io.EOF
		}
		if err != nil {
			ev.mu.Lock()
			ev.err = err
			ev.mu.Unlock()
			return
		}
		ev.mu.Lock()
		for _, e := range parseAsyncEvents(buf[:n], &parsed) {
			if e.typ == EventCQErr {
				ev.reg.mu.Lock()
				if o := ev.reg.cqs[e.element].o.Value(); o != nil {
					o.overrun.Store(true)
				}
				ev.reg.mu.Unlock()
			}
			if len(ev.queue) == maxQueuedEvents {
				ev.queue = ev.queue[1:]
				ev.dropped++
			}
			ev.queue = append(ev.queue, e)
		}
		ev.mu.Unlock()
		select {
		case ev.notify <- struct{}{}:
		default:
		}
	}
}

// parseAsyncEvents decodes the whole event descriptions (struct
// ib_uverbs_async_event_desc, 16 bytes) in b into out, which has room for
// a full read; a trailing partial one is ignored.
func parseAsyncEvents(b []byte, out *[32]rawEvent) []rawEvent {
	evs := out[:0]
	for i := 0; i+16 <= len(b) && len(evs) < len(out); i += 16 {
		evs = append(evs, rawEvent{element: binary.NativeEndian.Uint64(b[i:]), typ: EventType(binary.NativeEndian.Uint32(b[i+8:]))})
	}
	return evs
}

// AsyncEventConn gives the context's asynchronous event file (ibv_context's
// async_fd), for a program that wants its descriptor, to show it or to
// watch it become readable. The context reads the events from it itself
// and queues them for GetAsyncEvent: a program that reads it loses them.
func (c *Context) AsyncEventConn() (syscall.RawConn, error) {
	if c == nil {
		return nil, errNil
	}
	if c.res.async == nil {
		return nil, ErrClosed
	}
	return c.res.async.SyscallConn()
}

// GetAsyncEvent waits for the next asynchronous event of the device
// (ibv_get_async_event): port state changes, QP and CQ errors, SRQ limits.
// The wait parks the goroutine and ends early when ctx is done. Events
// are read from the moment the context opens and kept until asked for
// (the newest 4096 of them).
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	if c == nil {
		return AsyncEvent{}, errNil
	}
	ev := c.events
	for {
		if err := ctx.Err(); err != nil {
			return AsyncEvent{}, err
		}
		ev.mu.Lock()
		if len(ev.queue) > 0 {
			r := ev.queue[0]
			ev.queue = ev.queue[1:]
			ev.mu.Unlock()
			return c.decodeEvent(r), nil
		}
		err := ev.err
		ev.mu.Unlock()
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return AsyncEvent{}, ErrClosed
			}
			return AsyncEvent{}, &Error{Op: "get async event", Err: err}
		}
		select {
		case <-ev.notify:
		case <-ev.done:
		case <-ctx.Done():
		}
	}
}

// decodeEvent names the object an event is about.
func (c *Context) decodeEvent(r rawEvent) AsyncEvent {
	e := AsyncEvent{Element: r.element, Type: r.typ}
	switch e.Type {
	case EventCQErr:
		e.CQ = c.cqByID(e.Element)
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained,
		EventPathMig, EventPathMigErr, EventQPLastWQEReached:
		e.QP = c.qpByID(e.Element)
	case EventSRQErr, EventSRQLimitReached:
		e.SRQ = c.srqByID(e.Element)
	case EventPortActive, EventPortErr, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		e.Port = uint8(e.Element)
	}
	return e
}
