package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// udaddy's fixed parameters: it has no port option, and by default each
// side sends 10 messages of 100 bytes (SEND_WITH_IMM, the immediate data
// being the sender's QP number) and waits for 10 from the other.
const (
	udaddyPort  = 7174
	udaddyCount = 10
	udaddySize  = 100
	udaddySlot  = uverbs.GRHSize + udaddySize
)

// startUdaddy starts rdma-core's udaddy with args; the returned function
// waits for it to exit, logs its output and fails the test unless it
// exited with status 0.
func startUdaddy(ctx context.Context, t *testing.T, args ...string) (*exec.Cmd, func()) {
	t.Helper()
	cmd, out := startCTool(ctx, t, "udaddy", args...)
	waited := false
	wait := func() {
		if waited {
			return
		}
		waited = true
		err := cmd.Wait()
		t.Logf("udaddy %s: %v\n%s", strings.Join(args, " "), err, out.String())
		if err != nil {
			t.Errorf("udaddy %s: %v", strings.Join(args, " "), err)
		} else if !strings.Contains(out.String(), "data transfers complete") {
			t.Errorf("udaddy %s exited 0 without completing its transfers", strings.Join(args, " "))
		}
	}
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			wait()
		}
	})
	return cmd, wait
}

// postUdaddyRecvs posts one receive per message, each into its own slot of
// buf (GRH then payload).
func postUdaddyRecvs(t *testing.T, id *cm.ID, buf []byte, m *uverbs.MR) {
	t.Helper()
	for i := range udaddyCount {
		rdmatest.Must(t, id.PostRecv(uint64(100+i), buf[i*udaddySlot:(i+1)*udaddySlot], m))
	}
}

// recvUdaddy waits for the ten messages of a peer whose QP is peerQPN (0:
// any, returned) and checks each: a GRH, 100 bytes, the sender's QP
// number as immediate data. It returns the first completion.
func recvUdaddy(ctx context.Context, t *testing.T, id *cm.ID, peerQPN uint32) wr.Completion {
	t.Helper()
	var first wr.Completion
	for i := range udaddyCount {
		wc, err := id.GetRecvComp(ctx)
		rdmatest.Must(t, err)
		if wc.Opcode != wr.WCRecv || wc.ID != uint64(100+i) {
			t.Fatalf("receive %d: completion %+v", i, wc)
		}
		if i == 0 {
			first = wc
			if peerQPN == 0 {
				peerQPN = wc.SrcQP
			}
		}
		if wc.Flags&(wr.WCGRH|wr.WCWithImm) != wr.WCGRH|wr.WCWithImm || wc.ByteLen != udaddySlot ||
			wc.SrcQP != peerQPN || wc.Imm != peerQPN {
			t.Fatalf("receive %d: completion %+v, want GRH, immediate data %d, %d bytes from QP %d", i, wc, peerQPN, udaddySlot, peerQPN)
		}
	}
	return first
}

// sendUdaddy sends ten messages as udaddy does: SEND_WITH_IMM, immediate
// data our QP number, and waits for their completions.
func sendUdaddy(ctx context.Context, t *testing.T, id *cm.ID, buf []byte, m *uverbs.MR, ah *uverbs.AH, qpn, qkey uint32) {
	t.Helper()
	q := id.QP()
	for i := range udaddyCount {
		off := len(buf) - udaddySize*(i+1)
		copy(buf[off:off+udaddySize], "rdmago says hello")
		_, err := q.PostSend([]wr.SendWR{{ID: uint64(200 + i), SGList: []wr.SGE{m.SGE(off, udaddySize)},
			Opcode: wr.OpSendWithImm, Flags: wr.Signaled, Imm: q.Num(), AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}})
		rdmatest.Must(t, err)
	}
	for i := range udaddyCount {
		wc, err := id.GetSendComp(ctx)
		wantComp(t, "send", wc, err, uint64(200+i), wr.WCSend)
	}
}

// TestDeviceUdaddyClient: a Go UD server answers rdma-core's udaddy client
// as udaddy's own server does, from the client's first datagram
// (CreateAHFromWC); the CONNECT_REQUEST carries no address to answer to.
func TestDeviceUdaddyClient(t *testing.T) {
	ctx := rdmatest.Context(t)
	l := rdmatest.NewID(t, nil, nil, cm.PSUDP)
	rdmatest.Must(t, l.BindAddr(netip.AddrPortFrom(rdmatest.VMAddr, udaddyPort)))
	rdmatest.Must(t, l.Listen(0))
	_, wait := startUdaddy(ctx, t, "-s", rdmatest.VMAddr.String())

	id, err := l.GetRequest(ctx)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, id)
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
	buf, m := rdmatest.Msgs(t, id, 2*udaddyCount*udaddySlot)
	postUdaddyRecvs(t, id, buf, m)
	rdmatest.Must(t, id.Accept(ctx, nil))

	first := recvUdaddy(ctx, t, id, 0)
	// The reply's address comes from the datagram (the GRH in the
	// first slot), exactly where the route says the client is.
	grh := buf[:uverbs.GRHSize]
	attr, err := id.Verbs().InitAHFromWC(id.PortNum(), &first, grh)
	rdmatest.Must(t, err)
	r := id.Route()
	if attr.DGID != r.DGID || !attr.IsGlobal || attr.PortNum != id.PortNum() {
		t.Errorf("reply address %+v, the route has DGID %v", attr, r.DGID)
	}
	wantSGID(t, id, attr.SGIDIndex, r.SGID)
	ah, err := id.PD().CreateAHFromWC(&first, grh, id.PortNum())
	rdmatest.Must(t, err)
	defer ah.Close()
	sendUdaddy(ctx, t, id, buf, m, ah, first.Imm, cm.UDPQKey)
	wait()
}

// TestDeviceUdaddyServer: a Go UD client against rdma-core's udaddy server.
// The client addresses the server from the ESTABLISHED event; its
// answers, run through InitAHFromWC, give the same address back.
func TestDeviceUdaddyServer(t *testing.T) {
	ctx := rdmatest.Context(t)
	_, wait := startUdaddy(ctx, t, "-b", rdmatest.VMAddr.String())
	var c *cm.ID
	var err error
	// Until udaddy listens, a SIDR request finds nobody and fails.
	for tries := 1; ; tries++ {
		if c, err = rdmatest.Dial(ctx, t, cm.PSUDP, udaddyPort, rdmatest.Caps, nil); err == nil {
			break
		}
		if tries == 100 || ctx.Err() != nil {
			t.Fatalf("connecting to udaddy, %d tries: %v", tries, err)
		}
		if tries == 1 {
			t.Logf("udaddy not listening yet: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer rdmatest.Destroy(t, c)
	ev := c.Event()
	if ev.Type != cm.EventEstablished || ev.UD.QKey != cm.UDPQKey || !ev.UD.AHAttr.IsGlobal {
		t.Fatalf("UD connect event %v %+v", ev, ev.UD)
	}
	buf, m := rdmatest.Msgs(t, c, 2*udaddyCount*udaddySlot)
	postUdaddyRecvs(t, c, buf, m)
	ah := rdmatest.CreateAH(t, c, ev.UD.AHAttr)
	sendUdaddy(ctx, t, c, buf, m, ah, ev.UD.QPNum, ev.UD.QKey)
	first := recvUdaddy(ctx, t, c, ev.UD.QPNum)
	attr, err := c.Verbs().InitAHFromWC(c.PortNum(), &first, buf[:uverbs.GRHSize])
	rdmatest.Must(t, err)
	if attr.DGID != ev.UD.AHAttr.DGID || attr.SGIDIndex != ev.UD.AHAttr.SGIDIndex {
		t.Errorf("the answer's address %+v differs from the event's %+v", attr, ev.UD.AHAttr)
	}
	wait()
}

// TestDeviceUDConnectRequest pins what a UD listener's CONNECT_REQUEST
// carries: the client's private data and no address (the kernel fills
// only the private data of a SIDR request), so that the address handle of
// an answer comes from the client's datagram (CreateAHFromWC) or the ID's
// route, never from the event.
func TestDeviceUDConnectRequest(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSUDP)
	srv := rdmatest.AcceptAsync(ctx, l, rdmatest.Caps, nil)
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("udreq")
	c, err := rdmatest.Dial(ctx, t, cm.PSUDP, port, rdmatest.Caps, &p)
	s := <-srv
	if s.ID != nil {
		defer rdmatest.Destroy(t, s.ID)
	}
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, c)
	rdmatest.Must(t, s.Err)
	ev := s.ID.Event()
	t.Logf("%v: address %+v, QP %d, Q_Key %#x", ev, ev.UD.AHAttr, ev.UD.QPNum, ev.UD.QKey)
	if ev.Type != cm.EventConnectRequest || !strings.HasPrefix(string(ev.UD.PrivateData), "udreq") {
		t.Fatalf("event %v with private data %q", ev, ev.UD.PrivateData)
	}
	if ev.UD.AHAttr != (qp.AHAttr{}) || ev.UD.QPNum != 0 {
		t.Errorf("the kernel now fills the CONNECT_REQUEST's address (%+v, QP %d): cm/qp.go's CreateAH doc and this test are out of date",
			ev.UD.AHAttr, ev.UD.QPNum)
	}
	_, err = s.ID.CreateAH(ev.UD.AHAttr)
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("CreateAH of the CONNECT_REQUEST's empty address: %v, want EINVAL", err)
	}
}

// wantSGID checks that GID table index idx of the ID's port holds gid as a
// RoCE v2 GID.
func wantSGID(t *testing.T, id *cm.ID, idx uint8, gid qp.GID) {
	t.Helper()
	gids, err := id.Verbs().QueryGIDTable()
	rdmatest.Must(t, err)
	for _, g := range gids {
		if uint32(g.Port) == uint32(id.PortNum()) && uint32(g.Index) == uint32(idx) {
			if g.GID != gid || g.Type != uverbs.GIDTypeRoCEv2 {
				t.Errorf("SGID index %d holds %v (%v), want RoCE v2 GID %v", idx, g.GID, g.Type, gid)
			}
			return
		}
	}
	t.Errorf("SGID index %d is not in the table %v", idx, gids)
}
