// Package testenv tells tests whether an RDMA device is there to test on.
//
// Tests that need a device call RequireDevice. On a developer's host without
// RDMA they skip; under the VM runner (hack/vm, which sets RDMAGO_VM=1 and
// creates rxe0) a missing device is a failure, so a broken VM can never pass
// by skipping everything.
package testenv

import (
	"os"
	"testing"
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
