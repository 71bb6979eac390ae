//go:build linux

package valkeyrdma_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/valkeyrdma"
)

// TestNoRDMAHost checks the docs' promise on a host with no RDMA modules:
// Dial and Listen fail with a *net.OpError matching ENODEV (and
// uverbs.ErrNoDevice) whose text names the module to load, so that a
// client library's dial error says what is missing.
func TestNoRDMAHost(t *testing.T) {
	testenv.RequireNoRDMA(t)
	check := func(op string, err error) {
		t.Helper()
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != op || !errors.Is(err, syscall.ENODEV) || !errors.Is(err, uverbs.ErrNoDevice) ||
			!strings.Contains(err.Error(), "rdma_ucm") {
			t.Errorf("%s on a host without RDMA: %v; want a %s *net.OpError matching ENODEV and uverbs.ErrNoDevice that names rdma_ucm", op, err, op)
		}
	}
	c, err := valkeyrdma.Dial("tcp", "127.0.0.1:6379")
	if c != nil {
		c.Close()
	}
	check("dial", err)
	c, err = valkeyrdma.DialContext(context.Background(), "rdma6", "[::1]:6379")
	if c != nil {
		c.Close()
	}
	check("dial", err)
	l, err := valkeyrdma.Listen("rdma", ":6379")
	if l != nil {
		l.Close()
	}
	check("listen", err)
	if _, err := valkeyrdma.Dial("udp", "127.0.0.1:6379"); !strings.Contains(err.Error(), "unknown network udp") {
		t.Errorf("Dial udp: %v", err)
	}
}
