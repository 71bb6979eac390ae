package cmsock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdma/internal/pollctx"
	"github.com/rdmago/rdma/uverbs"
)

// Waiter is how a connection's calls (a Read, a Write, a Close that
// drains) wait for their completion queue: one at a time, the holder,
// waits for the CQ's next event on the completion channel; the others
// sleep on their direction's wake channel until the holder lets go, or
// until the connection's state changes some other way.
//
// A caller that finds the channel held may only sleep if nothing was
// reaped since it last polled: the holder may have let go and taken the
// channel again before this caller counted itself a sleeper, and polled
// past what this caller waits for on the way. So a connection calls
// Reaped after each poll that reaped something (which wakes the sleepers
// counted by then), a caller reads Reaps before it polls and passes it
// to Hold, and Hold does not sleep when the count moved.
//
// What changes that state without a completion (a deadline passing, the
// peer's disconnect, Close) changes it first and kicks after. A caller
// reads Kicks before it looks at the state, and passes that count to
// WaitEvent, which does not wait if a kick came since: a change the look
// missed is never slept through. The channel gets no deadline of its
// own: a kick ends a channel wait under way with a read deadline in the
// past (which ends a direct sleep with no bound at once), or, for a
// direct wait in slices, through the wait's context; a wait with no
// deadline reads no clock.
type Waiter struct {
	ch     *uverbs.CompChannel // nil where another goroutine reads the channel
	direct bool                // wait on the thread (GetEventDirect)
	kicks  atomic.Uint64
	// kicked: a kick set the channel's read deadline in the past, after
	// the count; WaitEvent clears it before it looks at the count. With
	// no kick since the last clear, a wait leaves the deadline alone:
	// setting it costs a lock and a comparison on every sleep.
	kicked   atomic.Bool
	reaps    atomic.Uint64 // polls that reaped completions (Reaped)
	holding  atomic.Bool
	sleepers atomic.Int32 // callers in Hold that found the channel held
	wake     []chan struct{}
	sliced   sliced // the holder's context for a wait in slices
}

// Init readies w for dirs directions, whose callers wait on ch: on the
// thread if direct, through the runtime's poller if not. A nil ch is for
// a connection whose own goroutine reads the channel and wakes the
// callers (WakeAll); its callers only Sleep.
func (w *Waiter) Init(ch *uverbs.CompChannel, direct bool, dirs int) {
	w.ch, w.direct = ch, direct
	w.wake = make([]chan struct{}, dirs)
	for i := range w.wake {
		w.wake[i] = make(chan struct{}, 1)
	}
}

// Kicks is the count of kicks, which a caller reads before it looks at
// the connection's state and then passes to WaitEvent.
func (w *Waiter) Kicks() uint64 { return w.kicks.Load() }

// Reaps is the count of polls that reaped completions, which a caller
// reads before it polls and passes to Hold.
func (w *Waiter) Reaps() uint64 { return w.reaps.Load() }

// Reaped records a poll that reaped completions, after the state they
// change, and wakes the callers that sleep: what was reaped may be what
// they wait for, and the holder, which they rely on to wake them, may
// sleep on the channel through it.
func (w *Waiter) Reaped() {
	w.reaps.Add(1)
	if w.sleepers.Load() > 0 {
		w.WakeAll()
	}
}

// Kick ends the channel wait under way, if any, and wakes the sleepers,
// so that they look at the connection's state again.
func (w *Waiter) Kick() {
	w.kicks.Add(1)
	if w.ch != nil {
		w.ch.SetReadDeadline(pollctx.Past)
		w.kicked.Store(true)
	}
	w.WakeAll()
}

// WakeAll wakes the callers sleeping on a wake channel. A direction
// nobody sleeps in keeps one wake for its next sleeper, which then looks
// once more for nothing.
func (w *Waiter) WakeAll() {
	for _, c := range w.wake {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Sleep sleeps until direction dir is woken.
func (w *Waiter) Sleep(dir int) { <-w.wake[dir] }

// Hold takes the channel for a caller in direction dir and reports true.
// If another caller holds it, it reports false, and the caller looks at
// the state again: at once if a poll reaped something since Reaps was
// seen (read before the caller's own poll), else once woken.
func (w *Waiter) Hold(dir int, seen uint64) bool {
	// Counted before the try and the look at reaps, so that a holder
	// that lets go, or a poll that reaps, after them sees the sleeper
	// and wakes it.
	w.sleepers.Add(1)
	if w.holding.CompareAndSwap(false, true) {
		w.sleepers.Add(-1)
		return true
	}
	if w.reaps.Load() == seen {
		w.Sleep(dir)
	}
	w.sleepers.Add(-1)
	return false
}

// Release lets go of the channel, waking the callers that wait for it:
// what the holder reaped may be what they wait for. A caller that waits
// alone, the common case, touches no wake channel.
func (w *Waiter) Release() {
	w.holding.Store(false)
	if w.sleepers.Load() > 0 {
		w.WakeAll()
	}
}

// WaitEvent waits, holding the channel, for one event, unless kicked
// since Kicks was g, and acknowledges it; it reports whether one came.
// Without one, the wait was cut short (a kick, Close) and the caller
// looks again. A wait on the thread sleeps in slices if inSlices (a
// deadline's timer must run: Deadlines.Pending), else with no bound
// until an event or a kick.
func (w *Waiter) WaitEvent(g uint64, inSlices bool) bool {
	if w.kicked.Swap(false) {
		w.ch.SetReadDeadline(time.Time{})
	}
	if w.kicks.Load() != g {
		// A kick came before the deadline was cleared, which undid it.
		// (One whose deadline is set after the swap leaves kicked set:
		// the read below ends at once, and the next wait clears it.)
		return false
	}
	var cq *uverbs.CQ
	var err error
	if w.direct {
		var ctx context.Context = context.Background()
		if inSlices {
			w.sliced.w, w.sliced.g = w, g
			ctx = &w.sliced
		}
		cq, err = w.ch.GetEventDirect(ctx)
	} else {
		cq, err = w.ch.GetEvent(context.Background())
	}
	if err != nil {
		return false
	}
	cq.AckEvents(1)
	return true
}

// sliced is the context of a direct wait in slices (WaitEvent's inSlices):
// never done, but with a Done channel, so that GetEventDirect sleeps a
// millisecond at a time and asks Err between sleeps, and Err reports a
// kick since g. Kept in the Waiter, it allocates nothing. A sleep with
// no bound is ended by the channel's read deadline, which a kick moves
// into the past; a sliced one takes its bound from the context only.
type sliced struct {
	w *Waiter
	g uint64
}

var errKicked = errors.New("cmsock: kicked")

var neverClosed = make(chan struct{})

func (c *sliced) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *sliced) Done() <-chan struct{}       { return neverClosed }
func (c *sliced) Value(any) any               { return nil }
func (c *sliced) Err() error {
	if c.w.kicks.Load() != c.g {
		return errKicked
	}
	return nil
}
