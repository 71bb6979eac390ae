package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/qpabi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

var vmTestAddr = netip.MustParseAddrPort("10.0.2.15:7471")

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustT(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCommandHeader(t *testing.T) {
	// Every command struct is the size of its C struct; the header's in is
	// that size and out the response's, as CMA_INIT_CMD_RESP sets them.
	for _, tc := range []struct {
		name     string
		in, want int
	}{
		{"create id", int(unsafe.Sizeof(abi.RdmaUcmCreateId{})), abi.SizeofRdmaUcmCreateId},
		{"bind", int(unsafe.Sizeof(abi.RdmaUcmBind{})), abi.SizeofRdmaUcmBind},
		{"resolve addr", int(unsafe.Sizeof(abi.RdmaUcmResolveAddr{})), abi.SizeofRdmaUcmResolveAddr},
		{"connect", int(unsafe.Sizeof(abi.RdmaUcmConnect{})), abi.SizeofRdmaUcmConnect},
		{"accept", int(unsafe.Sizeof(abi.RdmaUcmAccept{})), abi.SizeofRdmaUcmAccept},
		{"event resp", int(unsafe.Sizeof(abi.RdmaUcmEventResp{})), abi.SizeofRdmaUcmEventResp},
	} {
		if tc.in != tc.want {
			t.Errorf("%s: %d bytes, want %d", tc.name, tc.in, tc.want)
		}
	}
	c := newCall[abi.RdmaUcmCreateId, abi.RdmaUcmCreateIdResp](abi.RDMA_USER_CM_CMD_CREATE_ID)
	b := c.bytes()
	if len(b) != 8+abi.SizeofRdmaUcmCreateId {
		t.Fatalf("command is %d bytes", len(b))
	}
	ne := binary.NativeEndian
	if ne.Uint32(b) != abi.RDMA_USER_CM_CMD_CREATE_ID || ne.Uint16(b[4:]) != abi.SizeofRdmaUcmCreateId || ne.Uint16(b[6:]) != 4 {
		t.Errorf("header % x", b[:8])
	}
	// The union of an event's parameters holds either struct.
	if unsafe.Sizeof(abi.RdmaUcmEventResp{}.Param) < unsafe.Sizeof(abi.RdmaUcmUdParam{}) ||
		unsafe.Sizeof(abi.RdmaUcmEventResp{}.Param) < unsafe.Sizeof(abi.RdmaUcmConnParam{}) {
		t.Error("event parameter union too small")
	}
	if off := unsafe.Offsetof(abi.RdmaUcmEventResp{}.Param); off != 20 {
		t.Errorf("event param at %d, want 20", off)
	}
}

func TestSockaddr(t *testing.T) {
	for _, s := range []string{"10.0.2.15:7471", "0.0.0.0:0", "[fe80::1]:80", "[::]:65535", "[2001:db8::5%7]:9"} {
		ap := netip.MustParseAddrPort(s)
		var b [128]byte
		n, err := putSockaddr(b[:], ap)
		mustT(t, err)
		want := sizeofSockaddrIn6
		if ap.Addr().Is4() {
			want = sizeofSockaddrIn
		}
		if n != want {
			t.Errorf("%s: length %d, want %d", s, n, want)
		}
		if got := sockaddr(b[:n]); got.Port() != ap.Port() || got.Addr().WithZone("") != ap.Addr().WithZone("") {
			t.Errorf("%s: round trip gives %v", s, got)
		}
	}
	// Layout: family, port in network order, address.
	var b [128]byte
	putSockaddr(b[:], vmTestAddr)
	if binary.NativeEndian.Uint16(b[:]) != unix.AF_INET || b[2] != 0x1d || b[3] != 0x2f || !bytes.Equal(b[4:8], []byte{10, 0, 2, 15}) {
		t.Errorf("sockaddr_in % x", b[:16])
	}
	// An IPv4-mapped address goes as IPv4.
	if n, _ := putSockaddr(b[:], netip.MustParseAddrPort("[::ffff:10.0.2.15]:1")); n != sizeofSockaddrIn {
		t.Errorf("mapped address: length %d", n)
	}
	if _, err := putSockaddr(b[:], netip.AddrPort{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no address: %v", err)
	}
	if got := sockaddr(make([]byte, 28)); got.IsValid() {
		t.Errorf("AF_UNSPEC gives %v", got)
	}
}

func TestCreateBindDestroy(t *testing.T) {
	k := newFakeKernel(t)
	ch := k.channel()
	id, err := CreateID(ch, "ctx", PSTCP)
	mustT(t, err)
	c := k.last(abi.RDMA_USER_CM_CMD_CREATE_ID)
	req := body[abi.RdmaUcmCreateId](c)
	if req.Uid == 0 || req.Uid != id.uid || req.Ps != abi.RDMA_PS_TCP || req.Qp_type != uint8(qp.RC) || c.Out != 4 {
		t.Errorf("create id %+v out %d", req, c.Out)
	}
	if id.handle != k.nextID || id.UserData() != "ctx" || id.QPType() != qp.RC || id.Channel() != ch {
		t.Errorf("id handle %d context %v type %v", id.handle, id.UserData(), id.QPType())
	}
	mustT(t, id.BindAddr(vmTestAddr))
	bind := body[abi.RdmaUcmBind](k.last(abi.RDMA_USER_CM_CMD_BIND))
	if bind.Id != id.handle || bind.Addr_size != 16 || sockaddr(bind.Addr.Anon0[:]) != vmTestAddr {
		t.Errorf("bind %+v", bind)
	}
	if k.count(abi.RDMA_USER_CM_CMD_QUERY_ROUTE) != 1 {
		t.Error("bind did not query the route")
	}
	n, err := id.destroy()
	if err != nil || n != 3 {
		t.Errorf("destroy: %d, %v", n, err)
	}
	if d := body[abi.RdmaUcmDestroyId](k.last(abi.RDMA_USER_CM_CMD_DESTROY_ID)); d.Id != id.handle {
		t.Errorf("destroyed %d", d.Id)
	}
	if n, err := id.destroy(); n != 0 || err != nil {
		t.Errorf("second destroy: %d %v", n, err)
	}
	if err := id.BindAddr(vmTestAddr); !errors.Is(err, ErrClosed) {
		t.Errorf("bind after destroy: %v", err)
	}
	if lookupUID(id.uid) != nil {
		t.Error("destroyed ID still registered")
	}

	// UDP IDs are UD; a synchronous ID has a channel of its own, closed
	// with it.
	ud, err := CreateID(nil, nil, PSUDP)
	mustT(t, err)
	if ud.QPType() != qp.UD || !ud.sync {
		t.Errorf("UDP ID: type %v sync %v", ud.QPType(), ud.sync)
	}
	own := ud.Channel().f.(*fakeFile)
	ud.destroy()
	if !own.closed {
		t.Error("a synchronous ID's channel outlives it")
	}
	k.handle(abi.RDMA_USER_CM_CMD_CREATE_ID, func(*fakeFile, *fakeCmd) error { return unix.EINVAL })
	if _, err := CreateID(ch, nil, PortSpace(7)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("bad port space: %v", err)
	}
}

func TestSyncResolve(t *testing.T) {
	k := newFakeKernel(t)
	id, err := CreateID(nil, nil, PSTCP)
	mustT(t, err)
	defer id.destroy()
	f := id.Channel().f.(*fakeFile)
	k.handle(abi.RDMA_USER_CM_CMD_RESOLVE_ADDR, func(ff *fakeFile, c *fakeCmd) error {
		f.queue(event(id, EventAddrResolved, 0))
		return nil
	})
	mustT(t, id.ResolveAddr(ctxT(t), netip.AddrPort{}, vmTestAddr, 1500*time.Millisecond))
	r := body[abi.RdmaUcmResolveAddr](k.last(abi.RDMA_USER_CM_CMD_RESOLVE_ADDR))
	if r.Id != id.handle || r.Timeout_ms != 1500 || r.Src_size != 0 || r.Dst_size != 16 || sockaddr(r.Dst_addr.Anon0[:]) != vmTestAddr {
		t.Errorf("resolve addr %+v", r)
	}
	if ev := id.Event(); ev == nil || ev.Type != EventAddrResolved || ev.ID != id {
		t.Errorf("event %v", ev)
	}
	if k.count(abi.RDMA_USER_CM_CMD_QUERY_ROUTE) != 1 {
		t.Error("ADDR_RESOLVED did not query the route")
	}

	// A failed resolution: its status is the errno.
	k.handle(abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE, func(*fakeFile, *fakeCmd) error {
		f.queue(event(id, EventRouteError, -int32(unix.ETIMEDOUT)))
		return nil
	})
	err = id.ResolveRoute(ctxT(t), 0)
	var ce *Error
	if !errors.Is(err, unix.ETIMEDOUT) || !errors.As(err, &ce) || ce.Event != EventRouteError || ce.Status != -int(unix.ETIMEDOUT) {
		t.Errorf("route error: %#v", err)
	}
	if rr := body[abi.RdmaUcmResolveRoute](k.last(abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE)); rr.Timeout_ms != 2000 {
		t.Errorf("default timeout %d ms", rr.Timeout_ms)
	}

	// The kernel refusing the command itself.
	k.handle(abi.RDMA_USER_CM_CMD_RESOLVE_ADDR, func(*fakeFile, *fakeCmd) error { return unix.ENETUNREACH })
	if err := id.ResolveAddr(ctxT(t), vmTestAddr, vmTestAddr, 0); !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("refused resolve: %v", err)
	}
	r = body[abi.RdmaUcmResolveAddr](k.last(abi.RDMA_USER_CM_CMD_RESOLVE_ADDR))
	if r.Src_size != 16 {
		t.Errorf("source size %d", r.Src_size)
	}

	// Cancellation and deadlines end the wait.
	k.handle(abi.RDMA_USER_CM_CMD_RESOLVE_ADDR, func(*fakeFile, *fakeCmd) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, vmTestAddr, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled resolve: %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if err := id.ResolveAddr(dctx, netip.AddrPort{}, vmTestAddr, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("resolve past deadline: %v", err)
	}
}

func TestUnexpectedEvents(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	id, f := syncBoundID(t, k)
	for _, tc := range []struct {
		ev     EventType
		status int32
		errno  unix.Errno
	}{
		{EventRejected, 8, unix.ECONNREFUSED},
		{EventUnreachable, -int32(unix.ETIMEDOUT), unix.ETIMEDOUT},
		{EventConnectError, -int32(unix.ECONNRESET), unix.ECONNRESET},
		{EventDisconnected, 0, unix.ECONNRESET},
		{EventDeviceRemoval, 0, unix.ENODEV},
		{EventAddrChange, 0, unix.EPROTO},
		{EventTimewaitExit, 0, unix.EPROTO},
	} {
		id.connectErr = false
		f.queue(event(id, tc.ev, tc.status))
		err := id.Connect(ctxT(t), &ConnParam{QPNum: 1})
		if !errors.Is(err, tc.errno) {
			t.Errorf("connect answered by %v: %v, want %v", tc.ev, err, tc.errno)
		}
	}
}

func TestConnectAcceptEncoding(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	ch, f := k.channelFile()
	listen, err := CreateID(ch, "L", PSTCP)
	mustT(t, err)
	defer listen.destroy()
	mustT(t, listen.BindAddr(vmTestAddr))
	mustT(t, listen.Listen(0))
	if l := body[abi.RdmaUcmListen](k.last(abi.RDMA_USER_CM_CMD_LISTEN)); l.Id != listen.handle || l.Backlog != 0 {
		t.Errorf("listen %+v", l)
	}

	// A connection request: the kernel names the new ID by handle and the
	// listener by uid.
	req := event(listen, EventConnectRequest, 0)
	req.Id = 555
	cp := connParamOf(&req)
	cp.Private_data_len = 5
	copy(cp.Private_data[:], "hello")
	cp.Initiator_depth, cp.Responder_resources = 4, 32
	cp.Qp_num = 77
	f.queue(req)
	ev, err := ch.GetEvent(ctxT(t))
	mustT(t, err)
	if ev.Type != EventConnectRequest || ev.ListenID != listen || ev.ID == nil || ev.ID.handle != 555 ||
		string(ev.PrivateData()) != "hello" || ev.Conn.QPNum != 77 || ev.ID.UserData() != "L" {
		t.Fatalf("request %v %+v", ev, ev.Conn)
	}
	srv := ev.ID
	defer srv.destroy()
	if srv.Verbs() != nil || srv.dev == nil {
		t.Error("the request's ID has no device")
	}

	// Accept without a QP needs the QP number; the depths are the
	// peer's, within the device's.
	if err := srv.Accept(ctxT(t), nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("accept without QP or param: %v", err)
	}
	p := ConnParam{QPNum: 99, ResponderResources: MaxRespRes, InitiatorDepth: MaxInitDepth,
		RNRRetryCount: 7, PrivateData: []byte("welcome")}
	mustT(t, srv.Accept(ctxT(t), &p))
	a := body[abi.RdmaUcmAccept](k.last(abi.RDMA_USER_CM_CMD_ACCEPT))
	if a.Id != 555 || a.Uid != srv.uid || a.Conn_param.Valid != 1 || a.Conn_param.Qp_num != 99 ||
		a.Conn_param.Initiator_depth != 4 || a.Conn_param.Responder_resources != 16 ||
		a.Conn_param.Rnr_retry_count != 7 || string(a.Conn_param.Private_data[:a.Conn_param.Private_data_len]) != "welcome" {
		t.Errorf("accept %+v", a.Conn_param)
	}
	p.ResponderResources = 17
	if err := srv.Accept(ctxT(t), &p); !errors.Is(err, unix.EINVAL) {
		t.Errorf("accept beyond the device's responder resources: %v", err)
	}

	// Reject with private data and the reason.
	mustT(t, srv.Reject([]byte("no")))
	r := body[abi.RdmaUcmReject](k.last(abi.RDMA_USER_CM_CMD_REJECT))
	if r.Id != 555 || r.Reason != 0 || r.Private_data_len != 2 || string(r.Private_data[:2]) != "no" {
		t.Errorf("reject %+v", r)
	}
	mustT(t, srv.RejectECE(nil))
	if r := body[abi.RdmaUcmReject](k.last(abi.RDMA_USER_CM_CMD_REJECT)); r.Reason != 35 || r.Private_data_len != 0 {
		t.Errorf("reject ECE %+v", r)
	}
	if err := srv.Reject(make([]byte, 300)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("oversized reject: %v", err)
	}

	// Connect: the defaults without a parameter.
	cli, err := CreateID(ch, nil, PSTCP)
	mustT(t, err)
	defer cli.destroy()
	if err := cli.Connect(ctxT(t), nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("connect without device: %v", err)
	}
	mustT(t, cli.BindAddr(vmTestAddr))
	cp2 := DefaultConnParam()
	cp2.QPNum = 12
	cli.connectData = []byte("AI:")
	cp2.PrivateData = []byte("data")
	mustT(t, cli.Connect(ctxT(t), &cp2))
	c := body[abi.RdmaUcmConnect](k.last(abi.RDMA_USER_CM_CMD_CONNECT))
	if c.Id != cli.handle || c.Conn_param.Valid != 1 || c.Conn_param.Qp_num != 12 || c.Conn_param.Retry_count != 7 ||
		c.Conn_param.Initiator_depth != 16 || c.Conn_param.Responder_resources != 16 ||
		string(c.Conn_param.Private_data[:c.Conn_param.Private_data_len]) != "AI:data" {
		t.Errorf("connect %+v", c.Conn_param)
	}
	if cli.connectData != nil {
		t.Error("the address info's connect data is sent once")
	}

	// The ESTABLISHED event carries the accept's private data.
	est := event(cli, EventEstablished, 0)
	cp = connParamOf(&est)
	cp.Private_data_len = 3
	copy(cp.Private_data[:], "yes")
	f.queue(est)
	ev, err = ch.GetEvent(ctxT(t))
	mustT(t, err)
	if ev.Type != EventEstablished || ev.ID != cli || string(ev.Conn.PrivateData) != "yes" || cli.getState() != stateConnected {
		t.Errorf("established %v %q", ev, ev.Conn.PrivateData)
	}
	mustT(t, ev.Ack())
	mustT(t, ev.Ack())
	if cli.EventsReported() != 1 || cli.EventsAcked() != 1 {
		t.Errorf("reported %d acked %d", cli.EventsReported(), cli.EventsAcked())
	}

	// Disconnect, once.
	mustT(t, cli.Disconnect(ctxT(t)))
	mustT(t, cli.Disconnect(ctxT(t)))
	if k.count(abi.RDMA_USER_CM_CMD_DISCONNECT) != 1 {
		t.Errorf("%d disconnects sent", k.count(abi.RDMA_USER_CM_CMD_DISCONNECT))
	}
	if err := cli.PostSend(1, []byte("x"), nil, wr.Inline); !errors.Is(err, unix.EINVAL) {
		t.Errorf("post without QP: %v", err)
	}
}

func TestEventDispatch(t *testing.T) {
	k := newFakeKernel(t)
	ch, f := k.channelFile()
	a, err := CreateID(ch, nil, PSTCP)
	mustT(t, err)
	b, err := CreateID(ch, nil, PSUDP)
	mustT(t, err)
	defer b.destroy()

	// Events of a destroyed ID are dropped; uid 0 is looked up by handle
	// for ESTABLISHED only.
	gone := event(a, EventDisconnected, 0)
	orphan := event(a, EventConnectRequest, 0)
	orphan.Id = 4242
	a.destroy()
	f.queue(gone)
	f.queue(orphan)
	zero := event(b, EventAddrChange, 0)
	zero.Uid = 0
	f.queue(zero)
	est := event(b, EventEstablished, 0)
	est.Uid = 0
	ud := udParamOf(&est)
	ud.Qp_num, ud.Qkey = 42, UDPQKey
	ud.Ah_attr.Is_global = 1
	ud.Ah_attr.Grh.Dgid[15] = 9
	ud.Ah_attr.Port_num = 1
	ud.Private_data_len = 2
	copy(ud.Private_data[:], "ok")
	f.queue(est)
	ev, err := ch.GetEvent(ctxT(t))
	mustT(t, err)
	if ev.ID != b || ev.Type != EventEstablished || ev.UD.QPNum != 42 || ev.UD.QKey != UDPQKey ||
		!ev.UD.AHAttr.IsGlobal || ev.UD.AHAttr.DGID[15] != 9 || string(ev.PrivateData()) != "ok" {
		t.Errorf("UD event %v %+v", ev, ev.UD)
	}
	// The request for the destroyed listener was refused by destroying
	// the kernel's new ID.
	if d := body[abi.RdmaUcmDestroyId](k.last(abi.RDMA_USER_CM_CMD_DESTROY_ID)); d.Id != 4242 {
		t.Errorf("orphaned request's ID %d not destroyed (last destroyed %d)", orphan.Id, d.Id)
	}

	// GetEvent after Close, and a Close waking a waiter.
	done := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	ch.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("GetEvent on a closed channel: %v", err)
	}
}

func TestInitQPAttrAndOptions(t *testing.T) {
	k := newFakeKernel(t)
	id, err := CreateID(k.channel(), nil, PSTCP)
	mustT(t, err)
	defer id.destroy()
	k.handle(abi.RDMA_USER_CM_CMD_INIT_QP_ATTR, func(f *fakeFile, c *fakeCmd) error {
		req := body[abi.RdmaUcmInitQpAttr](c)
		if req.Qp_state != uint32(qp.StateRTR) || c.Out != abi.SizeofIbUverbsQpAttr {
			return unix.EINVAL
		}
		var r abi.IbUverbsQpAttr
		r.Qp_attr_mask = uint32(qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|
			qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer) | 1<<22
		r.Qp_state = uint32(qp.StateRTR)
		r.Path_mtu = 3
		r.Dest_qp_num = 0x123
		r.Rq_psn = 0x456
		r.Max_dest_rd_atomic = 4
		r.Min_rnr_timer = 12
		r.Ah_attr.Is_global = 1
		r.Ah_attr.Grh.Sgid_index = 1
		r.Ah_attr.Grh.Hop_limit = 64
		r.Ah_attr.Port_num = 1
		respond(req.Response, r)
		return nil
	})
	a, mask, err := id.InitQPAttr(qp.StateRTR)
	mustT(t, err)
	if mask&qpabi.MaskReserved != 0 || mask&qp.AttrAV == 0 || a.DestQPNum != 0x123 || a.RQPSN != 0x456 ||
		a.PathMTU != 3 || !a.AHAttr.IsGlobal || a.AHAttr.SGIDIndex != 1 || a.AHAttr.HopLimit != 64 {
		t.Errorf("RTR attrs %+v mask %v", a, mask)
	}
	if err := qp.Validate(qp.RC, qp.StateInit, qp.StateRTR, mask); err != nil {
		t.Errorf("the kernel's RTR mask does not validate: %v", err)
	}

	var got []byte
	k.handle(abi.RDMA_USER_CM_CMD_SET_OPTION, func(f *fakeFile, c *fakeCmd) error {
		o := body[abi.RdmaUcmSetOption](c)
		got = append([]byte(nil), unsafe.Slice((*byte)(userPtr(o.Optval)), o.Optlen)...)
		if o.Id != id.handle || o.Level != OptionLevelID {
			return unix.EINVAL
		}
		return nil
	})
	mustT(t, id.SetTOS(0x20))
	if !bytes.Equal(got, []byte{0x20}) {
		t.Errorf("TOS option % x", got)
	}
	mustT(t, id.SetReuseAddr(true))
	if len(got) != 4 || binary.NativeEndian.Uint32(got) != 1 {
		t.Errorf("reuseaddr option % x", got)
	}
	mustT(t, id.Notify(4))
	if n := body[abi.RdmaUcmNotify](k.last(abi.RDMA_USER_CM_CMD_NOTIFY)); n.Id != id.handle || n.Event != 4 {
		t.Errorf("notify %+v", n)
	}
}

func TestMulticastAndMigrate(t *testing.T) {
	k := newFakeKernel(t)
	ch, f := k.channelFile()
	id, err := CreateID(ch, nil, PSUDP)
	mustT(t, err)
	defer id.destroy()
	group := netip.MustParseAddr("239.1.2.3")
	k.handle(abi.RDMA_USER_CM_CMD_JOIN_MCAST, func(ff *fakeFile, c *fakeCmd) error {
		j := body[abi.RdmaUcmJoinMcast](c)
		respond(j.Response, abi.RdmaUcmCreateIdResp{Id: 77})
		ev := abi.RdmaUcmEventResp{Uid: j.Uid, Id: 77, Event: uint32(EventMulticastJoin)}
		ud := udParamOf(&ev)
		ud.Qp_num, ud.Qkey = 0xffffff, UDPQKey
		f.queue(ev)
		return nil
	})
	mustT(t, id.JoinMulticast(ctxT(t), group, JoinFullMember, "grp"))
	j := body[abi.RdmaUcmJoinMcast](k.last(abi.RDMA_USER_CM_CMD_JOIN_MCAST))
	if j.Id != id.handle || j.Join_flags != 0 || j.Addr_size != 16 || sockaddr(j.Addr.Anon0[:]).Addr() != group {
		t.Errorf("join %+v", j)
	}
	ev, err := ch.GetEvent(ctxT(t))
	mustT(t, err)
	if ev.Type != EventMulticastJoin || ev.ID != id || ev.UserData != "grp" || ev.UD.QPNum != 0xffffff {
		t.Errorf("join event %v %+v", ev, ev.UD)
	}
	if err := id.JoinMulticast(ctxT(t), group, 5, nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("bad join flags: %v", err)
	}
	k.handle(abi.RDMA_USER_CM_CMD_LEAVE_MCAST, func(ff *fakeFile, c *fakeCmd) error {
		l := body[abi.RdmaUcmDestroyId](c)
		if l.Id != 77 {
			return unix.ENOENT
		}
		respond(l.Response, abi.RdmaUcmDestroyIdResp{Events_reported: 1})
		return nil
	})
	mustT(t, id.LeaveMulticast(group))
	if err := id.LeaveMulticast(group); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Errorf("leaving twice: %v", err)
	}

	// Migrate: the command goes to the new channel and names the old one.
	ch2 := k.channel()
	var from, to int
	k.handle(abi.RDMA_USER_CM_CMD_MIGRATE_ID, func(ff *fakeFile, c *fakeCmd) error {
		m := body[abi.RdmaUcmMigrateId](c)
		if m.Id != id.handle {
			return unix.EINVAL
		}
		from, to = int(m.Fd), ff.fd()
		respond(m.Response, abi.RdmaUcmMigrateResp{Events_reported: 2})
		return nil
	})
	mustT(t, id.Migrate(ch2))
	if id.Channel() != ch2 || from != ch.f.fd() || to != ch2.f.fd() {
		t.Errorf("migrated from %d to %d, want %d to %d", from, to, ch.f.fd(), ch2.f.fd())
	}
	mustT(t, id.Migrate(nil))
	if !id.sync || id.Channel() == ch2 {
		t.Error("not synchronous")
	}
	if err := id.Migrate(nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("making a synchronous ID synchronous: %v", err)
	}
}

func TestGetRequest(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	l, f := syncBoundID(t, k)
	migrated := 0
	k.handle(abi.RDMA_USER_CM_CMD_MIGRATE_ID, func(ff *fakeFile, c *fakeCmd) error {
		migrated++
		respond(body[abi.RdmaUcmMigrateId](c).Response, abi.RdmaUcmMigrateResp{})
		return nil
	})
	req := event(l, EventConnectRequest, 0)
	req.Id = 900
	f.queue(req)
	id, err := l.GetRequest(ctxT(t))
	mustT(t, err)
	defer id.destroy()
	if id.handle != 900 || !id.sync || migrated != 1 || id.Event().Type != EventConnectRequest {
		t.Errorf("request ID %d sync %v migrated %d", id.handle, id.sync, migrated)
	}
	// A rejection on a listener is refused; other events are not requests.
	f.queue(event(l, EventRejected, 28))
	if _, err := l.GetRequest(ctxT(t)); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("REJECTED: %v", err)
	}
	f.queue(event(l, EventAddrChange, 0))
	if _, err := l.GetRequest(ctxT(t)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("ADDR_CHANGE: %v", err)
	}
	a, err := CreateID(k.channel(), nil, PSTCP)
	mustT(t, err)
	defer a.destroy()
	if _, err := a.GetRequest(ctxT(t)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("GetRequest on an asynchronous ID: %v", err)
	}
}

func TestNames(t *testing.T) {
	if s := EventEstablished.String(); s != "RDMA_CM_EVENT_ESTABLISHED" {
		t.Error(s)
	}
	if s := EventTimewaitExit.String(); s != "RDMA_CM_EVENT_TIMEWAIT_EXIT" {
		t.Error(s)
	}
	if s := EventType(99).String(); !strings.Contains(s, "99") {
		t.Error(s)
	}
	if PSTCP.String() != "RDMA_PS_TCP" || PSUDP.String() != "RDMA_PS_UDP" {
		t.Error(PSTCP, PSUDP)
	}
	if timeoutMS(0) != 2000 || timeoutMS(time.Microsecond) != 1 || timeoutMS(3*time.Second) != 3000 {
		t.Error("timeoutMS")
	}
	ev := &Event{Type: EventRejected, Status: 28}
	if !errors.Is(ev.Err(), unix.ECONNREFUSED) {
		t.Error(ev.Err())
	}
	if (&Event{Type: EventEstablished}).Err() != nil {
		t.Error("ESTABLISHED is an error")
	}
}

func TestSyncConnectWithoutQP(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	id, f := syncBoundID(t, k)
	k.handle(abi.RDMA_USER_CM_CMD_CONNECT, func(*fakeFile, *fakeCmd) error {
		resp := event(id, EventConnectResponse, 0)
		cp := connParamOf(&resp)
		cp.Qp_num = 321
		f.queue(resp)
		return nil
	})
	p := DefaultConnParam()
	p.QPNum = 5
	mustT(t, id.Connect(ctxT(t), &p))
	if ev := id.Event(); ev.Type != EventConnectResponse || ev.Conn.QPNum != 321 {
		t.Fatalf("event %v %+v", ev, ev.Conn)
	}
	accepts := k.count(abi.RDMA_USER_CM_CMD_ACCEPT)
	mustT(t, id.Establish())
	if k.count(abi.RDMA_USER_CM_CMD_ACCEPT) != accepts+1 {
		t.Fatal("Establish sent no ready-to-use")
	}
	if a := body[abi.RdmaUcmAccept](k.last(abi.RDMA_USER_CM_CMD_ACCEPT)); a.Id != id.handle || a.Conn_param.Valid != 0 {
		t.Errorf("establish %+v", a)
	}
	if id.getState() != stateConnected {
		t.Error("not connected after Establish")
	}
}

// Private data travels with a one-byte length: 255 bytes go whole, 256 are
// refused rather than sent as none.
func TestPrivateDataLength(t *testing.T) {
	id := &ID{}
	var dst abi.RdmaUcmConnParam
	if err := id.connParamToKern("connect", &dst, &ConnParam{PrivateData: make([]byte, 255)}, 0, false); err != nil || dst.Private_data_len != 255 {
		t.Errorf("255 bytes: length %d, %v", dst.Private_data_len, err)
	}
	if err := id.connParamToKern("connect", &dst, &ConnParam{PrivateData: make([]byte, 256)}, 0, false); !errors.Is(err, unix.EINVAL) {
		t.Errorf("256 bytes: %v, want EINVAL", err)
	}
}

// A refused post names cm's operation once, with the errno still there to
// test.
func TestPostErrorText(t *testing.T) {
	err := wrapPost("post send", &uverbs.PostError{Op: "post send", Index: 0,
		Err: &uverbs.Error{Op: "post send", Err: unix.ENOMEM}})
	if got, want := err.Error(), "cm: post send: cannot allocate memory"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(err, unix.ENOMEM) {
		t.Errorf("%v does not match ENOMEM", err)
	}
}

// An event that failed by itself (Event.Err) names the event once; one
// that ended another operation names both.
func TestEventErrorText(t *testing.T) {
	ev := &Event{Type: EventDisconnected, Status: -int(unix.ETIMEDOUT)}
	if got, want := ev.Err().Error(), "cm: RDMA_CM_EVENT_DISCONNECTED (status -110): connection timed out"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(ev.Err(), unix.ETIMEDOUT) {
		t.Errorf("%v does not match ETIMEDOUT", ev.Err())
	}
	err := eventErr("connect", &Event{Type: EventRejected, Status: 28}, EventEstablished)
	if got, want := err.Error(), "cm: connect: RDMA_CM_EVENT_REJECTED (status 28): connection refused"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// Commands the kernel completes with CPU work alone are raw system calls
// (quickCmd): on an IB or RoCE device the connection commands too;
// listening and destroying are ordinary calls.
func TestQuickCommands(t *testing.T) {
	k := newFakeKernel(t)
	k.withDevice(t)
	ch, f := k.channelFile()
	listen, err := CreateID(ch, nil, PSTCP)
	mustT(t, err)
	mustT(t, listen.BindAddr(vmTestAddr))
	mustT(t, listen.Listen(0))
	req := event(listen, EventConnectRequest, 0)
	req.Id = 555
	f.queue(req)
	ev, err := ch.GetEvent(ctxT(t))
	mustT(t, err)
	mustT(t, ev.ID.Accept(ctxT(t), &ConnParam{QPNum: 9}))
	mustT(t, ev.ID.Reject(nil))
	mustT(t, ev.ID.Disconnect(ctxT(t)))
	cli, err := CreateID(ch, nil, PSTCP)
	mustT(t, err)
	mustT(t, cli.BindAddr(vmTestAddr))
	mustT(t, cli.Connect(ctxT(t), &ConnParam{QPNum: 12}))
	for _, id := range []*ID{cli, ev.ID, listen} {
		_, err := id.destroy()
		mustT(t, err)
	}

	want := map[uint32]bool{
		abi.RDMA_USER_CM_CMD_CREATE_ID: true, abi.RDMA_USER_CM_CMD_BIND: true,
		abi.RDMA_USER_CM_CMD_QUERY_ROUTE: true, abi.RDMA_USER_CM_CMD_LISTEN: false,
		abi.RDMA_USER_CM_CMD_ACCEPT: true, abi.RDMA_USER_CM_CMD_REJECT: true,
		abi.RDMA_USER_CM_CMD_DISCONNECT: true, abi.RDMA_USER_CM_CMD_CONNECT: true,
		abi.RDMA_USER_CM_CMD_DESTROY_ID: false,
	}
	k.mu.Lock()
	seen := map[uint32]bool{}
	for _, c := range k.cmds {
		seen[c.Cmd] = true
		if w, ok := want[c.Cmd]; ok && c.Quick != w {
			t.Errorf("command %d: raw system call %v, want %v", c.Cmd, c.Quick, w)
		}
	}
	k.mu.Unlock()
	for c := range want {
		if !seen[c] {
			t.Errorf("command %d was not sent", c)
		}
	}
	// On iWARP the connection commands drive TCP and are ordinary calls.
	for _, c := range []uint32{abi.RDMA_USER_CM_CMD_CONNECT, abi.RDMA_USER_CM_CMD_ACCEPT,
		abi.RDMA_USER_CM_CMD_REJECT, abi.RDMA_USER_CM_CMD_DISCONNECT} {
		if quickCmd(c, false) || !quickCmd(c, true) {
			t.Errorf("command %d: quick on iWARP %v, on IB %v", c, quickCmd(c, false), quickCmd(c, true))
		}
	}
}
