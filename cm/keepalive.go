package cm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// SetKeepAlive turns on a liveness check of the ID's connection, or with a
// zero interval turns it off. rdma_cm has no such call: a connection whose
// peer vanished (its machine powered off, its link down) is otherwise
// never reported on rxe, whose retries with rdma_cm's default retry count
// of 7 do not end, and an idle connection sends nothing that could fail.
//
// Every interval the check posts a zero-length RDMA write on the ID's QP
// (see uverbs.KeepAlive: the peer's device answers it; the peer program
// does nothing and needs nothing registered, so any rdma_cm peer, C or Go,
// takes part). When a probe stays unanswered for timeout, or the send
// queue stays full with nothing retired for timeout, the connection is
// declared gone, within about interval + timeout of the peer's end:
//   - the QP is moved to the error state, so every outstanding work
//     request completes with wr.WRFlushErr (GetSendComp, GetRecvComp);
//   - the ID's event channel reports a DISCONNECTED event whose Status is
//     -ETIMEDOUT (Event.Err wraps unix.ETIMEDOUT), as for a peer that
//     disconnected; the ID is disconnected (rdma_disconnect), so a peer
//     that comes back learns it, and the kernel's own DISCONNECTED that
//     follows when its DREQ resends give up is not reported again;
//   - posts fail with an error wrapping unix.ETIMEDOUT.
//
// A peer that is alive but stopped (SIGSTOP) or stuck keeps answering:
// its device does. Only the application sees that, with a deadline on the
// context of what it waits for.
//
// The ID must be connected. The probe takes a slot of the send queue and
// an entry of the send CQ while it is out; its completion never reaches
// the program. The connection's ACK timeout should be shorter than timeout,
// so that a lost probe is retransmitted in time: rdma_cm's default
// retransmits after about 0.5 s on Linux 6.12 and 2.3 s on 6.1.
func (id *ID) SetKeepAlive(interval, timeout time.Duration) error {
	const op = "set keepalive"
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return ErrClosed
	}
	q := id.qp.Load()
	switch {
	case q == nil:
		return errf(op, unix.EINVAL, "the ID has no QP")
	case id.qpType != qp.RC:
		return errf(op, unix.EINVAL, "a keepalive needs a connected (RC) ID")
	case interval > 0 && id.getState() != stateConnected:
		return errf(op, unix.ENOTCONN, "the ID is not connected")
	}
	self := id.self
	err := q.SetKeepAlive(uverbs.KeepAlive{Interval: interval, Timeout: timeout, OnDead: func(err error) {
		if id := self.Value(); id != nil {
			id.keepAliveDead(q, err)
		}
	}})
	if err != nil {
		return wrapErr(op, err)
	}
	if interval > 0 && !id.kaChannel {
		id.kaChannel = true
		id.ch.kaIDs.Add(1)
	}
	return nil
}

// keepAliveDead ends the connection whose QP q the keepalive found dead:
// the QP is in the error state already.
func (id *ID) keepAliveDead(q *uverbs.QP, why error) {
	id.mu.Lock()
	if id.destroyed.Load() || id.qp.Load() != q || id.getState() == stateDisconnected {
		// Destroyed, or the connection ended otherwise first, and that
		// was reported.
		id.mu.Unlock()
		return
	}
	id.kaErr = why
	id.setState(stateDisconnected)
	// Tell the peer, as Disconnect does, should it come back: its kernel
	// then ends its side. The DREQ's fate is the kernel's; its
	// DISCONNECTED, when the resends give up, is not reported again.
	if f, err := id.file(); err == nil && !id.disconnected {
		id.disconnected = id.sendDisconnect(f) == nil
	}
	ch := id.ch
	id.mu.Unlock()
	ev := &Event{Type: EventDisconnected, Status: -int(unix.ETIMEDOUT), ID: id}
	ev.acked.Store(true) // the kernel did not report it: nothing to acknowledge
	ch.keepAndWake(ev)
}

// keepAliveErr is the error of a post on an ID whose keepalive found the
// peer gone, or nil.
func (id *ID) keepAliveErr(op string) error {
	id.mu.Lock()
	err := id.kaErr
	id.mu.Unlock()
	if err == nil {
		return nil
	}
	return &Error{Op: op, Err: fmt.Errorf("the peer stopped answering: %w", err)}
}

// keepAndWake queues ev for GetEvent and wakes a GetEvent waiting in the
// kernel for events.
func (ch *EventChannel) keepAndWake(ev *Event) {
	ch.mu.Lock()
	ch.pending = append(ch.pending, makePending(ev))
	if ch.wake != nil {
		close(ch.wake)
		ch.wake = nil
	}
	ch.mu.Unlock()
}

// wakeable returns a context that ends with ctx or when keepAndWake queues
// an event, for a GetEvent on a channel that has IDs with keepalives; stop
// releases it. The caller holds ch.mu.
func (ch *EventChannel) wakeable(ctx context.Context) (context.Context, func()) {
	if ch.kaIDs.Load() == 0 {
		return ctx, func() {}
	}
	if ch.wake == nil {
		ch.wake = make(chan struct{})
	}
	wake := ch.wake
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-wake:
			cancel(errWoken)
		case <-wctx.Done():
		}
	}()
	return wctx, func() { cancel(nil) }
}

var errWoken = errors.New("an event was queued")
