//go:build linux

package uverbs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

// TestNoDevice runs in a VM booted without rxe0 (make test runs it with
// `vm run --no-rdma`): the RDMA modules are loaded but there is no device.
func TestNoDevice(t *testing.T) {
	testenv.RequireNoDevice(t)
	devs, err := uverbs.Devices()
	if err != nil || len(devs) != 0 {
		t.Fatalf("Devices() = %v, %v; want an empty list", devs, err)
	}
	_, err = uverbs.Open("rxe0")
	if !errors.Is(err, uverbs.ErrNoDevice) || !strings.Contains(err.Error(), "no RDMA devices") {
		t.Fatalf("Open(rxe0) = %v; want ErrNoDevice", err)
	}
}

// TestDevicePermissionDenied opens the device through a node that only its
// owner may open, from a thread that has given up CAP_DAC_OVERRIDE, so root
// is refused as an ordinary user would be. The error must say so.
func TestDevicePermissionDenied(t *testing.T) {
	name := testenv.RequireDevice(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to create the device node")
	}
	dev := findDevice(t, name)
	var st unix.Stat_t
	if err := unix.Stat(dev.DevPath, &st); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(t.TempDir(), "uverbs-locked")
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(node, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	dev.DevPath = node

	errc := make(chan error, 1)
	go func() {
		// The capability change applies to this OS thread only; the thread
		// is never unlocked, so the runtime discards it when we return.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		for _, c := range []uint{unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER} {
			data[c/32].Effective &^= 1 << (c % 32)
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		ctx, err := dev.Open()
		if err == nil {
			ctx.Close()
		}
		errc <- err
	}()
	err := <-errc
	if !errors.Is(err, unix.EACCES) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Open through a node we may not open = %v; want EACCES saying permission denied", err)
	}
	t.Log(err)
}

func findDevice(t *testing.T, name string) uverbs.Device {
	t.Helper()
	devs, err := uverbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s in %+v", name, devs)
	return uverbs.Device{}
}
