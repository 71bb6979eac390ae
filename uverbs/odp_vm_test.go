package uverbs_test

import (
	"errors"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceODP registers on-demand-paging regions where the device
// reports ODP (rxe from Linux 6.13; the test probes the device's caps):
// a region of memory the device has never touched takes a prefetch
// (AdviseMR) and the peer's RDMA write, which lands; the peer reads it
// back. Where the device has no ODP, the registration's refusal matches
// errors.ErrUnsupported. Implicit ODP, which rxe lacks, is refused as
// unsupported before the kernel is asked.
func TestDeviceODP(t *testing.T) {
	p := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	attr, err := p.Ctx.QueryDevice()
	rdmatest.Must(t, err)
	odp := attr.ODPCaps
	t.Logf("ODP caps: general %#x, RC %#x", odp.GeneralCaps, odp.RCODPCaps)

	if odp.GeneralCaps&uverbs.ODPSupportImplicit == 0 {
		if _, err := p.PD.RegImplicitODP(wr.LocalWrite); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("implicit ODP on a device without it: %v; want errors.ErrUnsupported", err)
		}
	}
	mem, err := mr.Alloc(1 << 20)
	rdmatest.Must(t, err)
	defer mem.Close()
	buf := mem.Bytes()
	access := wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.OnDemand
	reg, err := p.PD.RegMR(buf, access)
	if odp.GeneralCaps&uverbs.ODPSupport == 0 {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("an ODP region on a device without ODP: %v; want errors.ErrUnsupported", err)
		}
		if err == nil {
			reg.Close()
		}
		t.Skipf("this kernel's rxe has no on-demand paging (general ODP caps %#x)", odp.GeneralCaps)
	}
	rdmatest.Must(t, err)
	defer reg.Close()
	const rcWrite, rcRead = 1 << 3, 1 << 4 // IBV_ODP_SUPPORT_WRITE, _READ
	if odp.RCODPCaps&(rcWrite|rcRead) != rcWrite|rcRead {
		t.Fatalf("ODP without RC write and read (RC caps %#x): nothing to test it with", odp.RCODPCaps)
	}

	// Prefetch the middle of the region for writing; a device without
	// the advice method may refuse it, and says so.
	err = p.PD.AdviseMR(uverbs.AdvicePrefetchWrite, uverbs.AdviseFlush, []wr.SGE{reg.SGE(512<<10, 64<<10)})
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		t.Logf("AdviseMR: %v", err)
	case err != nil:
		t.Errorf("AdviseMR: %v", err)
	}
	if err := p.PD.AdviseMR(uverbs.AdvicePrefetch, 0, nil); err == nil {
		t.Error("AdviseMR of no SGE succeeded")
	}

	// The peer writes at the prefetched place and at one never touched,
	// and reads both back.
	msg := "paged in on demand"
	copy(p.B.Buf.Bytes(), msg)
	for i, off := range []uint64{512 << 10, 1<<20 - 4096} {
		id := uint64(10 + i)
		_, err := p.B.QP.PostSend([]wr.SendWR{{ID: id, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{p.B.Buf.SGE(0, len(msg))}, Remote: wr.Remote{Addr: reg.Addr() + off, RKey: reg.RKey()}}})
		rdmatest.Must(t, err)
		rdmatest.WantOK(t, rdmatest.WaitWC(t, p.B.CQ, 1)[0], id, wr.WCRDMAWrite)
		if got := string(buf[off : off+uint64(len(msg))]); got != msg {
			t.Errorf("offset %d holds %q after the peer's write", off, got)
		}
		_, err = p.B.QP.PostSend([]wr.SendWR{{ID: id + 10, Opcode: wr.OpRDMARead, Flags: wr.Signaled,
			SGList: []wr.SGE{p.B.Buf.SGE(4096, len(msg))}, Remote: wr.Remote{Addr: reg.Addr() + off, RKey: reg.RKey()}}})
		rdmatest.Must(t, err)
		rdmatest.WantOK(t, rdmatest.WaitWC(t, p.B.CQ, 1)[0], id+10, wr.WCRDMARead)
		if got := string(p.B.Buf.Bytes()[4096 : 4096+len(msg)]); got != msg {
			t.Errorf("offset %d read back as %q", off, got)
		}
	}
}
