//go:build linux

package uverbs_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

// TestNoRDMAHost checks what Devices' and Open's docs promise on a host
// with no RDMA modules at all: an error matching ErrNoDevice and ENOSYS
// that names what to load, and no devices.
func TestNoRDMAHost(t *testing.T) {
	testenv.RequireNoRDMA(t)
	devs, err := uverbs.Devices()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, uverbs.ErrNoDevice) || !errors.Is(err, syscall.ENOSYS) || !strings.Contains(err.Error(), "loaded?") {
			t.Errorf("%s on a host without RDMA: %v; want an error matching ErrNoDevice and ENOSYS that asks what is loaded", op, err)
		}
	}
	if len(devs) != 0 {
		t.Errorf("Devices: %v, want none", devs)
	}
	check("Devices", err)
	for _, name := range []string{"", "mlx5_0", "rxe0"} {
		c, err := uverbs.Open(name)
		if c != nil {
			t.Errorf("Open(%q) returned a context", name)
			c.Close()
		}
		check("Open("+name+")", err)
	}
}
