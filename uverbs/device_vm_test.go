package uverbs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

func readSys(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestDeviceOpenAndQuery opens the soft-RoCE device and checks what the
// queries return against the kernel's own sysfs view of it.
func TestDeviceOpenAndQuery(t *testing.T) {
	name := testenv.RequireDevice(t)
	devs, err := uverbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var dev *uverbs.Device
	for i := range devs {
		if devs[i].Name == name {
			dev = &devs[i]
		}
	}
	if dev == nil {
		t.Fatalf("Devices() = %+v, no %s", devs, name)
	}
	t.Logf("kernel %s: %+v", testenv.Kernel(), *dev)
	sys := filepath.Join("/sys/class/infiniband", name)
	if got, want := dev.NodeGUID.String(), readSys(t, sys, "node_guid"); got != want {
		t.Errorf("node GUID %s, sysfs says %s", got, want)
	}
	if name == "rxe0" && (dev.Driver != "rxe" || dev.Transport != uverbs.TransportIB || dev.NodeType != uverbs.NodeCA) {
		t.Errorf("rxe0 reported as driver %q transport %v node type %v", dev.Driver, dev.Transport, dev.NodeType)
	}

	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()

	attr, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.NodeGUID != dev.NodeGUID {
		t.Errorf("query device node GUID %s, netlink %s", attr.NodeGUID, dev.NodeGUID)
	}
	if got, want := attr.SysImageGUID.String(), readSys(t, sys, "sys_image_guid"); got != want {
		t.Errorf("sys_image_guid %s, sysfs says %s", got, want)
	}
	if attr.PhysPortCnt < 1 || attr.MaxQP < 1 || attr.MaxCQE < 1 || attr.MaxPD < 1 {
		t.Errorf("implausible device attributes: %+v", attr)
	}

	for p := 1; p <= int(attr.PhysPortCnt); p++ {
		pa, err := ctx.QueryPort(uint8(p))
		if err != nil {
			t.Fatal(err)
		}
		port := filepath.Join(sys, "ports", strconv.Itoa(p))
		state := readSys(t, port, "state") // "4: ACTIVE"
		if n, _, _ := strings.Cut(state, ":"); n != strconv.Itoa(int(pa.State)) {
			t.Errorf("port %d state %v, sysfs says %q", p, pa.State, state)
		}
		if ll := readSys(t, port, "link_layer"); ll != pa.LinkLayer.String() {
			t.Errorf("port %d link layer %v, sysfs says %q", p, pa.LinkLayer, ll)
		}
		if pa.GIDTblLen < 1 {
			t.Errorf("port %d has an empty GID table", p)
		}
	}

	gids, err := ctx.QueryGIDTable()
	if err != nil {
		t.Fatal(err)
	}
	if len(gids) == 0 {
		t.Fatal("no GIDs")
	}
	for _, g := range gids {
		want := readSys(t, sys, "ports", strconv.Itoa(int(g.Port)), "gids", strconv.Itoa(int(g.Index)))
		if g.GID.String() != want {
			t.Errorf("GID[%d] %s, sysfs says %s", g.Index, g.GID, want)
		}
		typ := readSys(t, sys, "ports", strconv.Itoa(int(g.Port)), "gid_attrs/types", strconv.Itoa(int(g.Index)))
		if (typ == "RoCE v2") != (g.Type == uverbs.GIDTypeRoCEv2) {
			t.Errorf("GID[%d] type %v, sysfs says %q", g.Index, g.Type, typ)
		}
	}
	if name == "rxe0" && testenv.InVM() {
		// The VM runner gives rxe0's netdev 10.0.2.15: its RoCE v2 GID must be there.
		found := false
		for _, g := range gids {
			if g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().String() == "10.0.2.15" {
				found = g.NetdevIndex != 0
			}
		}
		if !found {
			t.Errorf("no RoCE v2 GID for 10.0.2.15 with a netdev in %+v", gids)
		}
	}

	// Close releases everything; it is idempotent and later use is an error.
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := ctx.QueryPort(1); !errors.Is(err, uverbs.ErrClosed) {
		t.Fatalf("QueryPort after Close: %v, want ErrClosed", err)
	}
}

func TestDeviceErrors(t *testing.T) {
	name := testenv.RequireDevice(t)
	_, err := uverbs.Open("nosuchdev9")
	if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Open(nosuchdev9) = %v; want ENODEV naming %s", err, name)
	}
	ctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if _, err := ctx.QueryPort(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QueryPort(0) = %v, want EINVAL", err)
	}
	if _, err := ctx.QueryPort(200); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QueryPort(200) = %v, want EINVAL", err)
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Opening and closing many contexts must not leak descriptors.
func TestDeviceNoLeak(t *testing.T) {
	name := testenv.RequireDevice(t)
	before := openFDs(t)
	for i := 0; i < 50; i++ {
		ctx, err := uverbs.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ctx.QueryDevice(); err != nil {
			t.Fatal(err)
		}
		ctx.Close()
	}
	if after := openFDs(t); after != before {
		t.Fatalf("open descriptors went from %d to %d over 50 open/close cycles", before, after)
	}
}
