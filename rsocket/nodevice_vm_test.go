//go:build linux

package rsocket_test

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
)

// TestNoDevice runs in a VM booted without RDMA devices (make
// test-nodevice): Dial and Listen fail with ENODEV, wrapped as package net
// wraps a system call's errno, as rsocket(3) fails with errno ENODEV.
func TestNoDevice(t *testing.T) {
	testenv.RequireNoDevice(t)
	addr := netip.AddrPortFrom(rdmatest.VMAddr, 7471).String()
	_, err := rsocket.Dial("rdma", addr)
	checkNoDevice(t, "dial", err)
	l, err := rsocket.Listen("rdma", addr)
	if err == nil {
		l.Close()
	}
	checkNoDevice(t, "listen", err)
}

func checkNoDevice(t *testing.T, op string, err error) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("%s with no RDMA device: %v; want a %s *net.OpError matching ENODEV", op, err, op)
	}
	t.Logf("%s: %v", op, err)
}
