package cm_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/wr"
)

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

// rdmaRes counts this program's rdma_cm IDs, QPs, CQs, MRs and PDs.
func rdmaRes(t testing.TB) string {
	t.Helper()
	if !testenv.InVM() {
		return ""
	}
	return strings.TrimSpace(rdmatest.LeftBehind(resKinds...))
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

// TestDeviceInteropCServer: our endpoint client against rdma-core's
// rdma_server, which receives 16 bytes and answers 16.
func TestDeviceInteropCServer(t *testing.T) {
	testenv.RequireDevice(t)
	srvPath, err := exec.LookPath("rdma_server")
	if err != nil {
		t.Skip("rdma-core's rdma_server is not installed (vm deps installs rdmacm-utils)")
	}
	ctx := rdmatest.Context(t)
	port := freePort(t)
	cmd := exec.CommandContext(ctx, srvPath, "-s", rdmatest.VMAddr.String(), "-p", fmt.Sprint(port))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	rdmatest.Must(t, cmd.Start())
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Logf("rdma_server: %s", out.String())
	}()
	res, err := cm.GetAddrInfo(rdmatest.VMAddr.String(), fmt.Sprint(port), &cm.AddrInfo{PortSpace: cm.PSTCP})
	rdmatest.Must(t, err)
	attr := epAttr()
	var id *cm.ID
	for range 50 { // until the server listens
		if id, err = cm.CreateEP(ctx, res, nil, &attr); err != nil {
			t.Fatal(err)
		}
		if err = rdmaClient(ctx, t, id); err == nil || !errors.Is(err, errRefused) {
			break
		}
		id.DestroyEP()
		id = nil
		time.Sleep(100 * time.Millisecond)
	}
	rdmatest.Must(t, err)
	rdmatest.Must(t, id.DestroyEP())
	if err := cmd.Wait(); err != nil {
		t.Errorf("rdma_server: %v", err)
	}
}

// TestDeviceInteropCClient: our endpoint server against rdma-core's
// rdma_client.
func TestDeviceInteropCClient(t *testing.T) {
	testenv.RequireDevice(t)
	cliPath, err := exec.LookPath("rdma_client")
	if err != nil {
		t.Skip("rdma-core's rdma_client is not installed (vm deps installs rdmacm-utils)")
	}
	ctx := rdmatest.Context(t)
	listen, port := listenEP(ctx, t)
	cmd := exec.CommandContext(ctx, cliPath, "-s", rdmatest.VMAddr.String(), "-p", fmt.Sprint(port))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	rdmatest.Must(t, cmd.Start())
	err = rdmaServer(ctx, t, listen)
	werr := cmd.Wait()
	t.Logf("rdma_client: %s", out.String())
	rdmatest.Must(t, err)
	if werr != nil {
		t.Errorf("rdma_client: %v", werr)
	}
}

var errRefused = errors.New("refused")

func freePort(t testing.TB) uint16 {
	l, port := rdmatest.Listen(t, cm.PSTCP)
	rdmatest.Destroy(t, l)
	return port
}

// epCtx bounds one endpoint exchange.
func epCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 20*time.Second)
}
