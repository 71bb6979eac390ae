package rsocket

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/cmsock"
)

// Dialer holds options for connecting. The zero Dialer connects with
// librdmacm's defaults: 128 KiB buffers each way, 64 bytes inline, 384
// credits.
type Dialer struct {
	// Timeout bounds the whole connect; zero means no bound beyond the
	// context's and rdma_cm's own retries.
	Timeout time.Duration
	// LocalAddr is the address to connect from; nil picks one.
	LocalAddr *Addr
	// SendBuffer and RecvBuffer size the connection's registered buffers
	// (SO_SNDBUF and SO_RCVBUF of rsockets); zero means 128 KiB.
	SendBuffer, RecvBuffer int
	// Inline is the largest write sent inline, from the work request
	// itself (RDMA_INLINE); zero means 64, negative means none.
	Inline int
	// QueueDepth is the number of send and receive queue entries, and so
	// of credits (RDMA_SQSIZE and RDMA_RQSIZE); zero means 384.
	QueueDepth int
	// KeepAlive, if positive, checks every KeepAlive that the peer's
	// device still answers, and ends the connection when it has not for
	// another KeepAlive (cm.ID.SetKeepAlive): a peer whose machine died is
	// found within about twice KeepAlive, and Read and Write then fail with
	// ETIMEDOUT. A probe waits behind any write the peer's device told to
	// wait (an RNR NAK, 0.66 s under rdma_cm), so values under a second can
	// end a connection to a slow peer.
	KeepAlive time.Duration
	// PollTime is how long a blocked Read or Write polls for completions
	// before it sleeps; zero means 10µs, as rsockets' polling_time.
	PollTime time.Duration
	// WaitInKernel makes a blocked Read or Write sleep in the kernel on
	// its own thread, as a blocking C rsocket does
	// (uverbs.CompChannel.GetEventDirect), instead of parking in the
	// runtime's poller: a wake-up is then one return from ppoll(2), with
	// no other thread woken, which lowers latency and CPU per message.
	// The price is that the goroutine keeps its thread and P while it
	// waits: other goroutines get that P when the runtime preempts the
	// sleep (after 10 ms, as it preempts any goroutine), or between
	// sleeps of a millisecond while a deadline is pending. Deadlines and
	// Close end a sleep at once. Set it for a goroutine per connection
	// with GOMAXPROCS above the number of connections waiting at once;
	// leave it off for servers of many connections.
	WaitInKernel bool
}

func (d *Dialer) config() config {
	return config{
		sendBuf:      d.SendBuffer,
		recvBuf:      d.RecvBuffer,
		inline:       d.Inline,
		queueDepth:   d.QueueDepth,
		keepAlive:    d.KeepAlive,
		pollTime:     d.PollTime,
		waitInKernel: d.WaitInKernel,
	}
}

// Dial connects to address on the named network with the zero Dialer.
// The networks are "rdma", "rdma4" and "rdma6"; the address is host:port
// as for package net.
func Dial(network, address string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// Dial connects to address on the named network.
func (d *Dialer) Dial(network, address string) (*Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address on the named network. ctx bounds the
// address and route resolution and the connection handshake; once
// connected, it no longer matters. Errors are *net.OpError; the refusals
// of package net match theirs: errors.Is(err, syscall.ECONNREFUSED) for a
// port nobody listens on, ENETUNREACH or EHOSTUNREACH for a peer that
// cannot be reached, and ENODEV when no RDMA device serves the route or
// the host has no RDMA connection manager (then it also matches
// uverbs.ErrNoDevice, and its text names the module to load); a
// dial that outlives Timeout or ctx's deadline fails with
// os.ErrDeadlineExceeded, a net.Error whose Timeout is true, and one
// whose ctx is cancelled with an error matching context.Canceled, as
// package net's do.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*Conn, error) {
	opErr := func(raddr net.Addr, err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			// As package net: a dial that ran out of time is a
			// timeout, os.ErrDeadlineExceeded ("i/o timeout").
			err = os.ErrDeadlineExceeded
		}
		var laddr net.Addr
		if d.LocalAddr != nil {
			laddr = *d.LocalAddr
		}
		return &net.OpError{Op: "dial", Net: network, Source: laddr, Addr: raddr, Err: err}
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	dst, err := resolve(ctx, network, address, false)
	if err != nil {
		return nil, opErr(nil, err)
	}
	raddr := Addr{dst, network}
	cfg := d.config().withDefaults()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, opErr(raddr, sysErr("socket", err))
	}
	c, err := dial(ctx, id, d.LocalAddr, dst, network, cfg)
	if err != nil {
		id.Close()
		return nil, opErr(raddr, err)
	}
	return c, nil
}

// resolveTimeout is each rdma_cm resolution's own timeout (rsockets
// starts at one second and doubles on each of its retries).
const resolveTimeout = 2 * time.Second

func dial(ctx context.Context, id *cm.ID, laddr *Addr, dst netip.AddrPort, network string, cfg config) (*Conn, error) {
	var src netip.AddrPort
	if laddr != nil {
		src = laddr.AddrPort
		if err := id.BindAddr(src); err != nil {
			return nil, sysErr("bind", err)
		}
	}
	if err := id.ResolveAddr(ctx, src, dst, resolveTimeout); err != nil {
		return nil, sysErr("connect", err)
	}
	if err := id.ResolveRoute(ctx, resolveTimeout); err != nil {
		return nil, sysErr("connect", err)
	}
	e, err := newEndpoint(id, cfg)
	if err != nil {
		return nil, sysErr("connect", err)
	}
	cd := e.connData()
	b := cd.marshal()
	param := cm.ConnParam{PrivateData: b[:], FlowControl: 1, RetryCount: 7, RNRRetryCount: 7}
	if err := id.Connect(ctx, &param); err != nil {
		e.release()
		return nil, sysErr("connect", err)
	}
	peer, err := parseConnData(id.Event().PrivateData())
	if err != nil {
		e.release()
		return nil, err
	}
	return establish(e, &peer, network, cfg)
}

// establish finishes a connection either side made.
func establish(e *endpoint, peer *connData, network string, cfg config) (*Conn, error) {
	e.s.save(peer)
	if cfg.keepAlive > 0 {
		if err := e.id.SetKeepAlive(cfg.keepAlive, cfg.keepAlive); err != nil {
			e.release()
			return nil, err
		}
	}
	e.startWatch()
	return newConn(e, network), nil
}

// sysErr gives an rdma_cm failure the shape package net gives a system
// call's: an *os.SyscallError around the errno, which errors.Is finds. A
// host without the connection manager keeps package cm's error, which
// matches ENODEV and uverbs.ErrNoDevice and says which module to load.
func sysErr(call string, err error) error { return cmsock.SysErr(call, err) }

// ResolveAddr resolves address (host:port) on the named network, as
// net.ResolveTCPAddr does: an empty host is the unspecified address (IPv4
// for "rdma4", IPv6 otherwise), as Listen takes it. (Dial and Dialer.Dial
// take an empty host as the local system, as package net's do.)
func ResolveAddr(network, address string) (*Addr, error) {
	ap, err := resolve(context.Background(), network, address, true)
	if err != nil {
		return nil, err
	}
	return &Addr{ap, network}, nil
}

// resolve turns host:port into an address of the network's family.
func resolve(ctx context.Context, network, address string, passive bool) (netip.AddrPort, error) {
	return cmsock.Resolve(ctx, network, address, passive, false)
}
