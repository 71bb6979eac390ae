// Package testenv tells tests whether an RDMA device is there to test on.
//
// Tests that need a device call RequireDevice. On a developer's host without
// RDMA they skip; under the VM runner (hack/vm, which sets RDMAGO_VM=1 and
// creates rxe0) a missing device is a failure, so a broken VM can never pass
// by skipping everything.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InVM reports whether the test runs under the project's VM runner.
func InVM() bool { return os.Getenv("RDMAGO_VM") == "1" }

// Kernel returns the kernel version the VM runner booted, or "" on a host.
func Kernel() string { return os.Getenv("RDMAGO_KERNEL") }

// DeviceName is the device tests use: $RDMAGO_DEVICE, or rxe0, the soft-RoCE
// device the VM runner creates.
func DeviceName() string {
	if d := os.Getenv("RDMAGO_DEVICE"); d != "" {
		return d
	}
	return "rxe0"
}

// RequireDevice returns the name of the device to test on. It fails the test
// under the VM runner when the device is missing, and skips it elsewhere.
func RequireDevice(t testing.TB) string {
	t.Helper()
	name := DeviceName()
	_, err := os.Stat("/sys/class/infiniband/" + name)
	if err == nil {
		LogKernelOnFailure(t)
		return name
	}
	if InVM() || os.Getenv("RDMAGO_REQUIRE_DEVICE") == "1" {
		t.Fatalf("RDMA device %s required but missing (kernel %q): %v", name, Kernel(), err)
	}
	t.Skipf("no RDMA device %s on this host; run under the VM runner (make test)", name)
	return ""
}

// RequireNoDevice is for tests of the no-device errors. They run only where
// the VM runner booted without RDMA devices (RDMAGO_EXPECT_NO_DEVICE=1) and
// skip everywhere else.
func RequireNoDevice(t testing.TB) {
	t.Helper()
	if os.Getenv("RDMAGO_EXPECT_NO_DEVICE") != "1" {
		t.Skip("runs only in a VM without RDMA devices (make test-nodevice)")
	}
	if _, err := os.Stat("/sys/class/infiniband/" + DeviceName()); err == nil {
		t.Fatalf("RDMAGO_EXPECT_NO_DEVICE=1 but %s exists", DeviceName())
	}
}

// RequireNoRDMA is for tests of a host with no RDMA at all: no RDMA
// modules, so no /sys/class/infiniband_verbs, no /sys/class/infiniband and
// no /dev/infiniband, the first machine a user tries. They skip on a
// host that has any of it, unless RDMAGO_EXPECT_NO_RDMA=1 (make test
// sets it for its host phase, which runs outside the VM), where such a
// host fails them: a CI runner that grew RDMA must not pass by skipping.
func RequireNoRDMA(t testing.TB) {
	t.Helper()
	for _, p := range []string{"/sys/class/infiniband_verbs", "/sys/class/infiniband", "/dev/infiniband"} {
		if _, err := os.Stat(p); err == nil {
			if os.Getenv("RDMAGO_EXPECT_NO_RDMA") == "1" && !InVM() {
				t.Fatalf("RDMAGO_EXPECT_NO_RDMA=1 but this host has %s (run make test with RDMAGO_EXPECT_NO_RDMA=0 on a host with RDMA)", p)
			}
			t.Skipf("this host has RDMA (%s); the no-RDMA contract is tested on hosts without it (make test's host phase)", p)
		}
	}
}

// kernelLogged holds the tests that will print the kernel log.
var kernelLogged sync.Map

// kernelLogLines is how much of the kernel log LogKernelOnFailure prints.
const kernelLogLines = 40

// LogKernelOnFailure has t print the end of the kernel log if it fails
// under the VM runner: rxe and rdma_cm report there what they did to a QP
// or a connection (with RDMAGO_VM_DYNDBG="module rdma_rxe +p", every QP
// state change and timer).
// It is called by RequireDevice; a test gets the log once however often it
// is called.
func LogKernelOnFailure(t testing.TB) {
	if !InVM() {
		return
	}
	if _, dup := kernelLogged.LoadOrStore(t, true); dup {
		return
	}
	t.Cleanup(func() {
		kernelLogged.Delete(t)
		if !t.Failed() {
			return
		}
		out, err := exec.Command("dmesg").CombinedOutput()
		if err != nil {
			t.Logf("kernel log: dmesg: %v: %s", err, out)
			return
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(lines) > kernelLogLines {
			lines = lines[len(lines)-kernelLogLines:]
		}
		t.Logf("kernel log, last %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	})
}

// UnmappedAddr returns the address of a page that was mapped and no longer
// is: memory a test can name in a work request that nothing may read.
func UnmappedAddr(t testing.TB) uint64 {
	t.Helper()
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&m[0])))
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	return addr
}
