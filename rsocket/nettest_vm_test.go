//go:build linux

package rsocket_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
)

// TestDeviceNettestConn runs golang.org/x/net/nettest's conformance suite
// for net.Conn: basic I/O, ping-pong, racing Reads, Writes and Closes,
// past and future deadlines, deadlines moved while blocked, and Close
// ending blocked calls; with waits in the runtime poller, and in the
// kernel (WaitInKernel), whose deadlines and Close take another path.
func TestDeviceNettestConn(t *testing.T) {
	testenv.RequireDevice(t)
	rdmatest.WaitModes(t, func(t *testing.T, direct bool) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			return makePipe(direct)
		})
	})
}

func makePipe(direct bool) (c1, c2 net.Conn, stop func(), err error) {
	lc := rsocket.ListenConfig{WaitInKernel: direct}
	l, err := lc.Listen(context.Background(), "rdma", rdmatest.VMAddr.String()+":0")
	if err != nil {
		return nil, nil, nil, err
	}
	d := rsocket.Dialer{WaitInKernel: direct}
	return rdmatest.Pipe(l, func(addr string) (net.Conn, error) { return d.Dial("rdma", addr) })
}

// TestDeviceListener checks what net.Listener promises, as nettest's
// listener tests do for package net: Accept returns connections in turn,
// from concurrent callers; Close ends a blocked Accept with net.ErrClosed
// and is idempotent; a closed listener's port refuses connections.
func TestDeviceListener(t *testing.T) {
	l := listen(t)
	if a, ok := l.Addr().(rsocket.Addr); !ok || a.Port() == 0 || a.Network() != "rdma" {
		t.Fatalf("Addr() = %#v", l.Addr())
	}
	const n = 4
	var wg sync.WaitGroup
	accepted := make(chan net.Conn, n)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("Accept: %v", err)
					}
					return
				}
				accepted <- c
			}
		}()
	}
	for i := range n {
		c, err := rsocket.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
		s := <-accepted
		defer s.Close()
		if s.RemoteAddr().String() != c.LocalAddr().String() {
			t.Errorf("accepted from %v, dialed from %v", s.RemoteAddr(), c.LocalAddr())
		}
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := s.Read(b[:]); err != nil || b[0] != byte(i) {
			t.Fatalf("connection %d read %d, %v", i, b[0], err)
		}
	}
	addr := l.Addr().String()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	time.Sleep(20 * time.Millisecond) // the Accepts block
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the blocked Accepts")
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	_, err := rsocket.Dial("rdma", addr)
	var oe *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) {
		t.Errorf("dial to a closed listener: %v, want a *net.OpError matching ECONNREFUSED", err)
	}
}
