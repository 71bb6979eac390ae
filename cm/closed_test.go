package cm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

func TestErrClosedIsNetErrClosed(t *testing.T) {
	if !errors.Is(ErrClosed, net.ErrClosed) {
		t.Error("ErrClosed does not match net.ErrClosed")
	}
	if err := wrapErr("x", ErrClosed); err != ErrClosed {
		t.Errorf("wrapErr changed ErrClosed: %v", err)
	}
}

// TestClosedID calls every method of a destroyed ID that can fail and
// checks that each returns an error matching net.ErrClosed without a
// command reaching the kernel.
func TestClosedID(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	ctx := context.Background()
	for _, sync := range []bool{false, true} {
		var ch *EventChannel
		if !sync {
			ch = k.channel()
		}
		id, err := CreateID(ch, nil, PSTCP)
		mustT(t, err)
		mustT(t, id.BindAddr(vmTestAddr))
		if _, err := id.destroy(); err != nil {
			t.Fatal(err)
		}
		k.mu.Lock()
		before := len(k.cmds)
		k.mu.Unlock()
		buf := make([]byte, 64)
		sgl := []wr.SGE{{Addr: 1, Length: 1}}
		addr := netip.MustParseAddr("239.1.1.1")
		calls := map[string]func() error{
			"BindAddr":      func() error { return id.BindAddr(vmTestAddr) },
			"ResolveAddr":   func() error { return id.ResolveAddr(ctx, netip.AddrPort{}, vmTestAddr, 0) },
			"ResolveRoute":  func() error { return id.ResolveRoute(ctx, 0) },
			"Listen":        func() error { return id.Listen(0) },
			"Connect":       func() error { return id.Connect(ctx, nil) },
			"Accept":        func() error { return id.Accept(ctx, nil) },
			"Reject":        func() error { return id.Reject(nil) },
			"RejectECE":     func() error { return id.RejectECE(nil) },
			"Establish":     func() error { return id.Establish() },
			"Notify":        func() error { return id.Notify(uverbs.EventCommEst) },
			"Disconnect":    func() error { return id.Disconnect(ctx) },
			"InitQPAttr":    func() error { _, _, err := id.InitQPAttr(qp.StateInit); return err },
			"Migrate(nil)":  func() error { return id.Migrate(nil) },
			"Migrate(ch)":   func() error { return id.Migrate(k.channel()) },
			"SetOption":     func() error { return id.SetOption(OptionLevelID, OptionIDTOS, []byte{1}) },
			"SetTOS":        func() error { return id.SetTOS(1) },
			"SetReuseAddr":  func() error { return id.SetReuseAddr(true) },
			"SetAFOnly":     func() error { return id.SetAFOnly(true) },
			"SetAckTimeout": func() error { return id.SetAckTimeout(14) },
			"CreateQP":      func() error { return id.CreateQP(nil, uverbs.QPInitAttr{}) },
			"DestroyQP":     func() error { return id.DestroyQP() },
			"CreateSRQ":     func() error { return id.CreateSRQ(nil, uverbs.SRQAttr{}) },
			"DestroySRQ":    func() error { return id.DestroySRQ() },
			"CreateAH":      func() error { _, err := id.CreateAH(qp.AHAttr{}); return err },
			"JoinMulticast": func() error { return id.JoinMulticast(ctx, addr, JoinFullMember, nil) },
			"JoinMulticastEx": func() error {
				return id.JoinMulticast(ctx, addr, JoinFlags(99), nil)
			},
			"LeaveMulticast": func() error { return id.LeaveMulticast(addr) },
			"PostRecvv":      func() error { return id.PostRecvv(1, sgl) },
			"PostRecv":       func() error { return id.PostRecv(1, buf, nil) },
			"PostSendv":      func() error { return id.PostSendv(1, sgl, 0) },
			"PostReadv":      func() error { return id.PostReadv(1, sgl, 0, wr.Remote{}) },
			"PostWritev":     func() error { return id.PostWritev(1, sgl, 0, wr.Remote{}) },
			"PostSend":       func() error { return id.PostSend(1, buf, nil, wr.Inline) },
			"PostRead":       func() error { return id.PostRead(1, buf, nil, 0, wr.Remote{}) },
			"PostWrite":      func() error { return id.PostWrite(1, buf, nil, wr.Inline, wr.Remote{}) },
			"PostUDSend":     func() error { return id.PostUDSend(1, buf, nil, wr.Inline, nil, 0) },
			"GetSendComp":    func() error { _, err := id.GetSendComp(ctx); return err },
			"GetRecvComp":    func() error { _, err := id.GetRecvComp(ctx); return err },
			"RegMsgs":        func() error { _, err := id.RegMsgs(buf); return err },
			"RegRead":        func() error { _, err := id.RegRead(buf); return err },
			"RegWrite":       func() error { _, err := id.RegWrite(buf); return err },
			"GetRequest": func() error {
				_, err := id.GetRequest(ctx)
				return err
			},
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, net.ErrClosed) || !errors.Is(err, ErrClosed) {
				t.Errorf("sync %v: %s after Destroy: %v, want ErrClosed (net.ErrClosed)", sync, name, err)
			}
		}
		k.mu.Lock()
		if n := len(k.cmds) - before; n > 0 {
			t.Errorf("sync %v: %d commands reached the kernel after Destroy: %+v", sync, n, k.cmds[before:])
		}
		k.mu.Unlock()
		// Destroy and Close stay idempotent, as Close is across the
		// module.
		if _, err := id.destroy(); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
		if err := id.Close(); err != nil {
			t.Errorf("Close after Destroy: %v", err)
		}
		if id.QP() != nil || id.Verbs() != nil || id.PD() != nil || id.SendCQ() != nil {
			t.Error("a destroyed ID still names verbs objects")
		}
	}
}

// TestClosedChannel: a closed channel refuses GetEvent, new IDs and IDs
// migrating to it, before the kernel sees anything.
func TestClosedChannel(t *testing.T) {
	k := newFakeKernel(t)
	ch := k.channel()
	id, err := CreateID(nil, nil, PSTCP)
	mustT(t, err)
	defer id.destroy()
	mustT(t, ch.Close())
	k.mu.Lock()
	before := len(k.cmds)
	k.mu.Unlock()
	if _, err := ch.SyscallConn(); !errors.Is(err, ErrClosed) {
		t.Errorf("SyscallConn after Close: %v", err)
	}
	if _, err := ch.GetEvent(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("GetEvent after Close: %v", err)
	}
	if _, err := CreateID(ch, nil, PSTCP); !errors.Is(err, net.ErrClosed) {
		t.Errorf("CreateID on a closed channel: %v", err)
	}
	if _, err := CreateID(ch, nil, PSIB, WithQPType(qp.UD)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("CreateIDQPType on a closed channel: %v", err)
	}
	if err := id.Migrate(ch); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Migrate to a closed channel: %v", err)
	}
	k.mu.Lock()
	if n := len(k.cmds) - before; n > 0 {
		t.Errorf("%d commands reached the kernel: %+v", n, k.cmds[before:])
	}
	k.mu.Unlock()
	if err := ch.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestDroppedIDs: IDs dropped without Destroy, synchronous or not, one
// with an event kept on its channel and one with a multicast group, are
// destroyed in the kernel once collected, and a synchronous ID's channel
// is closed.
func TestDroppedIDs(t *testing.T) {
	k := newFakeKernel(t)
	k.handle(abi.RDMA_USER_CM_CMD_JOIN_MCAST, func(f *fakeFile, c *fakeCmd) error {
		respond(body[abi.RdmaUcmJoinMcast](c).Response, abi.RdmaUcmCreateIdResp{Id: 7})
		return nil
	})
	ch := k.channel()
	const n = 20
	var files []*fakeFile
	func() {
		for i := range n {
			var c *EventChannel
			if i%2 == 0 {
				c = ch
			}
			id, err := CreateID(c, nil, PSUDP)
			mustT(t, err)
			if c == nil {
				files = append(files, id.Channel().f.(*fakeFile))
			}
			switch i {
			case 1:
				id.ch.keep(&Event{Type: EventDisconnected, ID: id})
			case 2:
				mustT(t, id.JoinMulticast(context.Background(), netip.MustParseAddr("239.1.1.1"), JoinFullMember, nil))
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for k.count(abi.RDMA_USER_CM_CMD_DESTROY_ID) < n && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := k.count(abi.RDMA_USER_CM_CMD_DESTROY_ID); got != n {
		t.Fatalf("%d of %d dropped IDs destroyed", got, n)
	}
	for _, f := range files {
		f.mu.Lock()
		if !f.closed {
			t.Error("a dropped synchronous ID's channel is open")
		}
		f.mu.Unlock()
	}
	registry.mu.Lock()
	ids, mcs := len(registry.ids), len(registry.mcs)
	registry.mu.Unlock()
	if ids != 0 || mcs != 0 {
		t.Errorf("registry keeps %d IDs and %d groups", ids, mcs)
	}
	runtime.KeepAlive(ch)
}
