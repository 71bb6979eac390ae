//go:build linux

package rsocket_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
	"github.com/rdmago/rdma/uverbs"
)

// TestNoRDMAHost checks the package doc's promise on a host with no RDMA
// modules at all: Dial and Listen fail with a *net.OpError matching ENODEV
// (and uverbs.ErrNoDevice) whose text names the module to load.
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
	c, err := rsocket.Dial("rdma", "127.0.0.1:7471")
	if c != nil {
		c.Close()
	}
	check("dial", err)
	c, err = (&rsocket.Dialer{}).DialContext(context.Background(), "rdma6", "[::1]:7471")
	if c != nil {
		c.Close()
	}
	check("dial", err)
	l, err := rsocket.Listen("rdma", ":7471")
	if l != nil {
		l.Close()
	}
	check("listen", err)
}
