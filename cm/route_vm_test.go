package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
)

// TestDeviceResolveNoRoute resolves a TEST-NET address the VM has no route
// to: the kernel refuses at once.
func TestDeviceResolveNoRoute(t *testing.T) {
	testenv.RequireDevice(t)
	ctx := rdmatest.Context(t)
	id := rdmatest.NewID(t, nil, nil, cm.PSTCP)
	start := time.Now()
	err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), time.Second)
	t.Logf("%v after %v", err, time.Since(start))
	if !errors.Is(err, unix.ENETUNREACH) && !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("resolve 192.0.2.1: %v, want an unreachable or timeout error", err)
	}
}

// blackhole routes TEST-NET-1 (192.0.2.0/24) to a veth pair whose other end
// answers nobody: address resolution waits for an ARP reply that never
// comes, and traffic never leaves the VM.
var blackhole = sync.OnceValue(func() error {
	if !testenv.InVM() {
		return errors.New("the black hole is only made in the VM")
	}
	ip := "/usr/sbin/ip"
	if _, err := os.Stat(ip); err != nil {
		ip = "/sbin/ip"
	}
	for _, args := range [][]string{
		{"link", "add", "rdmagotest0", "type", "veth", "peer", "name", "rdmagotest1"},
		{"addr", "add", "192.0.2.2/24", "dev", "rdmagotest0"},
		{"link", "set", "rdmagotest0", "up"},
		{"link", "set", "rdmagotest1", "up"},
	} {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return errors.New(ip + " " + strings.Join(args, " ") + ": " + err.Error() + ": " + string(out))
		}
	}
	return nil
})

func needBlackhole(t *testing.T) {
	testenv.RequireDevice(t)
	if err := blackhole(); err != nil {
		if testenv.InVM() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestDeviceResolveTimeout resolves an address whose neighbour never
// answers: ADDR_ERROR with ETIMEDOUT once timeout_ms has passed.
func TestDeviceResolveTimeout(t *testing.T) {
	needBlackhole(t)
	ctx := rdmatest.Context(t)
	id := rdmatest.NewID(t, nil, nil, cm.PSTCP)
	start := time.Now()
	err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), 500*time.Millisecond)
	d := time.Since(start)
	t.Logf("%v after %v", err, d)
	wantErrno(t, "resolve", err, unix.ETIMEDOUT)
	var ce *cm.Error
	if !errors.As(err, &ce) || ce.Event != cm.EventAddrError {
		t.Errorf("error %#v, want an ADDR_ERROR event", err)
	}
	if d < 400*time.Millisecond || d > 10*time.Second {
		t.Errorf("timed out after %v, asked for 500ms", d)
	}
}

// TestDeviceResolveCancel cancels a resolution through its context.
func TestDeviceResolveCancel(t *testing.T) {
	needBlackhole(t)
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err = id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), 30*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("resolve: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	start = time.Now()
	rdmatest.Destroy(t, id)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("destroy after cancel took %v", d)
	}

	// A deadline ends the wait the same way.
	id, err = cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, id)
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	err = id.ResolveAddr(dctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), 30*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resolve: %v, want context.DeadlineExceeded", err)
	}
}
