package cm_test

import (
	"bytes"
	"context"
	"errors"
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

// exampleCaps are the caps of the IDs the examples' peers and stand-ins
// use: two SGEs for the vectored calls, 64 inline bytes.
var exampleCaps = qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// runExample runs an example and checks that it printed want (a part of
// its output), or nothing when want is empty. A failing example calls
// log.Fatal, which ends the test binary and fails the run.
func runExample(t *testing.T, f func(), want string) {
	t.Helper()
	out := rdmatest.Stdout(t, f)
	if want == "" && out != "" || !strings.Contains(out, want) {
		t.Errorf("printed %q, want %q", out, want)
		return
	}
	t.Logf("printed %q", out)
}

// listenAt makes a synchronous listener on the examples' fixed address,
// closed when the test ends.
func listenAt(t *testing.T, ps cm.PortSpace, port uint16) *cm.ID {
	t.Helper()
	l, err := cm.CreateID(nil, nil, ps)
	rdmatest.Must(t, err)
	t.Cleanup(func() { rdmatest.Destroy(t, l) })
	rdmatest.Must(t, l.BindAddr(netip.AddrPortFrom(rdmatest.VMAddr, port)))
	rdmatest.Must(t, l.Listen(0))
	return l
}

// connectedPair sets the examples' stand-in connected to the client of a
// new connection and returns the server side.
func connectedPair(t *testing.T, prep func(*cm.ID)) *cm.ID {
	p := rdmatest.ConnectCM(t, cm.PSTCP, exampleCaps, prep)
	connected = p.Client
	t.Cleanup(func() { connected = nil })
	return p.Server
}

// sendAndWait sends msg inline on id and waits for its completion. With
// peerLeaves, a flushed completion counts as sent: the peer closes its
// QP as soon as it has the message, and a QP in the error state sends no
// acknowledgement, so the sender's request can be flushed after it was
// delivered. The caller checks the delivery at the peer.
func sendAndWait(ctx context.Context, id *cm.ID, msg string, peerLeaves bool) error {
	if err := id.PostSend(1, []byte(msg), nil, wr.Inline|wr.Signaled); err != nil {
		return err
	}
	_, err := id.GetSendComp(ctx)
	if peerLeaves && errors.Is(err, wr.ErrFlushed) {
		return nil
	}
	return err
}

// TestDeviceExamples runs the examples that need a device, which go test
// only compiles, each against the peer it assumes, and checks what they
// print and what their peer saw.
func TestDeviceExamples(t *testing.T) {
	rdmatest.Open(t) // fails under the VM runner when the device is missing
	ctx := rdmatest.Context(t)

	t.Run("CreateEP", func(t *testing.T) {
		done := make(chan struct{})
		go func() { ExampleCreateEP_server(); close(done) }()
		rdmatest.WaitCMListening(t, 7471) // ExampleCreateEP_server's
		runExample(t, ExampleCreateEP_client, `16 bytes: "sixteen bytes!!!"`)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ExampleCreateEP_server did not return after its one exchange")
		}
	})

	t.Run("EventChannel", func(t *testing.T) {
		l := listenAt(t, cm.PSTCP, 7471)
		srv := rdmatest.AcceptAsync(ctx, l, exampleCaps, nil)
		done := make(chan error, 1)
		go func() {
			s := <-srv
			if s.Err != nil {
				done <- s.Err
				return
			}
			defer s.ID.Close()
			// The example disconnects once established and waits for its
			// DISCONNECTED, which needs this side's answer (DREP): without
			// it the event comes with ETIMEDOUT.
			done <- s.ID.Disconnect(ctx)
		}()
		runExample(t, ExampleEventChannel_GetEvent, "connected to 10.0.2.15:7471\n")
		rdmatest.Must(t, <-done)
	})

	t.Run("SetKeepAlive", func(t *testing.T) {
		l := listenAt(t, cm.PSTCP, 7471)
		srv := rdmatest.AcceptAsync(ctx, l, exampleCaps, nil)
		done := make(chan error, 1)
		go func() {
			s := <-srv
			if s.Err != nil {
				done <- s.Err
				return
			}
			defer s.ID.Close()
			// The example closes its ID as soon as it has the reply,
			// perhaps before its device acknowledged it: then the
			// completion here is flushed. What it printed shows the
			// reply arrived.
			done <- sendAndWait(ctx, s.ID, "keepalive reply!", true)
			s.ID.Disconnect(ctx)
		}()
		runExample(t, ExampleID_SetKeepAlive, `"keepalive reply!"`)
		rdmatest.Must(t, <-done)
	})

	t.Run("PostSend", func(t *testing.T) {
		var buf []byte
		srv := connectedPair(t, func(id *cm.ID) {
			var m *uverbs.MR
			buf, m = rdmatest.Msgs(t, id, 64)
			rdmatest.Must(t, id.PostRecv(1, buf, m))
		})
		runExample(t, ExampleID_PostSend, "42\n")
		wc, err := srv.GetRecvComp(ctx)
		rdmatest.Must(t, err)
		if got := string(buf[:wc.ByteLen]); got != "hello" {
			t.Errorf("the peer received %q, want %q", got, "hello")
		}
	})

	t.Run("PostRecv", func(t *testing.T) {
		srv := connectedPair(t, nil)
		done := make(chan error, 1)
		go func() {
			// Sent before or after the example posts its receive: RC
			// retries a receiver not ready (rnr_retry_count 7).
			done <- sendAndWait(ctx, srv, "hello", false)
		}()
		runExample(t, ExampleID_PostRecv, `request 7: "hello"`)
		// Before the cleanup closes the example's ID, which could take
		// the acknowledgement with it.
		rdmatest.Must(t, <-done)
	})

	t.Run("PostRecvv", func(t *testing.T) {
		var buf []byte
		srv := connectedPair(t, func(id *cm.ID) {
			var m *uverbs.MR
			buf, m = rdmatest.Msgs(t, id, 64)
			rdmatest.Must(t, id.PostRecv(1, buf, m))
		})
		got := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			defer close(got)
			wc, err := srv.GetRecvComp(ctx)
			if err != nil {
				done <- err
				return
			}
			got <- string(buf[:wc.ByteLen])
			done <- sendAndWait(ctx, srv, "scattered reply!", false)
		}()
		runExample(t, ExampleID_PostRecvv, `16 bytes: "scattere", then "d reply!"`)
		rdmatest.Must(t, <-done)
		if msg := <-got; msg != "gathered message" {
			t.Errorf("the peer received %q, want %q", msg, "gathered message")
		}
	})

	t.Run("PostWrite", func(t *testing.T) {
		srv := connectedPair(t, nil)
		buf := rdmatest.Alloc(t, 4096)
		m := rdmatest.Reg(t, srv.RegWrite, buf)
		peerMemory = m.Remote()
		runExample(t, ExampleID_PostWrite, "")
		if !bytes.HasPrefix(buf, []byte("written remotely")) {
			t.Errorf("the peer's memory holds %q", buf[:16])
		}
	})

	t.Run("RegWrite", func(t *testing.T) {
		connectedPair(t, nil)
		runExample(t, ExampleID_RegWrite, "tell the peer: address 0x")
	})

	t.Run("PostRead", func(t *testing.T) {
		srv := connectedPair(t, nil)
		buf := rdmatest.Alloc(t, 4096)
		copy(buf, "read remotely")
		m := rdmatest.Reg(t, srv.RegRead, buf)
		peerMemory = m.Remote()
		runExample(t, ExampleID_PostRead, "")
	})

	t.Run("PostUDSend", func(t *testing.T) {
		l := listenAt(t, cm.PSUDP, 7174)
		got := make(chan string, 1)
		go func() {
			defer close(got)
			id, err := l.GetRequest(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer id.Close()
			if err := id.CreateQP(nil, uverbs.QPInitAttr{Caps: exampleCaps}); err != nil {
				t.Error(err)
				return
			}
			buf, m := rdmatest.Msgs(t, id, 128)
			if err := id.PostRecv(1, buf, m); err != nil {
				t.Error(err)
				return
			}
			if err := id.Accept(ctx, nil); err != nil {
				t.Error(err)
				return
			}
			wc, err := id.GetRecvComp(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			grh := uverbs.GRHSize // a UD receive starts with the packet's GRH
			got <- string(buf[grh:wc.ByteLen])
		}()
		runExample(t, ExampleID_PostUDSend, "")
		select {
		case msg := <-got:
			if msg != "datagram" {
				t.Errorf("the service received %q, want %q", msg, "datagram")
			}
		case <-time.After(10 * time.Second):
			t.Error("the service received nothing within 10 s")
		}
	})
}
