//go:build linux

package uverbs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// TestDeviceXRC probes XRC as a program would: the device's caps say
// whether it has XRC domains, and a device without them refuses every XRC
// object with an error that matches errors.ErrUnsupported and the
// kernel's EOPNOTSUPP. rxe has none on 6.1, 6.12 and 7.2: the kernel
// refuses OPEN_XRCD (with and without a file), and the rxe provider the
// XRC send QP, as the kernel refuses it to rdma-core's librxe.
func TestDeviceXRC(t *testing.T) {
	ctx, pd := rdmatest.OpenPD(t)
	attr, err := ctx.QueryDevice()
	rdmatest.Must(t, err)
	hasXRC := uverbs.DeviceCaps(attr.DeviceCapFlags)&uverbs.DeviceXRC != 0
	t.Logf("device caps %#x: XRC %v", attr.DeviceCapFlags, hasXRC)
	f, err := os.Create(filepath.Join(t.TempDir(), "xrcd"))
	rdmatest.Must(t, err)
	defer f.Close()
	for _, fd := range []int{-1, int(f.Fd())} {
		x, err := ctx.OpenXRCD(fd, unix.O_CREAT)
		t.Logf("OpenXRCD(%d, O_CREAT): %v", fd, err)
		if hasXRC {
			rdmatest.Must(t, err)
			rdmatest.Must(t, x.Close())
			continue
		}
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) || x != nil {
			t.Errorf("OpenXRCD(%d, O_CREAT) on a device without XRC: %v, %v; want an error matching errors.ErrUnsupported and EOPNOTSUPP", fd, x, err)
		}
	}
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 4})
	rdmatest.Must(t, err)
	defer cq.Close()
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.XRCSend, SendCQ: cq, Caps: qp.Caps{MaxSendWR: 1, MaxSendSGE: 1}})
	t.Logf("CreateQP(XRC_SEND): %v", err)
	if hasXRC {
		rdmatest.Must(t, err)
		rdmatest.Must(t, q.Close())
	} else if !errors.Is(err, errors.ErrUnsupported) || q != nil {
		t.Errorf("CreateQP(XRC_SEND) on a device without XRC: %v; want an error matching errors.ErrUnsupported", err)
	}
	// The refusals left the PD and CQ as they were.
	b, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: qp.Caps{MaxSendWR: 1, MaxSendSGE: 1, MaxRecvWR: 1, MaxRecvSGE: 1}})
	rdmatest.Must(t, err)
	rdmatest.Must(t, b.Close())
}
