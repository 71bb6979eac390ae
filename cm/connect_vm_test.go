package cm_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

func TestDeviceSyncConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen, port := rdmatest.Listen(t, cm.PSTCP)
	t.Logf("listening on %v, device %v port %d", listen.SrcAddr(), listen.Verbs().Device().Name, listen.PortNum())
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	done := rdmatest.ServeRequest(ctx, listen, func(id *cm.ID) error {
		defer id.Close()
		t.Logf("request: %v private %q", id.Event(), id.Event().PrivateData())
		if err := id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}); err != nil {
			return err
		}
		if err := id.Accept(ctx, nil); err != nil {
			return err
		}
		t.Logf("server established, QP %d state %v", id.QP().Num(), id.QP().State())
		return id.Disconnect(ctx)
	})
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(rdmatest.VMAddr, port), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("route %+v", id.Route())
	if err := id.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}); err != nil {
		t.Fatal(err)
	}
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("hello")
	if err := id.Connect(ctx, &p); err != nil {
		t.Fatal(err)
	}
	t.Logf("client established, QP %d state %v", id.QP().Num(), id.QP().State())
	if err := id.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeviceReject: the server rejects with private data; the client's
// Connect fails with ECONNREFUSED, and its REJECTED event carries the data
// and the reason.
func TestDeviceReject(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSTCP)
	srv := rdmatest.ServeRequest(ctx, l, func(id *cm.ID) error {
		if pd := id.Event().PrivateData(); !strings.HasPrefix(string(pd), "let me in") {
			t.Errorf("request private data %q", pd)
		}
		err := id.Reject([]byte("go away"))
		rdmatest.Destroy(t, id)
		return err
	})
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("let me in")
	id := rdmatest.NewID(t, nil, nil, cm.PSTCP)
	rdmatest.Must(t, id.ResolveAddr(ctx, netip.AddrPort{}, rdmatest.VMAddrPort(port), 0))
	rdmatest.Must(t, id.ResolveRoute(ctx, 0))
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	err := id.Connect(ctx, &p)
	rdmatest.Must(t, <-srv)
	wantErrno(t, "connect", err, unix.ECONNREFUSED)
	var ce *cm.Error
	if !errors.As(err, &ce) || ce.Event != cm.EventRejected || ce.Status != 28 {
		t.Fatalf("connect: %#v, want REJECTED with status 28 (consumer defined)", err)
	}
	ev := id.Event()
	if ev == nil || ev.Type != cm.EventRejected || !strings.HasPrefix(string(ev.PrivateData()), "go away") {
		t.Fatalf("reject event %v, private data %q", ev, ev.PrivateData())
	}
	wantErrno(t, "event error", ev.Err(), unix.ECONNREFUSED)
	if s := id.QP().State(); s.String() != "ERR" {
		t.Errorf("QP in %v after the reject, want ERR", s)
	}
}

// TestDeviceConnectNoListener connects to a port nobody listens on: the
// peer's kernel rejects it at once.
func TestDeviceConnectNoListener(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSTCP)
	rdmatest.Destroy(t, l)
	start := time.Now()
	id, err := rdmatest.Dial(ctx, t, cm.PSTCP, port, rdmatest.Caps, nil)
	if err == nil {
		rdmatest.Destroy(t, id)
		t.Fatal("connected to a port nobody listens on")
	}
	wantErrno(t, "connect", err, unix.ECONNREFUSED)
	var ce *cm.Error
	if errors.As(err, &ce) {
		t.Logf("%v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %v", d)
	}
}

// TestDeviceDisconnectDuringTraffic: the server disconnects while the
// client streams sends. The client's completion wait learns of it from the
// rdma_cm channel and its outstanding work comes back flushed; the
// server's posted receives come back flushed too; nothing hangs.
func TestDeviceDisconnectDuringTraffic(t *testing.T) {
	ctx := rdmatest.Context(t)
	const nrecv = 16
	sbuf := rdmatest.Alloc(t, nrecv*64)
	p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
		m := rdmatest.Reg(t, s.RegMsgs, sbuf)
		for i := range nrecv {
			rdmatest.Must(t, s.PostRecv(uint64(i), sbuf[i*64:i*64+64], m))
		}
	})
	c, s := p.Client, p.Server
	smsg, err := s.RegMsgs(make([]byte, 1)) // a region to repost into
	rdmatest.Must(t, err)
	defer cm.DeregMR(smsg)

	start := time.Now()
	clientDone := make(chan error, 1)
	go func() {
		cbuf := make([]byte, 4096)
		m, err := c.RegMsgs(cbuf)
		if err != nil {
			clientDone <- err
			return
		}
		defer cm.DeregMR(m)
		for i := uint64(0); ; i++ {
			// Several in flight at once.
			for j := range uint64(4) {
				if err := c.PostSend(i*4+j, cbuf[:32], m, wr.Signaled); err != nil {
					clientDone <- fmt.Errorf("post: %w", err)
					return
				}
			}
			for range 4 {
				if _, err := c.GetSendComp(ctx); err != nil {
					clientDone <- err
					return
				}
			}
		}
	}()

	// The server takes some messages, reposting, then disconnects.
	got := 0
	for got < 8 {
		wc, err := s.GetRecvComp(ctx)
		rdmatest.Must(t, err)
		got++
		rdmatest.Must(t, s.PostRecv(wc.ID, sbuf[wc.ID*64:wc.ID*64+64], rdmatest.Reg(t, s.RegMsgs, sbuf)))
	}
	srvDisc := make(chan error, 1)
	go func() { srvDisc <- s.Disconnect(ctx) }()

	err = <-clientDone
	var ce *wr.CompletionError
	switch {
	case errors.As(err, &ce):
		if ce.Status != wr.WRFlushErr {
			t.Errorf("client's send completed with %v, want a flush", ce.Status)
		}
	case errors.Is(err, cm.ErrClosed), err == nil:
		t.Fatalf("client: %v", err)
	default:
		// The watcher may have flushed everything between a post and its
		// wait: then the next post finds the connection gone.
		t.Logf("client ended with %v", err)
	}
	// The rest of the client's sends come back flushed, then the wait
	// says the connection is gone.
	for {
		wc, err := c.GetSendComp(ctx)
		if errors.As(err, &ce) && wc.Status == wr.WRFlushErr {
			continue
		}
		wantErrno(t, "client wait after the flush", err, 107 /* ENOTCONN */)
		break
	}
	rdmatest.Must(t, c.Disconnect(ctx))
	rdmatest.Must(t, <-srvDisc)
	// The server's receives come back: the messages that arrived before
	// the disconnect, then the rest flushed. Every receive posted is
	// accounted for. How many are flushed depends on how far the client
	// got before the disconnect took effect: on a loaded machine it has
	// filled all of them, and then none is.
	flushed, late := 0, 0
	for {
		wc, err := s.GetRecvComp(ctx)
		if err != nil && errors.As(err, &ce) && wc.Status == wr.WRFlushErr {
			flushed++
			continue
		}
		if err == nil {
			late++ // a message that arrived before the disconnect
			continue
		}
		wantErrno(t, "server wait after the flush", err, 107)
		break
	}
	if posted := nrecv + got; got+late+flushed != posted {
		t.Errorf("server: %d receives posted, %d taken, %d arrived late, %d flushed; %d unaccounted for",
			posted, got, late, flushed, posted-got-late-flushed)
	}
	t.Logf("server: %d messages arrived late, %d receives flushed; the whole dance took %v", late, flushed, time.Since(start))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestDeviceCycles connects and disconnects 100 times and checks that no
// file descriptor and no kernel object is left behind.
func TestDeviceCycles(t *testing.T) {
	testenv.RequireDevice(t)
	cycle := func(i int) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, nil)
			buf := rdmatest.Alloc(t, 4096)
			m := rdmatest.Reg(t, p.Server.RegMsgs, buf)
			rdmatest.Must(t, p.Server.PostRecv(1, buf[:64], m))
			rdmatest.Must(t, p.Client.PostSend(2, []byte("cycle"), nil, wr.Signaled|wr.Inline))
			_, err := p.Client.GetSendComp(rdmatest.Context(t))
			rdmatest.Must(t, err)
			_, err = p.Server.GetRecvComp(rdmatest.Context(t))
			rdmatest.Must(t, err)
		})
	}
	cycle(0)
	// The device context the IDs share is kept for the process; close it
	// so that the counts see only what the cycles leave.
	cm.CloseIdleDevices()
	fds, res := fdCount(), rdmaRes(t)
	if res != "" {
		t.Fatalf("kernel objects left after one cycle:\n%s", res)
	}
	for i := 1; i < 100; i++ {
		cycle(i)
		if t.Failed() {
			return
		}
	}
	cm.CloseIdleDevices()
	if n := fdCount(); n != fds {
		t.Errorf("%d descriptors open after 100 cycles, %d after the first:\n%s", n, fds, fdList())
	}
	if res := rdmaRes(t); res != "" {
		t.Errorf("kernel objects left after 100 cycles:\n%s", res)
	}
}

// rdmaRes counts this program's rdma_cm IDs, QPs, CQs, MRs and PDs.
func rdmaRes(t testing.TB) string {
	t.Helper()
	if !testenv.InVM() {
		return ""
	}
	return strings.TrimSpace(rdmatest.LeftBehind(resKinds...))
}
