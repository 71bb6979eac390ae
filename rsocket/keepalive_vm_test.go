//go:build linux

package rsocket_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
)

// pairWith connects d to a listener made by lc.
func pairWith(t testing.TB, d *rsocket.Dialer, lc *rsocket.ListenConfig) (client, server *rsocket.Conn) {
	t.Helper()
	testenv.RequireDevice(t)
	l, err := lc.Listen(context.Background(), "rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   *rsocket.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.AcceptRsocket()
		ch <- res{c, err}
	}()
	c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		c.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { c.Close(); r.c.Close() })
	return c, r.c
}

// TestDeviceKeepAliveFullQueue streams through the smallest send queue
// with the keepalive probing often on both sides: a probe takes a send
// queue slot of its own, and must never find the queue full of data, nor
// make a data post fail.
func TestDeviceKeepAliveFullQueue(t *testing.T) {
	const ka = 250 * time.Millisecond
	c, s := pairWith(t,
		&rsocket.Dialer{QueueDepth: 1, KeepAlive: ka, SendBuffer: 8192, Inline: -1},
		&rsocket.ListenConfig{QueueDepth: 1, KeepAlive: ka, RecvBuffer: 8192})
	const total = 4 << 20
	errc := make(chan error, 1)
	go func() {
		b := make([]byte, 16)
		var err error
		for n := 0; n < total && err == nil; n += len(b) {
			_, err = c.Write(b)
		}
		errc <- err
	}()
	n, err := io.CopyN(io.Discard, s, total)
	if err != nil {
		t.Fatalf("read %d of %d bytes: %v\nclient: %s\nserver: %s", n, total, err, c.DebugState(), s.DebugState())
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
}

// TestDeviceKeepAliveDeadPeer: a peer whose QP vanishes without a word,
// as when its machine loses power, is found by the keepalive within its
// bound. The blocked Read and later Writes fail with ETIMEDOUT, as a TCP
// connection's do when its keepalive gives up, wrapped as package net
// wraps them.
func TestDeviceKeepAliveDeadPeer(t *testing.T) {
	const ka = 500 * time.Millisecond
	c, s := pairWith(t, &rsocket.Dialer{KeepAlive: ka}, &rsocket.ListenConfig{})
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	time.Sleep(2 * ka) // probes answered meanwhile: the read stays blocked
	select {
	case err := <-readErr:
		t.Fatalf("read ended while the peer lived: %v", err)
	default:
	}
	t0 := time.Now()
	if err := rsocket.VanishForTest(s); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-readErr:
	case <-time.After(30 * time.Second):
		t.Fatalf("read still blocked 30 s after the peer vanished\nclient: %s", c.DebugState())
	}
	took := time.Since(t0)
	// The bound is the interval plus the timeout (both ka) from the first
	// probe nobody answers; rxe went on answering for about a second after
	// a QP was destroyed (cm's TestDeviceKeepAlive), and TCG scheduling
	// gets a margin.
	t.Logf("peer vanished: read ended after %v with %v", took, err)
	if took > 2*ka+5*time.Second {
		t.Errorf("dead peer found after %v; want within about %v", took, 2*ka)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("read: %v; want a read *net.OpError with ETIMEDOUT", err)
	}
	if err != nil && !strings.HasSuffix(err.Error(), "->"+s.LocalAddr().String()+": connection timed out") {
		t.Errorf("read: %q; want it to end as package net's: \"a->b: connection timed out\"", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("write after the peer was found dead: %v; want ETIMEDOUT", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
