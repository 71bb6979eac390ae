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
	"github.com/rdmago/rdma/uverbs"
)

// TestDeviceReject: the server rejects with private data; the client's
// Connect fails with ECONNREFUSED, and its REJECTED event carries the data
// and the reason.
func TestDeviceReject(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSTCP)
	srv := make(chan error, 1)
	go func() {
		id, err := l.GetRequest(ctx)
		if err != nil {
			srv <- err
			return
		}
		if pd := id.Event().PrivateData(); !strings.HasPrefix(string(pd), "let me in") {
			t.Errorf("request private data %q", pd)
		}
		err = id.Reject([]byte("go away"))
		rdmatest.Destroy(t, id)
		srv <- err
	}()
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("let me in")
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, id)
	rdmatest.Must(t, id.ResolveAddr(ctx, netip.AddrPort{}, rdmatest.VMAddrPort(port), 0))
	rdmatest.Must(t, id.ResolveRoute(ctx, 0))
	rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Cap: rdmatest.Caps}))
	err = id.Connect(ctx, &p)
	rdmatest.Must(t, <-srv)
	wantErrno(t, "connect", err, unix.ECONNREFUSED)
	var ce *cm.Error
	if !errors.As(err, &ce) || ce.Event != cm.EventRejected || ce.Status != 28 {
		t.Fatalf("connect: %#v, want REJECTED with status 28 (consumer defined)", err)
	}
	ev := id.Event()
	if ev == nil || ev.Type != cm.EventRejected || !strings.HasPrefix(string(ev.PrivateData()), "go away") {
		t.Fatalf("reject event %v, private data %q", ev, ev.PrivateData())
	}
	wantErrno(t, "event error", ev.Err(), unix.ECONNREFUSED)
	if s := id.QP().State(); s.String() != "ERR" {
		t.Errorf("QP in %v after the reject, want ERR", s)
	}
}

// TestDeviceConnectNoListener connects to a port nobody listens on: the
// peer's kernel rejects it at once.
func TestDeviceConnectNoListener(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSTCP)
	rdmatest.Destroy(t, l)
	start := time.Now()
	id, err := rdmatest.Dial(ctx, t, cm.PSTCP, port, rdmatest.Caps, nil)
	if err == nil {
		rdmatest.Destroy(t, id)
		t.Fatal("connected to a port nobody listens on")
	}
	wantErrno(t, "connect", err, unix.ECONNREFUSED)
	var ce *cm.Error
	if errors.As(err, &ce) {
		t.Logf("%v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %v", d)
	}
}

// TestDeviceResolveNoRoute resolves a TEST-NET address the VM has no route
// to: the kernel refuses at once.
func TestDeviceResolveNoRoute(t *testing.T) {
	testenv.RequireDevice(t)
	ctx := rdmatest.Context(t)
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, id)
	start := time.Now()
	err = id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), time.Second)
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
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	defer rdmatest.Destroy(t, id)
	start := time.Now()
	err = id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), 500*time.Millisecond)
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
