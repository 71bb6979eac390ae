//go:build linux

package rsocket_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
)

// listen listens on the VM's address, on a free port.
func listen(t testing.TB) *rsocket.Listener {
	t.Helper()
	testenv.RequireDevice(t)
	l, err := rsocket.Listen("rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pair returns the two ends of a connection made with the defaults.
func pair(t testing.TB) (client, server *rsocket.Conn) {
	t.Helper()
	return pairWith(t, &rsocket.Dialer{}, &rsocket.ListenConfig{})
}

func TestDeviceEcho(t *testing.T) {
	c, s := pair(t)
	t.Logf("client %v -> %v, server %v -> %v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	go io.Copy(s, s)
	for _, n := range []int{1, 64, 65, 4096, 100000, 1 << 20} {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(rand.IntN(256))
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(out)
			errc <- err
		}()
		in := make([]byte, n)
		stop := time.AfterFunc(10*time.Second, func() {
			t.Logf("client: %s", c.DebugState())
			t.Logf("server: %s", s.DebugState())
		})
		_, err := io.ReadFull(c, in)
		stop.Stop()
		if err != nil {
			t.Fatalf("%d bytes: read: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%d bytes: write: %v", n, err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("%d bytes: echo differs", n)
		}
	}
}

func TestDeviceCloseWriteEOF(t *testing.T) {
	c, s := pair(t)
	want := sha256.Sum256([]byte("x"))
	go func() {
		c.Write(want[:])
		c.CloseWrite()
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("read %x, want %x", got, want)
	}
	// The other direction still works after the peer's SHUTDOWN.
	if _, err := s.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "back" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := c.Write([]byte("more")); err == nil {
		t.Fatal("write after CloseWrite succeeded")
	}
}

func TestDeviceDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read: %v is not a net.Error timeout", err)
	}
	t.Logf("timed out after %v", time.Since(start))
	// Closing unblocks a Read with no deadline.
	c.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the Read")
	}
}

func TestDevicePeerClose(t *testing.T) {
	c, s := pair(t)
	c.Write([]byte("bye"))
	c.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	} else {
		t.Logf("write after peer's close: %v", err)
	}
}

// Both ends shut their sending down, read to EOF and close, as rdmago
// rstream does: neither Close may wait out the 2 s linger for the other
// to disconnect first (each SHUTDOWN crossed the other, so each side's
// Close once waited for the peer's rdma_cm disconnect).
func TestDeviceMutualCloseWrite(t *testing.T) {
	c, s := pair(t)
	errc := make(chan error, 2)
	took := make(chan time.Duration, 2)
	for _, conn := range []*rsocket.Conn{c, s} {
		go func() {
			if err := conn.CloseWrite(); err != nil {
				errc <- err
				return
			}
			if _, err := io.ReadAll(conn); err != nil {
				errc <- err
				return
			}
			start := time.Now()
			errc <- conn.Close()
			took <- time.Since(start)
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if d := <-took; d > time.Second {
			t.Errorf("Close took %v: it waited for the peer (the linger is 2 s)", d)
		} else {
			t.Logf("Close took %v", d)
		}
	}
}
