//go:build linux

package valkeybench

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/valkeyrdma"
)

// TestDeviceRDMA: both sequences over Valkey's RDMA transport, against
// the store served on a valkeyrdma Listener, with values from 16 B to
// past the default 1 MiB receive buffer.
func TestDeviceRDMA(t *testing.T) {
	testenv.RequireDevice(t)
	l, err := valkeyrdma.Listen("rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	s := &store{data: map[string]string{}}
	serve(t, l, s)
	ap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--rdma", "-h", ap.Addr().String(), "-p", strconv.Itoa(int(ap.Port()))}
	for _, args := range [][]string{
		{"-c", "1", "-n", "200", "-d", "16"},
		{"-c", "16", "-n", "320", "-d", "1024"},
		{"-c", "2", "-n", "8", "-d", "1500000", "-P", "2"},
		{"-c", "4", "-n", "100", "-d", "64", "-P", "25"},
	} {
		status, out, errOut := runMain(append(base, args...)...)
		if status != 0 || strings.Count(out, "requests per second") != 2 {
			t.Fatalf("%q: status %d\nstdout:\n%s\nstderr:\n%s", args, status, out, errOut)
		}
		t.Logf("%q:\n%s", args, out)
	}
	status, out, errOut := runMain(append(base, "-t", "rdma-test", "-c", "2", "-n", "100", "-d", "1024")...)
	if status != 0 || !strings.HasSuffix(out, "Valkey Over RDMA test [OK]\n") {
		t.Fatalf("rdma-test: status %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
	}
}
