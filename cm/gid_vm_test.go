package cm_test

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// TestDeviceSelectGID checks uverbs.Context.SelectGID against rdma_cm's
// own choice: the source GID index of a connection between two IDs bound
// to the VM's address is the entry SelectGID picks for that address, and
// for no address; an address the port lacks is EADDRNOTAVAIL.
func TestDeviceSelectGID(t *testing.T) {
	p := rdmatest.ConnectCM(t, cm.PSTCP, rdmatest.Caps, nil)
	attr, mask, err := p.Client.InitQPAttr(qp.StateRTR)
	rdmatest.Must(t, err)
	if mask&qp.AttrAV == 0 || !attr.AHAttr.IsGlobal {
		t.Fatalf("rdma_cm's RTR attributes have no GRH: mask %v, %+v", mask, attr.AHAttr)
	}
	vctx, port := p.Client.Verbs(), p.Client.PortNum()
	for _, addr := range []netip.Addr{rdmatest.VMAddr, {}} {
		e, err := vctx.SelectGID(port, addr)
		rdmatest.Must(t, err)
		if e.Index != attr.AHAttr.SGIDIndex || uint32(e.Port) != uint32(port) {
			t.Errorf("SelectGID(%d, %v) = %+v; rdma_cm chose index %d", port, addr, e, attr.AHAttr.SGIDIndex)
		}
		if e.Type != uverbs.GIDTypeRoCEv2 || e.GID.Addr() != rdmatest.VMAddr {
			t.Errorf("SelectGID(%d, %v) = %+v; want the RoCE v2 GID of %v", port, addr, e, rdmatest.VMAddr)
		}
	}
	if e, err := vctx.SelectGID(port, netip.MustParseAddr("192.0.2.1")); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Errorf("SelectGID for an address not on the port: %+v, %v; want EADDRNOTAVAIL", e, err)
	}
}
