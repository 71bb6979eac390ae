package valkeyrdma

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/cmsock"
)

// ListenConfig holds options for listening; its fields apply to the
// connections the listener accepts, as Dialer's do to those it makes.
type ListenConfig struct {
	RecvBuffer  int
	KeepAlive   time.Duration
	PeerTimeout time.Duration
	// WaitInKernel is Dialer's, for the accepted connections.
	WaitInKernel bool
	// Backlog is the listen queue's length; zero means 128.
	Backlog int
}

// Listener accepts connections from Valkey RDMA clients (valkey-cli,
// valkey-benchmark and libvalkey built with RDMA, or this package's
// Dial): it plays valkey-server's part of the transport, so that a server
// written in Go can serve them. It is a net.Listener.
type Listener struct {
	l   *cmsock.Listener
	cfg config
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
	id, err := cmsock.Listen(ctx, network, address, lc.Backlog, true, func(a netip.AddrPort) net.Addr { return Addr{a} })
	if err != nil {
		return nil, err
	}
	return &Listener{
		l:   cmsock.NewListener(id, network, Addr{id.SrcAddr()}),
		cfg: config{recvBuf: lc.RecvBuffer, keepAlive: lc.KeepAlive, peerTimeout: lc.PeerTimeout, waitInKernel: lc.WaitInKernel}.withDefaults(),
	}, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.l.Addr }

// Accept waits for the next connection and returns it (a *Conn). A
// request the device cannot serve is rejected and the wait goes on.
func (l *Listener) Accept() (net.Conn, error) { return cmsock.Accept(l.l, l.accept) }

// accept answers one connection request (rdmaHandleConnect).
func (l *Listener) accept(nid *cm.ID) (net.Conn, error) {
	c, err := newConn(nid, l.cfg)
	if err != nil {
		nid.Reject(nil)
		return nil, err
	}
	param := cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	ctx, cancel := l.l.AcceptContext()
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

// Close stops listening. Accepts under way return an error matching
// net.ErrClosed; connections already accepted stay open.
func (l *Listener) Close() error { return l.l.Close() }
