//go:build linux

package rsocket_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/rsocket"
)

// TestDeviceDialErrors checks that failures to connect are what package
// net gives: a *net.OpError whose error matches what a TCP dial's would,
// for a network with no route, a host that never answers, malformed
// addresses and a network that is not ours.
func TestDeviceDialErrors(t *testing.T) {
	testenv.RequireDevice(t)
	// TEST-NET-2, with no route at all (the VM has only its link's).
	_, err := rsocket.Dial("rdma", "198.51.100.1:7471")
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("dial with no route: %v, want a dial *net.OpError matching ENETUNREACH", err)
	}
	// A host on the link that never answers (the VM's link is a dummy
	// device, which needs no ARP and drops what it is given): the
	// connect request goes unanswered until the dial's timeout, which
	// ends it as package net's does.
	d := rsocket.Dialer{Timeout: 2 * time.Second}
	start := time.Now()
	_, err = d.DialContext(context.Background(), "rdma", "10.0.2.99:7471")
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() || !errors.As(err, &oe) {
		t.Errorf("dial past its timeout: %v, want a *net.OpError timeout matching os.ErrDeadlineExceeded", err)
	}
	for _, addr := range []string{"10.0.2.15", "10.0.2.15:99999", "[::1", "10.0.2.15:http-nonexistent-service"} {
		if _, err := rsocket.Dial("rdma", addr); err == nil {
			t.Errorf("dial %q succeeded", addr)
		} else if _, ok := err.(*net.OpError); !ok {
			t.Errorf("dial %q: %T %v, want a *net.OpError", addr, err, err)
		}
	}
	// The same unanswered host, the dial cancelled half a second in: an
	// error matching context.Canceled, as package net's.
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	if _, err = d.DialContext(cctx, "rdma", "10.0.2.99:7471"); !errors.Is(err, context.Canceled) || !errors.As(err, &oe) {
		t.Errorf("dial cancelled: %v, want a *net.OpError matching context.Canceled", err)
	}
	if _, err := rsocket.Dial("tcp", "10.0.2.15:7471"); err == nil {
		t.Error(`dial on network "tcp" succeeded`)
	} else if !errors.As(err, new(net.UnknownNetworkError)) {
		t.Errorf(`dial on network "tcp": %v, want net.UnknownNetworkError`, err)
	}
}
