package valkeyrdma

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

// Dialer holds options for connecting. The zero Dialer connects as
// Valkey's own client does: a 1 MiB receive buffer, a keepalive every 3 s.
type Dialer struct {
	// Timeout bounds the whole connect; zero means no bound beyond the
	// context's and rdma_cm's own retries.
	Timeout time.Duration
	// LocalAddr is the address to connect from; nil picks one.
	LocalAddr *Addr
	// RecvBuffer is the size of the buffer the peer writes into
	// (rdma-rx-size of valkey-server); zero means 1 MiB. It is kept
	// within MinBuffer and MaxBuffer.
	RecvBuffer int
	// KeepAlive is the interval of the keepalive messages, whose sends
	// find a peer whose device stopped answering; zero means 3 s, as
	// Valkey's, negative means none.
	KeepAlive time.Duration
	// PeerTimeout, if positive, ends the connection with ETIMEDOUT when
	// a peer that sends keepalives (valkey-server does) has sent nothing
	// for that long. A server busy with a slow command sends none
	// meanwhile, so it is off by default; a dead peer's device is found
	// by the keepalive's sends in any case.
	PeerTimeout time.Duration
	// WaitInKernel makes a Read or Write that must wait for the peer
	// sleep in the kernel on its own thread, as Valkey's C client does
	// (uverbs.CompChannel.GetEventDirect), instead of parking while a
	// goroutine of the connection waits in the runtime's poller: a reply
	// then wakes one thread, not two and the runtime's monitor. One
	// client's 1 KiB GETs ran 19% faster so (docs/valkey.md). The price
	// is that the waiting goroutine keeps its thread and P: other
	// goroutines get that P when the runtime preempts the sleep (after
	// 10 ms, as it preempts any goroutine), or between sleeps of a
	// millisecond while a deadline is pending. Deadlines, Close and the
	// peer's disconnect end a sleep at once. Set it for a client with a
	// goroutine per connection and GOMAXPROCS above the number of
	// connections waiting at once; leave it off for servers of many
	// connections.
	WaitInKernel bool
}

func (d *Dialer) config() config {
	return config{recvBuf: d.RecvBuffer, keepAlive: d.KeepAlive, peerTimeout: d.PeerTimeout, waitInKernel: d.WaitInKernel}.withDefaults()
}

// Dial connects to the Valkey RDMA listener at address (host:port) with the
// zero Dialer. See Dialer.DialContext for the networks.
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context that bounds the connect.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(ctx, network, address)
}

// Dial connects to address on the named network.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to the Valkey RDMA listener at address (host:port,
// as valkey-server's rdma-bind and rdma-port). The networks are "rdma",
// "rdma4" and "rdma6", and "tcp", "tcp4" and "tcp6" with the same
// meanings, so that a client library's dialer hook, which is handed
// "tcp", can call it unchanged. The result is a *Conn.
//
// ctx bounds the address and route resolution and the handshake; once
// connected, it no longer matters. Errors are *net.OpError; as package
// net's, a port nobody listens on matches syscall.ECONNREFUSED, a peer
// that cannot be reached ENETUNREACH or EHOSTUNREACH, a host without RDMA
// ENODEV (and uverbs.ErrNoDevice), and a connect that outlived its time
// os.ErrDeadlineExceeded.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	opErr := func(raddr net.Addr, err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
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
	raddr := Addr{dst}
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, opErr(raddr, sysErr("socket", err))
	}
	c, err := d.dial(ctx, id, dst)
	if err != nil {
		id.Close()
		return nil, opErr(raddr, err)
	}
	return c, nil
}

// resolveTimeout is each rdma_cm resolution's own timeout.
const resolveTimeout = 2 * time.Second

func (d *Dialer) dial(ctx context.Context, id *cm.ID, dst netip.AddrPort) (*Conn, error) {
	var src netip.AddrPort
	if d.LocalAddr != nil {
		src = d.LocalAddr.AddrPort
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
	c, err := newConn(id, d.config())
	if err != nil {
		return nil, sysErr("connect", err)
	}
	// As src/rdma.c's rdmaConnect: one outstanding read each way (none
	// is made), and seven retries of each kind.
	param := cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if err := id.Connect(ctx, &param); err != nil {
		c.release()
		return nil, sysErr("connect", err)
	}
	if err := c.start(); err != nil {
		c.release()
		return nil, sysErr("connect", err)
	}
	return wrap(c), nil
}

// resolve turns host:port into an address of the network's family: the
// rdma networks, and the tcp ones meaning the same.
func resolve(ctx context.Context, network, address string, passive bool) (netip.AddrPort, error) {
	return cmsock.Resolve(ctx, network, address, passive, true)
}

// sysErr gives an rdma_cm failure the shape package net gives a system
// call's (cmsock.SysErr); ErrProtocol stays as it is.
func sysErr(call string, err error) error { return cmsock.SysErr(call, err, ErrProtocol) }
