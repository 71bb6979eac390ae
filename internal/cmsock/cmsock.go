// Package cmsock holds what the stream transports over rdma_cm (packages
// rsocket and valkeyrdma) share in giving a connection the shape of
// package net's: resolving an address by network name, the listening ID
// behind a net.Listener, per-direction deadlines with their timers, the
// wait for the completion queue (Waiter), and errors that look like a
// socket's.
package cmsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/inetaddr"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Resolve turns host:port into an address of network's family: "rdma"
// (either), "rdma4" or "rdma6", and with tcp also "tcp", "tcp4" and
// "tcp6" meaning the same, for client libraries that name their
// dialer's network "tcp".
func Resolve(ctx context.Context, network, address string, passive, tcp bool) (netip.AddrPort, error) {
	f := inetaddr.Any
	switch {
	case network == "rdma" || tcp && network == "tcp":
	case network == "rdma4" || tcp && network == "tcp4":
		f = inetaddr.IP4
	case network == "rdma6" || tcp && network == "tcp6":
		f = inetaddr.IP6
	default:
		return netip.AddrPort{}, net.UnknownNetworkError(network)
	}
	return inetaddr.Resolve(ctx, network, f, address, passive)
}

// SysErr gives an rdma_cm or verbs failure the shape package net gives a
// system call's: an *os.SyscallError around the errno, which errors.Is
// finds. A completion's error keeps its status (and matches its errno),
// and so do the errors in keep and uverbs.ErrNoDevice.
func SysErr(call string, err error, keep ...error) error {
	var ce *wr.CompletionError
	if errors.Is(err, uverbs.ErrNoDevice) || errors.As(err, &ce) {
		return err
	}
	for _, k := range keep {
		if errors.Is(err, k) {
			return err
		}
	}
	var cmErr *cm.Error
	if errors.As(err, &cmErr) && cmErr.HasEvent && cmErr.Event == cm.EventRejected && cmErr.Status != rejectNoListener {
		return os.NewSyscallError(call, rejected(cmErr.Status))
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return os.NewSyscallError(call, errno)
	}
	return err
}

// Reject reasons (enum ib_cm_rej_reason). rejectNoListener is a request
// for a port nobody listens on, which the peer's kernel sends: a socket's
// plain ECONNREFUSED. rejectConsumer is the server program's rdma_reject.
const (
	rejectNoListener = 8  // IB_CM_REJ_INVALID_SERVICE_ID
	rejectConsumer   = 28 // IB_CM_REJ_CONSUMER_DEFINED
)

// rejected is a connection refused for another reason: the server
// program's rdma_reject (28, consumer defined), or its CM's (a stale
// connection, no resources). It matches ECONNREFUSED, as a socket's
// refusal, and names the reason, which tells those apart.
type rejected int

func (r rejected) Error() string {
	if r == rejectConsumer {
		return fmt.Sprintf("connection refused (rejected by the server program: reject reason %d)", int(r))
	}
	return fmt.Sprintf("connection refused (reject reason %d)", int(r))
}

func (r rejected) Unwrap() error { return syscall.ECONNREFUSED }

// Listen creates a listening ID (port space TCP) on address: SO_REUSEADDR
// as net.Listen sets it, IPv6 only for the networks ending in 6, backlog
// 128 when it is not positive. Its errors are *net.OpError, addr making
// their address from the resolved one.
func Listen(ctx context.Context, network, address string, backlog int, tcp bool, addr func(netip.AddrPort) net.Addr) (*cm.ID, error) {
	src, err := Resolve(ctx, network, address, true, tcp)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	opErr := func(call string, err error) error {
		return &net.OpError{Op: "listen", Net: network, Addr: addr(src), Err: SysErr(call, err)}
	}
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, opErr("socket", err)
	}
	fail := func(call string, err error) (*cm.ID, error) {
		id.Close()
		return nil, opErr(call, err)
	}
	if err := id.SetReuseAddr(true); err != nil {
		return fail("setsockopt", err)
	}
	if network == "rdma6" || network == "tcp6" {
		if err := id.SetAFOnly(true); err != nil {
			return fail("setsockopt", err)
		}
	}
	if err := id.BindAddr(src); err != nil {
		return fail("bind", err)
	}
	if backlog <= 0 {
		backlog = 128
	}
	if err := id.Listen(backlog); err != nil {
		return fail("listen", err)
	}
	return id, nil
}

// Listener is the core of a transport's net.Listener: the listening ID,
// Accepts taking turns on it, and a Close that ends them.
type Listener struct {
	ID      *cm.ID
	Network string
	Addr    net.Addr
	Ctx     context.Context // ended by Close

	cancel  context.CancelFunc
	mu      sync.Mutex // Accepts take turns on the ID
	closeMu sync.Mutex
	closed  bool
}

// NewListener wraps a listening ID.
func NewListener(id *cm.ID, network string, addr net.Addr) *Listener {
	l := &Listener{ID: id, Network: network, Addr: addr}
	l.Ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// acceptTimeout bounds the wait for a connection to be established after
// it was accepted: a peer that went away meanwhile must not hold up the
// listener.
const acceptTimeout = 10 * time.Second

// AcceptContext is the context for accepting one request: it ends with
// Close, or after acceptTimeout.
func (l *Listener) AcceptContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.Ctx, acceptTimeout)
}

// Accept waits for connection requests and hands each to accept, until
// one gives a connection; a request accept fails is closed and the wait
// goes on. After Close it fails with an error matching net.ErrClosed.
func Accept[C any](l *Listener, accept func(nid *cm.ID) (C, error)) (C, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		nid, err := l.ID.GetRequest(l.Ctx)
		if err != nil {
			if l.Ctx.Err() != nil {
				err = net.ErrClosed
			} else {
				err = SysErr("accept", err)
			}
			var zero C
			return zero, &net.OpError{Op: "accept", Net: l.Network, Addr: l.Addr, Err: err}
		}
		c, err := accept(nid)
		if err != nil {
			nid.Close()
			continue
		}
		return c, nil
	}
}

// Close stops listening. Accepts under way return an error matching
// net.ErrClosed; connections already accepted stay open.
func (l *Listener) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return &net.OpError{Op: "close", Net: l.Network, Addr: l.Addr, Err: net.ErrClosed}
	}
	l.closed = true
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ID.Close()
}

// Deadlines are a connection's deadlines, by direction (up to three),
// with the timers that wake a direction's waiter when its deadline passes.
//
// Passed reads a flag that Set and the timer raise, as the runtime's
// poller does for package net's deadlines (pollDesc's rd and wd), rather
// than reading the clock: a Read or Write looks at its deadline two or
// three times, and a read of the clock costs more than the rest of such a
// look.
type Deadlines struct {
	passed [3]atomic.Bool
	// pending has bit dir set while direction dir has a deadline that
	// has not passed (set under mu).
	pending atomic.Uint32
	mu      sync.Mutex // guards what follows
	timer   [3]*time.Timer
	// due is when the deadline passes, on the monotonic clock; the zero
	// time for none.
	due  [3]time.Time
	wake [3]func()
}

// Set sets direction dir's deadline (the zero time: none) and calls wake,
// which also runs when the deadline passes, so that a waiter looks at it
// again.
func (d *Deadlines) Set(dir int, t time.Time, wake func()) {
	d.mu.Lock()
	d.wake[dir] = wake
	now := time.Now()
	left := t.Sub(now)
	d.due[dir] = time.Time{}
	if !t.IsZero() {
		d.due[dir] = now.Add(left)
	}
	d.passed[dir].Store(!t.IsZero() && left <= 0)
	if !t.IsZero() && left > 0 {
		d.pending.Or(1 << dir)
	} else {
		d.pending.And(^uint32(1 << dir))
	}
	switch {
	case t.IsZero() || left <= 0:
		if d.timer[dir] != nil {
			d.timer[dir].Stop()
		}
	case d.timer[dir] == nil:
		d.timer[dir] = time.AfterFunc(left, d.fire(dir))
	default:
		d.timer[dir].Reset(left)
	}
	d.mu.Unlock()
	wake()
}

// fire is direction dir's timer function. A timer stopped or reset while
// its function was starting may still run it, for an older deadline; the
// monotonic clock, read under mu against when the timer is due now,
// tells.
func (d *Deadlines) fire(dir int) func() {
	return func() {
		d.mu.Lock()
		due := d.due[dir]
		passed := !due.IsZero() && !time.Now().Before(due)
		if passed {
			d.passed[dir].Store(true)
			d.pending.And(^uint32(1 << dir))
		}
		wake := d.wake[dir]
		d.mu.Unlock()
		if passed {
			wake()
		}
	}
}

// Passed reports whether direction dir has a deadline and it has passed.
func (d *Deadlines) Passed(dir int) bool { return d.passed[dir].Load() }

// Pending reports whether a direction has a deadline yet to pass, whose
// timer must be able to run: a wait on the thread (Waiter.WaitEvent)
// then sleeps in bounded slices, since with GOMAXPROCS 1 the timer runs
// only once the sleep gives the P back.
func (d *Deadlines) Pending() bool { return d.pending.Load() != 0 }

// Stop stops the timers, for a connection that closes.
func (d *Deadlines) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range d.timer {
		if t != nil {
			t.Stop()
		}
	}
}

// OpErr is a connection's error as package net returns it: nil and io.EOF
// as they are, anything else in a *net.OpError, the connection's own
// closed error (closed) as net.ErrClosed.
func OpErr(op, network string, laddr, raddr net.Addr, err, closed error) error {
	switch {
	case err == nil || err == io.EOF:
		return err
	case errors.Is(err, closed):
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: network, Source: laddr, Addr: raddr, Err: err}
}
