//go:build linux

package cm_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

// TestNoRDMAHost checks the package doc's promise for a host without the
// connection manager (here, with no RDMA modules at all): every call that
// needs it fails with an error matching ENODEV and uverbs.ErrNoDevice,
// wrapping the open's ENOENT, whose text names the module to load.
// Resolving a literal address needs no device and works.
func TestNoRDMAHost(t *testing.T) {
	testenv.RequireNoRDMA(t)
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.ENODEV) || !errors.Is(err, uverbs.ErrNoDevice) || !errors.Is(err, syscall.ENOENT) ||
			!strings.Contains(err.Error(), "rdma_ucm") {
			t.Errorf("%s on a host without RDMA: %v; want an error matching ENODEV, uverbs.ErrNoDevice and ENOENT that names rdma_ucm", op, err)
		}
	}
	ch, err := cm.NewEventChannel()
	if ch != nil {
		ch.Close()
	}
	check("NewEventChannel", err)
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if id != nil {
		id.Close()
	}
	check("CreateID", err)
	for _, passive := range []bool{false, true} {
		hints := &cm.AddrInfo{PortSpace: cm.PSTCP}
		node := "127.0.0.1"
		if passive {
			hints.Flags, node = cm.AIPassive, ""
		}
		res, err := cm.GetAddrInfo(node, "7471", hints)
		if err != nil {
			t.Fatalf("GetAddrInfo(%q) needs no device, but: %v", node, err)
		}
		ep, err := cm.CreateEP(context.Background(), res, nil, nil)
		if ep != nil {
			ep.Close()
		}
		check("CreateEP", err)
	}
}
