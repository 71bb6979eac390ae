package cm

import (
	"errors"
	"fmt"

	"github.com/rdmago/rdma/uverbs"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned by every method of an ID or EventChannel after its
// Close, before anything reaches the kernel, and by calls given a closed
// EventChannel. It is uverbs.ErrClosed, one value for every closed object
// of the module, and matches net.ErrClosed too, so errors.Is(err,
// net.ErrClosed) holds for it, as for a closed socket.
var ErrClosed = uverbs.ErrClosed

// Error is a failed rdma_cm operation. It wraps the errno, so callers test
// it with errors.Is(err, unix.ECONNREFUSED) and the like:
//
//   - a command the kernel refused: its errno;
//   - a connection rejected by the peer (or by the peer's kernel because
//     nobody listens on the port): ECONNREFUSED, with the reject reason in
//     Status;
//   - an operation that failed asynchronously (ADDR_ERROR, ROUTE_ERROR,
//     CONNECT_ERROR, UNREACHABLE): the event's status, a negative errno,
//     typically ETIMEDOUT, ENETUNREACH or EHOSTUNREACH;
//   - an event that does not answer the operation waited for: ECONNRESET for
//     DISCONNECTED, ENODEV for DEVICE_REMOVAL, EPROTO for anything else.
type Error struct {
	Op     string    // the operation, e.g. "resolve addr"
	Event  EventType // the event that ended it, when one did
	Status int       // that event's status
	Err    error     // usually a unix.Errno
	// HasEvent tells whether Event and Status are set.
	HasEvent bool
}

func (e *Error) Error() string {
	if e.HasEvent && e.Op == e.Event.String() {
		// The event itself failed (Event.Err): name it once.
		return fmt.Sprintf("cm: %v (status %d): %v", e.Event, e.Status, e.Err)
	}
	if e.HasEvent {
		return fmt.Sprintf("cm: %s: %v (status %d): %v", e.Op, e.Event, e.Status, e.Err)
	}
	return fmt.Sprintf("cm: %s: %v", e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// wrapErr wraps a kernel failure of op; nil stays nil and ErrClosed passes
// through unchanged.
func wrapErr(op string, err error) error {
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return &Error{Op: op, Err: err}
}

func errf(op string, errno unix.Errno, format string, args ...any) error {
	return &Error{Op: op, Err: fmt.Errorf(format+": %w", append(args, errno)...)}
}

// eventErr is the error an event carries for an operation that waited for
// want, or nil when it is want with status 0, as librdmacm's ucma_complete
// decides it, with unexpected events made errors too.
func eventErr(op string, ev *Event, want EventType) error {
	e := &Error{Op: op, Event: ev.Type, Status: ev.Status, HasEvent: true}
	switch {
	case ev.Type == EventRejected:
		e.Err = unix.ECONNREFUSED
	case ev.Status < 0:
		e.Err = unix.Errno(-ev.Status)
	case ev.Status > 0:
		e.Err = unix.Errno(ev.Status)
	case ev.Type == want:
		return nil
	case ev.Type == EventDisconnected:
		e.Err = unix.ECONNRESET
	case ev.Type == EventDeviceRemoval:
		e.Err = unix.ENODEV
	case ev.Type == EventAddrError, ev.Type == EventRouteError, ev.Type == EventConnectError, ev.Type == EventUnreachable:
		e.Err = unix.EIO
	default:
		e.Err = fmt.Errorf("unexpected event while waiting for %v: %w", want, unix.EPROTO)
	}
	return e
}
