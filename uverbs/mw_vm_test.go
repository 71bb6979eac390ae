package uverbs_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

var mwCaps = qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}

// windowed is a pair whose A side has a region that memory windows may be
// bound to.
func windowed(t *testing.T) (*rdmatest.Pair, *mr.Region) {
	t.Helper()
	p := rdmatest.NewPair(t, qp.RC, mwCaps)
	reg, err := mr.New(p.PD, 1<<16, wr.LocalWrite|wr.RemoteWrite|wr.RemoteRead|wr.MWBind)
	rdmatest.Must(t, err)
	t.Cleanup(func() { reg.Close() })
	return p, reg
}

// peerWrite has B write msg through rkey at addr and returns its
// completion.
func peerWrite(t *testing.T, p *rdmatest.Pair, id uint64, msg string, addr uint64, rkey uint32) wr.Completion {
	t.Helper()
	src := p.B.Buf.Bytes()
	copy(src, msg)
	_, err := p.B.QP.PostSend([]wr.SendWR{{ID: id, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
		SGList: []wr.SGE{p.B.Buf.SGE(0, len(msg))}, Remote: wr.Remote{Addr: addr, RKey: rkey}}})
	rdmatest.Must(t, err)
	return rdmatest.WaitWC(t, p.B.CQ, 1)[0]
}

// bindType2 posts an OpBindMW for mw on A over 4 KiB at off of reg with
// remote write and read, waits for it, and returns the new rkey.
func bindType2(t *testing.T, p *rdmatest.Pair, mw *uverbs.MW, reg *mr.Region, off uint64) uint32 {
	t.Helper()
	rkey := wr.IncRKey(mw.RKey())
	_, err := p.A.QP.PostSend([]wr.SendWR{{ID: 20, Opcode: wr.OpBindMW, Flags: wr.Signaled, Bind: &wr.BindInfo{
		MWRKey: mw.RKey(), NewRKey: rkey, LKey: reg.LKey(), Addr: reg.Addr() + off, Length: 4096,
		Access: wr.RemoteWrite | wr.RemoteRead}}})
	rdmatest.Must(t, err)
	rdmatest.WantOK(t, rdmatest.WaitWC(t, p.A.CQ, 1)[0], 20, wr.WCBindMW)
	mw.SetRKey(rkey)
	return rkey
}

// allocMW allocates a window of typ, closed when the test ends; a device
// without windows skips the test.
func allocMW(t *testing.T, pd *uverbs.PD, typ uverbs.MWType) *uverbs.MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the device has no memory windows: %v", err)
	}
	rdmatest.Must(t, err)
	t.Cleanup(func() { mw.Close() })
	return mw
}

func wantAccessErr(t *testing.T, what string, c wr.Completion) {
	t.Helper()
	if c.Status != wr.RemAccessErr {
		t.Errorf("%s: completion %+v (%v); want a remote access error", what, c, c.Status)
	}
}

// TestDeviceMemoryWindowType1 binds a type 1 window with BindMW: the peer
// writes through its rkey into the window's part of the region, the rkey
// changes with each bind, and once the window is unbound (bound with no
// region) the peer's write through the old rkey fails.
func TestDeviceMemoryWindowType1(t *testing.T) {
	p, reg := windowed(t)
	mw := allocMW(t, p.PD, uverbs.MWType1)
	if mw.Type() != uverbs.MWType1 {
		t.Errorf("type %v", mw.Type())
	}

	// Bad binds are refused before they are posted.
	mw2 := allocMW(t, p.PD, uverbs.MWType2)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"a type 2 window", p.A.QP.BindMW(mw2, 1, wr.Signaled, reg.MR, reg.Addr(), 4096, wr.RemoteWrite)},
		{"zero-based access", p.A.QP.BindMW(mw, 1, wr.Signaled, reg.MR, reg.Addr(), 4096, wr.RemoteWrite|wr.ZeroBased)},
		{"length without a region", p.A.QP.BindMW(mw, 1, wr.Signaled, nil, 0, 4096, wr.RemoteWrite)},
	} {
		if !errors.Is(c.err, unix.EINVAL) {
			t.Errorf("bind of %s: %v; want EINVAL", c.name, c.err)
		}
	}
	if _, err := p.PD.AllocMW(3); !errors.Is(err, unix.EINVAL) {
		t.Errorf("alloc of a type 3 window: %v; want EINVAL", err)
	}

	old := mw.RKey()
	rdmatest.Must(t, p.A.QP.BindMW(mw, 1, wr.Signaled, reg.MR, reg.Addr()+8192, 4096, wr.RemoteWrite|wr.RemoteRead))
	rdmatest.WantOK(t, rdmatest.WaitWC(t, p.A.CQ, 1)[0], 1, wr.WCBindMW)
	rkey := mw.RKey()
	if rkey == old || rkey>>8 != old>>8 {
		t.Errorf("rkey %#x after bind, %#x before: want the same index, a new key", rkey, old)
	}
	rdmatest.WantOK(t, peerWrite(t, p, 2, "through the window", reg.Addr()+8192, rkey), 2, wr.WCRDMAWrite)
	if got := string(reg.Bytes()[8192 : 8192+18]); got != "through the window" {
		t.Errorf("the region holds %q", got)
	}

	// Unbind: the old rkey grants nothing from the moment the unbind
	// completed.
	rdmatest.Must(t, p.A.QP.BindMW(mw, 3, wr.Signaled, nil, 0, 0, 0))
	rdmatest.WantOK(t, rdmatest.WaitWC(t, p.A.CQ, 1)[0], 3, wr.WCBindMW)
	wantAccessErr(t, "write through an unbound window", peerWrite(t, p, 4, "too late", reg.Addr()+8192, rkey))
	if got := string(reg.Bytes()[8192 : 8192+18]); got != "through the window" {
		t.Errorf("after the refused write the region holds %q", got)
	}
	rdmatest.Must(t, mw.Close())
	if err := p.A.QP.BindMW(mw, 5, wr.Signaled, reg.MR, reg.Addr(), 4096, wr.RemoteWrite); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("bind of a closed window: %v; want ErrClosed", err)
	}
}

// TestDeviceMemoryWindowType2 binds a type 2 window by posting OpBindMW:
// the peer writes through it until a local invalidate completes, and is
// refused after.
func TestDeviceMemoryWindowType2(t *testing.T) {
	p, reg := windowed(t)
	mw := allocMW(t, p.PD, uverbs.MWType2)
	rkey := bindType2(t, p, mw, reg, 0)
	rdmatest.WantOK(t, peerWrite(t, p, 1, "type 2", reg.Addr(), rkey), 1, wr.WCRDMAWrite)
	if got := string(reg.Bytes()[:6]); got != "type 2" {
		t.Errorf("the region holds %q", got)
	}
	_, err := p.A.QP.PostSend([]wr.SendWR{{ID: 21, Opcode: wr.OpLocalInv, Flags: wr.Signaled, Imm: rkey}})
	rdmatest.Must(t, err)
	rdmatest.WantOK(t, rdmatest.WaitWC(t, p.A.CQ, 1)[0], 21, wr.WCLocalInv)
	wantAccessErr(t, "write through an invalidated window", peerWrite(t, p, 2, "revoked", reg.Addr(), rkey))
	if got := string(reg.Bytes()[:7]); got != "type 2\x00" {
		t.Errorf("after the refused write the region holds %q", got)
	}
}

// TestDeviceMemoryWindowSendWithInvalidate: the peer's send with
// invalidate revokes the window it names as it arrives; the receive says
// which rkey it invalidated, and the peer's next write through it fails.
func TestDeviceMemoryWindowSendWithInvalidate(t *testing.T) {
	p, reg := windowed(t)
	mw := allocMW(t, p.PD, uverbs.MWType2)
	rkey := bindType2(t, p, mw, reg, 4096)
	rdmatest.WantOK(t, peerWrite(t, p, 1, "before", reg.Addr()+4096, rkey), 1, wr.WCRDMAWrite)

	_, err := p.A.QP.PostRecv([]wr.RecvWR{{ID: 30, SGList: []wr.SGE{p.A.Buf.SGE(0, 64)}}})
	rdmatest.Must(t, err)
	copy(p.B.Buf.Bytes(), "done with it")
	_, err = p.B.QP.PostSend([]wr.SendWR{{ID: 31, Opcode: wr.OpSendWithInv, Flags: wr.Signaled, Imm: rkey,
		SGList: []wr.SGE{p.B.Buf.SGE(0, 12)}}})
	rdmatest.Must(t, err)
	rdmatest.WantOK(t, rdmatest.WaitWC(t, p.B.CQ, 1)[0], 31, wr.WCSend)
	rc := rdmatest.WaitWC(t, p.A.CQ, 1)[0]
	rdmatest.WantOK(t, rc, 30, wr.WCRecv)
	if rc.Flags&wr.WCWithInv == 0 || rc.Imm != rkey || rc.ByteLen != 12 {
		t.Errorf("receive %+v: want WCWithInv with rkey %#x, 12 bytes", rc, rkey)
	}
	wantAccessErr(t, "write through a window the peer invalidated", peerWrite(t, p, 2, "revoked", reg.Addr()+4096, rkey))
}
