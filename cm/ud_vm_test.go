package cm_test

import (
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const grh = 40 // UD receives start with the GRH

// TestDeviceUD resolves a UD service (SIDR), sends to it with PostUDSend
// and gets an answer.
func TestDeviceUD(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSUDP)
	if l.QPType() != qp.UD {
		t.Fatalf("PSUDP ID has QP type %v", l.QPType())
	}
	sbuf := rdmatest.Alloc(t, 4096)
	type result struct {
		qpn uint32
		err error
	}
	srv := make(chan result, 1)
	done := make(chan struct{})
	var server *cm.ID
	go func() {
		id, err := l.GetRequest(ctx)
		if err != nil {
			srv <- result{err: err}
			return
		}
		server = id
		ev := id.Event()
		t.Logf("UD request: %v, private %q", ev, ev.PrivateData()[:8])
		if err = id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}); err != nil {
			srv <- result{err: err}
			return
		}
		m, err := id.RegMsgs(sbuf)
		if err != nil {
			srv <- result{err: err}
			return
		}
		defer cm.DeregMR(m)
		rdmatest.Must(t, id.PostRecv(1, sbuf[:grh+64], m))
		srv <- result{qpn: id.QP().Num(), err: id.Accept(ctx, nil)}

		wc, err := id.GetRecvComp(ctx)
		wantComp(t, "server recv", wc, err, 1, wr.WCRecv)
		if got := string(sbuf[grh:wc.ByteLen]); got != "datagram" {
			t.Errorf("server got %q", got)
		}
		// The CONNECT_REQUEST carries no address (TestDeviceUDConnectRequest):
		// the answer goes where the datagram came from.
		ah, err := id.PD().CreateAHFromWC(&wc, sbuf[:grh], id.PortNum())
		rdmatest.Must(t, err)
		defer ah.Close()
		copy(sbuf[1000:], "reply")
		sendUD(ctx, t, "server send", id, 2, sbuf[1000:1005], m, wr.Signaled, ah, wc.SrcQP)
		close(done)
	}()

	p := cm.DefaultConnParam()
	p.PrivateData = []byte("udping")
	c, err := rdmatest.Dial(ctx, t, cm.PSUDP, port, rdmatest.Caps, &p)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, c)
	s := <-srv
	rdmatest.Must(t, s.err)
	defer rdmatest.Destroy(t, server)
	ev := c.Event()
	if ev.Type != cm.EventEstablished || ev.UD.QPNum != s.qpn || ev.UD.QKey != cm.UDPQKey || !ev.UD.AHAttr.IsGlobal {
		t.Fatalf("UD connect event %v %+v, want server QP %d, Q_Key %#x", ev, ev.UD, s.qpn, cm.UDPQKey)
	}
	if st := c.QP().State(); st != qp.StateRTS {
		t.Fatalf("UD QP in %v", st)
	}
	cbuf, m := rdmatest.Msgs(t, c, 4096)
	rdmatest.Must(t, c.PostRecv(3, cbuf[:grh+64], m))
	ah := rdmatest.CreateAH(t, c, ev.UD.AHAttr)
	sendUD(ctx, t, "client send", c, 4, []byte("datagram"), nil, wr.Signaled|wr.Inline, ah, ev.UD.QPNum)
	wc, err := c.GetRecvComp(ctx)
	wantComp(t, "client recv", wc, err, 3, wr.WCRecv)
	if got := string(cbuf[grh:wc.ByteLen]); got != "reply" || wc.SrcQP != s.qpn {
		t.Errorf("client got %q from QP %d", got, wc.SrcQP)
	}
	<-done
}
