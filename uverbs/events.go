package uverbs

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
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
)

// eventNames are ibv_event_type_str's texts.
var eventNames = [...]string{
	"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
	"local access violation work queue error", "communication established", "send queue drained",
	"path migrated", "path migration request error", "local catastrophic error", "port active",
	"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
	"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
	"WQ fatal",
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

// asyncEvents reads the context's asynchronous event file.
type asyncEvents struct {
	mu   sync.Mutex
	file *os.File
	buf  [16]byte
}

// GetAsyncEvent waits for the next asynchronous event of the device
// (ibv_get_async_event): port state changes, QP and CQ errors, SRQ limits.
// The wait parks the goroutine in the runtime poller and ends early when
// ctx is done.
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	ev, err := c.asyncFile()
	if err != nil {
		return AsyncEvent{}, err
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	n, err := readContext(ctx, ev.file, ev.buf[:], "get async event")
	if err != nil {
		return AsyncEvent{}, err
	}
	if n < 16 {
		return AsyncEvent{}, &Error{Op: "get async event", Err: fmt.Errorf("short event of %d bytes", n)}
	}
	// struct ib_uverbs_async_event_desc
	e := AsyncEvent{
		Element: binary.NativeEndian.Uint64(ev.buf[0:]),
		Type:    EventType(binary.NativeEndian.Uint32(ev.buf[8:])),
	}
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
	return e, nil
}

// asyncFile hands the async event descriptor to the runtime poller on
// first use.
func (c *Context) asyncFile() (*asyncEvents, error) {
	c.objMu.Lock()
	defer c.objMu.Unlock()
	if c.events != nil {
		return c.events, nil
	}
	if c.asyncFD < 0 {
		return nil, ErrClosed
	}
	f, err := pollableFile(c.asyncFD, "async_event")
	if err != nil {
		return nil, &Error{Op: "get async event", Err: err}
	}
	c.events = &asyncEvents{file: f}
	return c.events, nil
}
