package valkeyrdma

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/rdmago/rdma/cm"
)

// ListenConfig holds options for listening; its fields apply to the
// connections the listener accepts, as Dialer's do to those it makes.
type ListenConfig struct {
	RecvBuffer  int
	KeepAlive   time.Duration
	PeerTimeout time.Duration
	// Backlog is the listen queue's length; zero means 128.
	Backlog int
}

// Listener accepts connections from Valkey RDMA clients (valkey-cli,
// valkey-benchmark and libvalkey built with RDMA, or this package's
// Dial): it plays valkey-server's part of the transport, so that a server
// written in Go can serve them. It is a net.Listener.
type Listener struct {
	id      *cm.ID
	addr    Addr
	network string
	cfg     config
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex // Accepts take turns on the ID
	closeMu sync.Mutex
	closed  bool
}

var _ net.Listener = (*Listener)(nil)

// Listen listens on address (host:port) with the zero ListenConfig. The
// networks are Dial's; an address without a host listens on every local
// address of the network's family, and port 0 picks a free port, which
// Addr tells.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens on address; ctx bounds resolving it.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	src, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: Addr{src}, Err: sysErr("socket", err)}
	}
	fail := func(call string, err error) (*Listener, error) {
		id.Close()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: Addr{src}, Err: sysErr(call, err)}
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
	backlog := lc.Backlog
	if backlog <= 0 {
		backlog = 128
	}
	if err := id.Listen(backlog); err != nil {
		return fail("listen", err)
	}
	l := &Listener{
		id:      id,
		addr:    Addr{id.SrcAddr()},
		network: network,
		cfg:     config{recvBuf: lc.RecvBuffer, keepAlive: lc.KeepAlive, peerTimeout: lc.PeerTimeout}.withDefaults(),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept waits for the next connection and returns it (a *Conn). A
// request the device cannot serve is rejected and the wait goes on.
func (l *Listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		nid, err := l.id.GetRequest(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			} else {
				err = sysErr("accept", err)
			}
			return nil, &net.OpError{Op: "accept", Net: l.network, Addr: l.addr, Err: err}
		}
		c, err := l.accept(nid)
		if err != nil {
			nid.Close()
			continue
		}
		return c, nil
	}
}

// accept answers one connection request (rdmaHandleConnect).
func (l *Listener) accept(nid *cm.ID) (*Conn, error) {
	c, err := newConn(nid, l.cfg)
	if err != nil {
		nid.Reject(nil)
		return nil, err
	}
	param := cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	ctx, cancel := context.WithTimeout(l.ctx, acceptTimeout)
	defer cancel()
	if err := nid.Accept(ctx, &param); err != nil {
		c.release()
		return nil, err
	}
	if err := c.start(); err != nil {
		c.release()
		return nil, err
	}
	return wrap(c), nil
}

// acceptTimeout bounds the wait for a connection to be established after
// it was accepted: a peer that went away meanwhile must not hold up the
// listener.
const acceptTimeout = 10 * time.Second

// Close stops listening. Accepts under way return an error matching
// net.ErrClosed; connections already accepted stay open.
func (l *Listener) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return &net.OpError{Op: "close", Net: l.network, Addr: l.addr, Err: net.ErrClosed}
	}
	l.closed = true
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id.Close()
}
