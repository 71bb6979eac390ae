package tcpexch

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func TestDialAcceptOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen(ctx, "tcp4", 0)
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := AcceptOne(ctx, ln)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	// The first host does not answer; Dial goes on to the next.
	c := Dial(ctx, "tcp4", []string{"127.0.0.1:bad", "127.0.0.1"}, port)
	if c == nil {
		t.Fatal("Dial: no connection")
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("AcceptOne: no connection")
	}
	defer s.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}
	// AcceptOne closed the listener.
	if _, err := net.Dial("tcp4", ln.Addr().String()); err == nil {
		t.Error("the listener still accepts")
	}
}

func TestDialNone(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if c := Dial(context.Background(), "tcp4", []string{"127.0.0.1"}, port); c != nil {
		c.Close()
		t.Error("Dial connected to a closed port")
	}
}

func TestAcceptOneEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := Listen(ctx, "tcp4", 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if c, err := AcceptOne(ctx, ln); err == nil {
		c.Close()
		t.Error("AcceptOne returned a connection")
	}
}
