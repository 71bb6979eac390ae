package cm

import (
	"context"
	"errors"
	"sync"

	"github.com/rdmago/rdma/uverbs"
)

// compEvents is the completion channel a device's IDs share: every CQ
// CreateQP makes reports to it. librdmacm gives each of those CQs a
// channel of its own; in Go a channel costs more than the command that
// makes it (the descriptor is made non-blocking and registered with the
// runtime's poller, and unregistered when closed), which made accepting a
// connection markedly dearer than librdmacm's (see docs/performance.md).
// One goroutine, started with the channel, reads its events,
// acknowledges them and wakes the ID waiting on that CQ (GetSendComp,
// GetRecvComp); IDs that never wait cost nothing more than their CQs.
type compEvents struct {
	ch   *uverbs.CompChannel
	done chan struct{} // closed when the reader stops; err says why

	mu      sync.Mutex
	waiters map[*uverbs.CQ]chan struct{}
	err     error
}

// compEvents returns the device's shared completion channel, making it
// (and its reader) the first time.
func (d *device) compEvents() (*compEvents, error) {
	d.compMu.Lock()
	defer d.compMu.Unlock()
	if d.comp != nil {
		return d.comp, nil
	}
	ch, err := d.ctx.NewCompChannel()
	if err != nil {
		return nil, err
	}
	c := &compEvents{ch: ch, done: make(chan struct{}), waiters: map[*uverbs.CQ]chan struct{}{}}
	go c.read()
	d.comp = c
	return c, nil
}

// closeCompEvents closes the device's shared channel, which stops its
// reader. The caller owns d (device.close).
func (d *device) closeCompEvents() {
	d.compMu.Lock()
	c := d.comp
	d.comp = nil
	d.compMu.Unlock()
	if c != nil {
		c.ch.Close()
		<-c.done
	}
}

// read delivers the channel's events until it is closed or fails.
func (c *compEvents) read() {
	var err error
	for {
		var cq *uverbs.CQ
		cq, err = c.ch.GetEvent(context.Background())
		if err != nil {
			var ue *uverbs.Error
			if errors.Is(err, uverbs.ErrClosed) || errors.As(err, &ue) {
				break
			}
			// An event of a CQ destroyed as it came: nobody waits
			// for it.
			continue
		}
		cq.AckEvents(1)
		// The send is under mu, which remove holds to close w.
		c.mu.Lock()
		if w := c.waiters[cq]; w != nil {
			select {
			case w <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

// add registers cq, a CQ on the channel, and returns what wakes its
// waiter: a token arrives after each of cq's events (one at most
// pending).
func (c *compEvents) add(cq *uverbs.CQ) chan struct{} {
	w := make(chan struct{}, 1)
	c.mu.Lock()
	c.waiters[cq] = w
	c.mu.Unlock()
	return w
}

// remove forgets cq, before it is destroyed, and ends a wait for it
// with ErrClosed.
func (c *compEvents) remove(cq *uverbs.CQ) {
	c.mu.Lock()
	if w := c.waiters[cq]; w != nil {
		delete(c.waiters, cq)
		close(w)
	}
	c.mu.Unlock()
}

// wait waits for the next event of the CQ wake is for, or until ctx is
// done, the CQ destroyed or the channel closed.
func (c *compEvents) wait(ctx context.Context, wake chan struct{}) error {
	select {
	case _, ok := <-wake:
		if !ok {
			return ErrClosed
		}
		return nil
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err == nil || errors.Is(c.err, uverbs.ErrClosed) {
			return ErrClosed
		}
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
