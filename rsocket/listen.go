package rsocket

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
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: network, Err: err}
	}
	src, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, opErr(err)
	}
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		return nil, opErr(sysErr("socket", err))
	}
	fail := func(call string, err error) (*Listener, error) {
		id.Close()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: Addr{src, network}, Err: sysErr(call, err)}
	}
	if err := id.SetReuseAddr(true); err != nil {
		return fail("setsockopt", err)
	}
	if network == "rdma6" {
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
		addr:    Addr{id.SrcAddr(), network},
		network: network,
		cfg: config{
			sendBuf:      lc.SendBuffer,
			recvBuf:      lc.RecvBuffer,
			inline:       lc.Inline,
			queueDepth:   lc.QueueDepth,
			keepAlive:    lc.KeepAlive,
			pollTime:     lc.PollTime,
			waitInKernel: lc.WaitInKernel,
		}.withDefaults(),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept waits for the next connection and returns it as a net.Conn (a
// *Conn; AcceptRsocket returns it as one).
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptRsocket() }

// AcceptRsocket waits for the next connection. A request whose private
// data is not an rsocket's, or that the device cannot serve, is rejected
// and the wait goes on.
func (l *Listener) AcceptRsocket() (*Conn, error) {
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
	ctx, cancel := context.WithTimeout(l.ctx, acceptTimeout)
	defer cancel()
	if err := nid.Accept(ctx, &param); err != nil {
		e.release()
		return nil, err
	}
	return establish(e, &peer, l.network, l.cfg)
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
