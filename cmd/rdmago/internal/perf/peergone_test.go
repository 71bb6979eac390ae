package perf

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestPeerGone: peerGone sees the end of the exchange socket's stream
// without reading anything from it, and nothing while the peer is there,
// whatever it has sent.
func TestPeerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &perfRun{netConn: c, netFD: -1}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { r.netFD = int(fd) })

	if r.peerGone() {
		t.Fatal("peerGone with the peer connected and silent")
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if r.peerGone() {
		t.Fatal("peerGone with a byte from the peer unread")
	}
	if n := testing.AllocsPerRun(100, func() { r.peerGone() }); n != 0 {
		t.Errorf("peerGone allocates %v times", n)
	}
	var b [1]byte
	if n, err := c.Read(b[:]); n != 1 || b[0] != 'x' || err != nil {
		t.Fatalf("the peer's byte after peerGone: %d %q %v; want it unread by peerGone", n, b[:n], err)
	}
	peer.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !r.peerGone() {
		if time.Now().After(deadline) {
			t.Fatal("peerGone does not see the peer's close")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
