package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/uverbs"
)

// vmAddr is the address of dummy0 in the VM, which rxe0 serves; rdma_cm
// cannot resolve routes on lo.
var vmAddr = netip.MustParseAddr("10.0.2.15")

var defaultCaps = provider.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// testCtx requires the test device and bounds a test's waits.
func testCtx(t testing.TB) context.Context {
	testenv.RequireDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func destroy(t testing.TB, id *cm.ID) {
	t.Helper()
	if _, err := id.Destroy(); err != nil {
		t.Errorf("destroy: %v", err)
	}
}

// listenSync makes a synchronous listening ID on vmAddr, any port.
func listenSync(t testing.TB, ps cm.PortSpace) (*cm.ID, uint16) {
	t.Helper()
	testenv.RequireDevice(t)
	l, err := cm.CreateID(nil, nil, ps)
	must(t, err)
	t.Cleanup(func() { destroy(t, l) })
	must(t, l.BindAddr(netip.AddrPortFrom(vmAddr, 0)))
	must(t, l.Listen(0))
	return l, l.SrcAddr().Port()
}

// dialSync resolves vmAddr:port on a new synchronous ID, creates its QP and
// connects with param.
func dialSync(ctx context.Context, t testing.TB, ps cm.PortSpace, port uint16, caps provider.QPCaps, param *cm.ConnParam) (*cm.ID, error) {
	t.Helper()
	id, err := cm.CreateID(nil, nil, ps)
	if err != nil {
		return nil, err
	}
	err = id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(vmAddr, port), 2*time.Second)
	if err == nil {
		err = id.ResolveRoute(ctx, 2*time.Second)
	}
	if err == nil {
		err = id.CreateQP(nil, uverbs.QPInitAttr{Cap: caps})
	}
	if err == nil {
		err = id.Connect(ctx, param)
	}
	if err != nil {
		id.Destroy()
		return nil, err
	}
	return id, nil
}

// pair is a connected client and server.
type pair struct {
	client, server *cm.ID
}

// connectPair connects a synchronous client to a synchronous server
// through a new listener, each with a QP of caps. prep runs on the server's
// ID before it accepts (to post receives).
func connectPair(t testing.TB, ps cm.PortSpace, caps provider.QPCaps, prep func(*cm.ID)) *pair {
	t.Helper()
	ctx := testCtx(t)
	l, port := listenSync(t, ps)
	type res struct {
		id  *cm.ID
		err error
	}
	srv := make(chan res, 1)
	go func() {
		id, err := l.GetRequest(ctx)
		if err != nil {
			srv <- res{err: err}
			return
		}
		if err = id.CreateQP(nil, uverbs.QPInitAttr{Cap: caps}); err == nil {
			if prep != nil {
				prep(id)
			}
			err = id.Accept(ctx, nil)
		}
		if err != nil {
			id.Destroy()
			id = nil
		}
		srv <- res{id, err}
	}()
	c, err := dialSync(ctx, t, ps, port, caps, nil)
	s := <-srv
	if err != nil || s.err != nil {
		if c != nil {
			c.Destroy()
		}
		if s.id != nil {
			s.id.Destroy()
		}
		t.Fatalf("connect: client %v, server %v", err, s.err)
	}
	p := &pair{client: c, server: s.id}
	t.Cleanup(func() { p.close(t) })
	return p
}

// close disconnects both sides at once and destroys them.
func (p *pair) close(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, id := range []*cm.ID{p.client, p.server} {
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
	destroy(t, p.client)
	destroy(t, p.server)
}

func vmAddr4(port uint16) netip.AddrPort {
	if port == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(vmAddr, port)
}
