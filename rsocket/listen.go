package rsocket

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
	SendBuffer, RecvBuffer int
	Inline                 int
	QueueDepth             int
	KeepAlive              time.Duration
	PollTime               time.Duration
	WaitInKernel           bool // as Dialer's
	// Backlog is the listen queue's length; zero means 128.
	Backlog int
}

// Listener accepts rsocket connections. It is a net.Listener.
type Listener struct {
	l   *cmsock.Listener
	cfg config
}

var _ net.Listener = (*Listener)(nil)

// Listen listens on address with the zero ListenConfig. An address
// without a host listens on every local address of the network's family
// ("rdma" and "rdma6": IPv4 and IPv6); port 0 picks a free one, which Addr
// tells.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens on address; ctx bounds resolving it.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	id, err := cmsock.Listen(ctx, network, address, lc.Backlog, false, func(a netip.AddrPort) net.Addr { return Addr{a, network} })
	if err != nil {
		return nil, err
	}
	return &Listener{
		l: cmsock.NewListener(id, network, Addr{id.SrcAddr(), network}),
		cfg: config{
			sendBuf:      lc.SendBuffer,
			recvBuf:      lc.RecvBuffer,
			inline:       lc.Inline,
			queueDepth:   lc.QueueDepth,
			keepAlive:    lc.KeepAlive,
			pollTime:     lc.PollTime,
			waitInKernel: lc.WaitInKernel,
		}.withDefaults(),
	}, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.l.Addr }

// Accept waits for the next connection and returns it as a net.Conn (a
// *Conn; AcceptRsocket returns it as one).
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptRsocket() }

// AcceptRsocket waits for the next connection. A request whose private
// data is not an rsocket's, or that the device cannot serve, is rejected
// and the wait goes on.
func (l *Listener) AcceptRsocket() (*Conn, error) { return cmsock.Accept(l.l, l.accept) }

// accept answers one connection request (rs_accept).
func (l *Listener) accept(nid *cm.ID) (*Conn, error) {
	req := nid.Event()
	peer, err := parseConnData(req.PrivateData())
	if err != nil {
		nid.Reject(nil)
		return nil, err
	}
	e, err := newEndpoint(nid, l.cfg)
	if err != nil {
		nid.Reject(nil)
		return nil, err
	}
	cd := e.connData()
	b := cd.marshal()
	param := req.Conn
	param.PrivateData = b[:]
	param.FlowControl, param.RNRRetryCount = 1, 7
	param.QPNum, param.SRQ = 0, false
	ctx, cancel := l.l.AcceptContext()
	defer cancel()
	if err := nid.Accept(ctx, &param); err != nil {
		e.release()
		return nil, err
	}
	return establish(e, &peer, l.l.Network, l.cfg)
}

// Close stops listening. Accepts under way return an error matching
// net.ErrClosed; connections already accepted stay open.
func (l *Listener) Close() error { return l.l.Close() }
