package cm_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// nextEvent reads the next event of ch and checks its type and ID.
func nextEvent(ctx context.Context, t testing.TB, ch *cm.EventChannel, want cm.EventType, id *cm.ID) *cm.Event {
	t.Helper()
	ev, err := ch.GetEvent(ctx)
	rdmatest.Must(t, err)
	if ev.Type != want || (id != nil && ev.ID != id) {
		t.Fatalf("event %v for %v, want %v for %v", ev, ev.ID.UserData(), want, id.UserData())
	}
	if err := ev.Err(); err != nil {
		t.Fatalf("event %v: %v", ev, err)
	}
	rdmatest.Must(t, ev.Ack())
	return ev
}

// TestDeviceAsync drives two connections through one event channel as
// cmatose does: every operation returns at once and its outcome is an
// event. The second client has no QP on its ID; it moves its own QP with
// InitQPAttr and completes the connection with Establish.
func TestDeviceAsync(t *testing.T) {
	ctx := rdmatest.Context(t)
	_, _ = rdmatest.Listen(t, cm.PSTCP) // RequireDevice
	ch := rdmatest.NewChannel(t)

	listen := rdmatest.NewID(t, ch, "listener", cm.PSTCP)
	rdmatest.Must(t, listen.BindAddr(netip.AddrPortFrom(rdmatest.VMAddr, 0)))
	rdmatest.Must(t, listen.Listen(4))
	dst := netip.AddrPortFrom(rdmatest.VMAddr, listen.SrcAddr().Port())

	client := rdmatest.NewID(t, ch, "client", cm.PSTCP)
	rdmatest.Must(t, client.ResolveAddr(ctx, netip.AddrPort{}, dst, 0))
	nextEvent(ctx, t, ch, cm.EventAddrResolved, client)
	if client.Verbs() == nil || client.PortNum() != 1 {
		t.Fatalf("no device after ADDR_RESOLVED")
	}
	rdmatest.Must(t, client.ResolveRoute(ctx, 0))
	nextEvent(ctx, t, ch, cm.EventRouteResolved, client)
	rdmatest.Must(t, client.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("async hello")
	rdmatest.Must(t, client.Connect(ctx, &p))

	req := nextEvent(ctx, t, ch, cm.EventConnectRequest, nil)
	if req.ListenID != listen || req.ID.UserData() != "listener" || !strings.HasPrefix(string(req.Conn.PrivateData), "async hello") {
		t.Fatalf("request %v listen %v private %q", req, req.ListenID, req.Conn.PrivateData)
	}
	server := req.ID
	defer rdmatest.Destroy(t, server)
	// The accepted ID starts with the listener's user data, as in
	// librdmacm; the program gives it its connection's own, which its
	// events carry from then on.
	server.SetUserData("connection 1")
	if listen.UserData() != "listener" {
		t.Errorf("the listener's user data changed to %v", listen.UserData())
	}
	if server.Channel() != ch {
		t.Fatal("the request's ID is not on the listener's channel")
	}
	rdmatest.Must(t, server.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	ap := cm.DefaultConnParam()
	ap.PrivateData = []byte("welcome")
	rdmatest.Must(t, server.Accept(ctx, &ap))

	// Both sides' ESTABLISHED, in either order.
	for range 2 {
		ev, err := ch.GetEvent(ctx)
		rdmatest.Must(t, err)
		if ev.Type != cm.EventEstablished {
			t.Fatalf("event %v, want ESTABLISHED", ev)
		}
		if ev.ID == client && !strings.HasPrefix(string(ev.Conn.PrivateData), "welcome") {
			t.Errorf("accept private data %q", ev.Conn.PrivateData)
		}
		if ev.ID == server && ev.ID.UserData() != "connection 1" {
			t.Errorf("the accepted ID's ESTABLISHED carries user data %v", ev.ID.UserData())
		}
		ev.Ack()
	}
	if client.QP().State() != qp.StateRTS || server.QP().State() != qp.StateRTS {
		t.Fatalf("QPs in %v and %v", client.QP().State(), server.QP().State())
	}

	// A second client without a QP on its ID.
	c2 := rdmatest.NewID(t, ch, "bare client", cm.PSTCP)
	rdmatest.Must(t, c2.ResolveAddr(ctx, netip.AddrPort{}, dst, 0))
	nextEvent(ctx, t, ch, cm.EventAddrResolved, c2)
	rdmatest.Must(t, c2.ResolveRoute(ctx, 0))
	nextEvent(ctx, t, ch, cm.EventRouteResolved, c2)
	cq, err := c2.Verbs().CreateCQ(uverbs.CQAttr{CQE: 4})
	rdmatest.Must(t, err)
	defer cq.Close()
	own, err := c2.PD().CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: rdmatest.Caps})
	rdmatest.Must(t, err)
	defer own.Close()
	for _, s := range []qp.State{qp.StateInit} {
		a, m, err := c2.InitQPAttr(s)
		rdmatest.Must(t, err)
		rdmatest.Must(t, own.Modify(a, m))
	}
	p2 := cm.DefaultConnParam()
	p2.QPNum = own.Num()
	rdmatest.Must(t, c2.Connect(ctx, &p2))
	req2 := nextEvent(ctx, t, ch, cm.EventConnectRequest, nil)
	s2 := req2.ID
	defer rdmatest.Destroy(t, s2)
	rdmatest.Must(t, s2.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	rdmatest.Must(t, s2.Accept(ctx, nil))
	nextEvent(ctx, t, ch, cm.EventConnectResponse, c2)
	for _, s := range []qp.State{qp.StateRTR, qp.StateRTS} {
		a, m, err := c2.InitQPAttr(s)
		rdmatest.Must(t, err)
		rdmatest.Must(t, own.Modify(a, m))
	}
	rdmatest.Must(t, c2.Establish())
	nextEvent(ctx, t, ch, cm.EventEstablished, s2)

	// Traffic on the program's own QP.
	buf, sm := rdmatest.Msgs(t, s2, 4096)
	rdmatest.Must(t, s2.PostRecv(1, buf[:64], sm))
	cm2 := rdmatest.Reg(t, c2.RegMsgs, buf[1024:2048])
	copy(buf[1024:], "own QP")
	_, err = own.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{cm2.SGE(0, 6)}}})
	rdmatest.Must(t, err)
	wc, err := s2.GetRecvComp(ctx)
	wantComp(t, "recv from own QP", wc, err, 1, wr.WCRecv)

	// Disconnect from the client side; the server answers its
	// DISCONNECTED with its own disconnect; then both IDs leave timewait.
	rdmatest.Must(t, client.Disconnect(ctx))
	rdmatest.Must(t, c2.Disconnect(ctx))
	exits := 0
	disc := map[*cm.ID]bool{}
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(disc) < 4 || exits < 4 {
		ev, err := ch.GetEvent(deadline)
		if err != nil {
			t.Fatalf("after %d DISCONNECTED and %d TIMEWAIT_EXIT: %v", len(disc), exits, err)
		}
		switch ev.Type {
		case cm.EventDisconnected:
			disc[ev.ID] = true
			if ev.ID == server || ev.ID == s2 {
				rdmatest.Must(t, ev.ID.Disconnect(ctx))
			}
		case cm.EventTimewaitExit:
			exits++
		default:
			t.Fatalf("unexpected %v", ev)
		}
		ev.Ack()
	}
	if listen.EventsReported() != 2 || listen.EventsAcked() != 2 {
		t.Errorf("listener: %d events reported, %d acked", listen.EventsReported(), listen.EventsAcked())
	}
}

// TestDeviceMigrate moves an ID between channels and makes it synchronous.
func TestDeviceMigrate(t *testing.T) {
	ctx := rdmatest.Context(t)
	_, port := rdmatest.Listen(t, cm.PSTCP)
	ch1 := rdmatest.NewChannel(t)
	ch2 := rdmatest.NewChannel(t)
	id := rdmatest.NewID(t, ch1, nil, cm.PSTCP)
	rdmatest.Must(t, id.ResolveAddr(ctx, netip.AddrPort{}, rdmatest.VMAddrPort(port), 0))
	// The event is queued on ch1 and moves with the ID.
	time.Sleep(50 * time.Millisecond)
	rdmatest.Must(t, id.Migrate(ch2))
	nextEvent(ctx, t, ch2, cm.EventAddrResolved, id)
	rdmatest.Must(t, id.Migrate(nil))
	if id.Channel() == ch1 || id.Channel() == ch2 {
		t.Fatal("not on a channel of its own")
	}
	rdmatest.Must(t, id.ResolveRoute(ctx, 0)) // synchronous now
	if ev := id.Event(); ev == nil || ev.Type != cm.EventRouteResolved {
		t.Fatalf("event %v", ev)
	}
}
