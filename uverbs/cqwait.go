package uverbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/pollctx"
	"github.com/rdmago/rdma/wr"
)

// CQ.Wait. A completion channel carries the events of every CQ on it, and
// a goroutine blocked on one CQ must not swallow another's event, so Wait
// does not read the channel itself: while CQs that wait are open, one
// goroutine per channel (readWaitEvents) reads its events, acknowledges
// them and wakes the CQ each is for through the CQ's wake channel, and
// Wait blocks in a select on that, its context and the reader's end. The
// select allocates nothing, whatever the context. When the last waiting
// CQ closes, the reader is stopped (a read deadline in the past), so
// that a channel and CQs dropped without Close can still be collected.

// waiter is a CQ's part in Wait: its wake-ups (a buffer of one), and
// whether it has waited, so that its channel's reader counts it.
type waiter struct {
	wake  chan struct{}
	waits atomic.Bool
}

// wakeUp makes a Wait blocked on the CQ poll again; a wake-up already
// pending is enough.
func (w *waiter) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// errUnknownCQ is an event for a CQ this context no longer has (destroyed
// after the event was queued).
var errUnknownCQ = errors.New("uverbs: completion event for a CQ that is gone")

// errWaitOwnsChannel is GetEvent on a channel whose events go to CQ.Wait.
var errWaitOwnsChannel = &Error{Op: "get CQ event", Err: fmt.Errorf("the channel's events go to CQ.Wait: %w", unix.EBUSY)}

// Wait returns the completions the CQ has, as Poll does, waiting for one
// when it has none: it polls, arms the CQ (ReqNotify), polls again, and
// only then blocks until the CQ's completion channel reports an event for
// it, parked in the Go runtime (no OS thread blocks), then polls again. It
// returns at least one completion, or an error: ctx's (wrapped; errors.Is
// finds context.Canceled or DeadlineExceeded) when it ends first,
// ErrClosed when the CQ or its channel is closed, Poll's errors (such as
// ErrCQOverrun) as Poll returns them.
//
// The CQ needs a completion channel (CQAttr.Channel). Once a CQ has
// waited, the channel's events belong to Wait: any CQ on it may Wait, and
// GetEvent and GetEventDirect on it fail with an error matching EBUSY.
// Events are acknowledged as they are read (AckEvents costs one atomic
// add here, so there is nothing to batch). Several goroutines may Wait on
// one CQ; each returns what its own Poll took. Wait allocates nothing
// unless it fails (a benchmark and a test in the device tests hold it to
// that).
func (cq *CQ) Wait(ctx context.Context, wc []wr.Completion) (int, error) {
	if cq == nil {
		return 0, errNil
	}
	ch := cq.channel
	switch {
	case ch == nil:
		return 0, &Error{Op: "wait CQ", Err: fmt.Errorf("the CQ has no completion channel (CQAttr.Channel): %w", unix.EINVAL)}
	case len(wc) == 0:
		return 0, &Error{Op: "wait CQ", Err: fmt.Errorf("no room for a completion: %w", unix.EINVAL)}
	}
	if !cq.w.waits.Load() {
		if err := ch.addWaiter(cq); err != nil {
			return 0, err
		}
	}
	for {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := cq.ReqNotify(false); err != nil {
			return 0, err
		}
		// A completion that came before the arm raises no event.
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-cq.w.wake:
		case <-ch.waitFailed:
			return 0, ch.waitErr
		case <-ctx.Done():
			return 0, &Error{Op: "wait CQ", Err: ctx.Err()}
		}
	}
}

// addWaiter counts cq among the channel's waiting CQs and starts the
// reader if it is not running.
func (ch *CompChannel) addWaiter(cq *CQ) error {
	if err := cq.use(); err != nil {
		return err
	}
	defer cq.done()
	ch.waitMu.Lock()
	defer ch.waitMu.Unlock()
	if cq.w.waits.Load() {
		return nil
	}
	select {
	case <-ch.waitFailed:
		return ch.waitErr
	default:
	}
	ch.waitMode.Store(true)
	cq.w.waits.Store(true)
	ch.waitCQs++
	switch {
	case ch.reading && ch.stopping:
		// The reader has not seen its stop yet: it keeps going.
		ch.stopping = false
		ch.SetReadDeadline(time.Time{})
	case !ch.reading:
		ch.reading = true
		go ch.readWaitEvents()
	}
	return nil
}

// removeWaiter is the close of a CQ that waited: it wakes the CQ's Waits
// (whose next Poll answers ErrClosed) and stops the reader when no
// waiting CQ is left.
func (ch *CompChannel) removeWaiter(w *waiter) {
	ch.waitMu.Lock()
	defer ch.waitMu.Unlock()
	if !w.waits.Load() {
		return
	}
	w.waits.Store(false)
	w.wakeUp()
	ch.waitCQs--
	if ch.waitCQs == 0 && ch.reading {
		ch.stopping = true
		ch.SetReadDeadline(pollctx.Past)
	}
}

// readWaitEvents is the channel's reader while CQs wait on it.
func (ch *CompChannel) readWaitEvents() {
	for {
		cq, err := ch.getEvent(context.Background(), false)
		ch.waitMu.Lock()
		switch {
		case err == nil:
			cq.AckEvents(1)
			if cq.w.waits.Load() { // an event's CQ has a channel, so a waiter
				cq.w.wakeUp()
			}
		case errors.Is(err, errUnknownCQ):
		case errors.Is(err, os.ErrDeadlineExceeded) && ch.stopping:
			ch.stopping, ch.reading = false, false
			ch.SetReadDeadline(time.Time{})
			ch.waitMu.Unlock()
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			// A stop that was called off.
		default:
			// The channel is closed, or failed: for good.
			ch.waitErr, ch.reading = err, false
			close(ch.waitFailed)
			ch.waitMu.Unlock()
			return
		}
		ch.waitMu.Unlock()
	}
}
