package rdmatest

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"runtime/debug"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/perftable"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// VMAddr is the address of dummy0 in the VM, which rxe0 serves; rdma_cm
// cannot resolve routes on lo.
var VMAddr = netip.MustParseAddr("10.0.2.15")

// VMAddrPort is VMAddr with port, or no address at all for port 0.
func VMAddrPort(port uint16) netip.AddrPort {
	if port == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(VMAddr, port)
}

// Caps are the QP capabilities of an rdma_cm pair unless a test needs
// others.
var Caps = qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// Context requires the test device and returns a context that bounds the
// test's waits: it ends after 60 s or with the test.
func Context(t testing.TB) context.Context {
	t.Helper()
	testenv.RequireDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Destroy destroys id and reports an error as a failure.
func Destroy(t testing.TB, id *cm.ID) {
	t.Helper()
	if err := id.Close(); err != nil {
		t.Errorf("destroy: %v", err)
	}
}

// Alloc returns n bytes of zeroed, page-aligned memory outside the Go heap,
// freed when the test ends.
func Alloc(t testing.TB, n int) []byte {
	t.Helper()
	m, err := mr.Alloc(n)
	Must(t, err)
	t.Cleanup(func() { m.Close() })
	return m.Bytes()
}

// Reg registers buf with one of an ID's Reg calls (id.RegMsgs, RegRead,
// RegWrite) and deregisters it with cm.DeregMR when the test ends.
func Reg(t testing.TB, reg func([]byte) (*uverbs.MR, error), buf []byte) *uverbs.MR {
	t.Helper()
	m, err := reg(buf)
	Must(t, err)
	t.Cleanup(func() { Check(t, "dereg", cm.DeregMR(m)) })
	return m
}

// NewChannel makes an event channel, closed when the test ends.
func NewChannel(t testing.TB) *cm.EventChannel {
	t.Helper()
	ch, err := cm.NewEventChannel()
	Must(t, err)
	t.Cleanup(func() { ch.Close() })
	return ch
}

// NewID makes an ID on ch (nil: a synchronous one) with the program's
// value userData, destroyed when the test ends.
func NewID(t testing.TB, ch *cm.EventChannel, userData any, ps cm.PortSpace) *cm.ID {
	t.Helper()
	id, err := cm.CreateID(ch, userData, ps)
	Must(t, err)
	t.Cleanup(func() { Destroy(t, id) })
	return id
}

// CreateAH makes an address handle on id's PD for attr (a UD event's
// peer), closed when the test ends.
func CreateAH(t testing.TB, id *cm.ID, attr qp.AHAttr) *uverbs.AH {
	t.Helper()
	ah, err := id.CreateAH(attr)
	Must(t, err)
	t.Cleanup(func() { ah.Close() })
	return ah
}

// Msgs allocates n bytes (Alloc) and registers them for id's sends and
// receives (id.RegMsgs, Reg).
func Msgs(t testing.TB, id *cm.ID, n int) ([]byte, *uverbs.MR) {
	t.Helper()
	buf := Alloc(t, n)
	return buf, Reg(t, id.RegMsgs, buf)
}

// Listen makes a synchronous listening ID of port space ps on VMAddr, any
// port, destroyed when the test ends, and returns it with its port.
func Listen(t testing.TB, ps cm.PortSpace) (*cm.ID, uint16) {
	t.Helper()
	testenv.RequireDevice(t)
	l, err := cm.CreateID(nil, nil, ps)
	Must(t, err)
	t.Cleanup(func() { Destroy(t, l) })
	Must(t, l.BindAddr(netip.AddrPortFrom(VMAddr, 0)))
	Must(t, l.Listen(0))
	return l, l.SrcAddr().Port()
}

// Dial resolves VMAddr:port on a new synchronous ID of port space ps,
// creates its QP with caps and connects with param. On an error it
// destroys the ID; otherwise the ID is the caller's to destroy.
func Dial(ctx context.Context, t testing.TB, ps cm.PortSpace, port uint16, caps qp.Caps, param *cm.ConnParam) (*cm.ID, error) {
	t.Helper()
	id, err := cm.CreateID(nil, nil, ps)
	if err != nil {
		return nil, err
	}
	err = id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(VMAddr, port), 2*time.Second)
	if err == nil {
		err = id.ResolveRoute(ctx, 2*time.Second)
	}
	if err == nil {
		err = id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps})
	}
	if err == nil {
		err = id.Connect(ctx, param)
	}
	if err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

// ServeRequest is a test's server side for one connection, in a
// goroutine: it takes the next connection request on the synchronous
// listener l and runs serve on the new ID. The channel gets GetRequest's
// error, or serve's outcome.
func ServeRequest(ctx context.Context, l *cm.ID, serve func(id *cm.ID) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		id, err := l.GetRequest(ctx)
		if err != nil {
			done <- err
			return
		}
		done <- serve(id)
	}()
	return done
}

// Accepted is what AcceptAsync's server side got: the accepted ID, or the
// error that ended it.
type Accepted struct {
	ID  *cm.ID
	Err error
}

// AcceptAsync is a test's server side, in a goroutine: it takes the next
// connection request on the synchronous listener l, creates the new ID's
// QP with caps, runs prep (if not nil) on the ID, to post receives, and
// accepts. The channel gets the outcome; an ID that failed is closed and
// not passed on.
func AcceptAsync(ctx context.Context, l *cm.ID, caps qp.Caps, prep func(*cm.ID)) <-chan Accepted {
	srv := make(chan Accepted, 1)
	go func() {
		id, err := l.GetRequest(ctx)
		if err != nil {
			srv <- Accepted{Err: err}
			return
		}
		if err = id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}); err == nil {
			if prep != nil {
				prep(id)
			}
			err = id.Accept(ctx, nil)
		}
		if err != nil {
			id.Close()
			id = nil
		}
		srv <- Accepted{id, err}
	}()
	return srv
}

// CMPair is a synchronous client ID connected to a synchronous server ID.
type CMPair struct {
	Client, Server *cm.ID
}

// ConnectCM connects a client to a server through a new listener (Listen,
// Dial), each with a QP of caps; prep, if not nil, runs on the server's ID
// before it accepts (to post receives). When the test ends both sides
// disconnect at once and are destroyed.
func ConnectCM(t testing.TB, ps cm.PortSpace, caps qp.Caps, prep func(*cm.ID)) *CMPair {
	t.Helper()
	ctx := Context(t)
	l, port := Listen(t, ps)
	srv := AcceptAsync(ctx, l, caps, prep)
	c, err := Dial(ctx, t, ps, port, caps, nil)
	s := <-srv
	if err != nil || s.Err != nil {
		if c != nil {
			c.Close()
		}
		if s.ID != nil {
			s.ID.Close()
		}
		t.Fatalf("connect: client %v, server %v", err, s.Err)
	}
	p := &CMPair{Client: c, Server: s.ID}
	t.Cleanup(func() { p.close(t) })
	return p
}

// close disconnects both sides at once and destroys them.
func (p *CMPair) close(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, id := range []*cm.ID{p.Client, p.Server} {
		go func() {
			err := id.Disconnect(ctx)
			if errors.Is(err, cm.ErrClosed) {
				err = nil
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("disconnect: %v", err)
		}
	}
	Destroy(t, p.Client)
	Destroy(t, p.Server)
}

// WaitCMListening waits until an rdma_cm ID listens on port, as the RDMA
// netlink resource table shows it (rdma res show cm_id), and fails the
// test after 10 s: a server started in a goroutine or another process
// takes no connection before then.
func WaitCMListening(t testing.TB, port int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !perftable.CMListening(port); {
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on rdma_cm port %d after 10 s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WithdrawRequest sends a connection request to the listener on port and
// withdraws it before any answer: its ID is destroyed while connecting,
// so the kernel sends the listener's side a reject. A listener that takes
// the request afterwards finds it can no longer set up its QP for it.
// param carries the private data the listener's protocol wants.
func WithdrawRequest(t testing.TB, port uint16, param *cm.ConnParam) {
	t.Helper()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	ctx := Context(t)
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(VMAddr, port), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	caps := qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	if err := id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}); err != nil {
		t.Fatal(err)
	}
	// Nobody accepts yet, so the connect can only time out.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := id.Connect(short, param); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connecting to a listener that does not accept: %v, want the context's deadline", err)
	}
}

// ConnectPair runs accept in a goroutine and dial here, and returns once
// both gave a connection; both close when the test ends.
func ConnectPair[C io.Closer](t testing.TB, accept func() (C, error), dial func(ctx context.Context) (C, error)) (client, server C) {
	t.Helper()
	type result struct {
		c   C
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := accept()
		accepted <- result{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := dial(ctx)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	r := <-accepted
	if r.err != nil {
		t.Fatalf("accept: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return client, r.c
}

// AcceptAfterWithdrawn checks a listener on port against a withdrawn
// request (WithdrawRequest, with param): connect, which dials and accepts
// one connection, must work after it, and nothing made for the withdrawn
// request may stay. A first connection keeps the device's context open,
// so that what it would leave stays listed; collections stop meanwhile,
// since a CQ dropped without Close would be released by its cleanup and
// the leak hidden.
func AcceptAfterWithdrawn(t testing.TB, port uint16, param *cm.ConnParam, connect func()) {
	t.Helper()
	connect()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	cqs := ResCount(t, "cq")
	WithdrawRequest(t, port, param)
	connect()
	if n := ResCount(t, "cq"); n != cqs+2 {
		t.Errorf("%d CQs after one more connection, want %d: the withdrawn request's were not released", n, cqs+2)
	}
}
