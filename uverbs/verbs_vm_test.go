package uverbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const allAccess = wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic

// endpoint is one side of a loopback connection on the test device.
type endpoint struct {
	cq  *uverbs.CQ
	qp  *uverbs.QP
	buf *mr.Region
}

// rig is a device context with a PD and two queue pairs connected to each
// other through the device's RoCE v2 GID.
type rig struct {
	t        testing.TB
	ctx      *uverbs.Context
	pd       *uverbs.PD
	gidIndex uint8
	gid      [16]byte
	a, b     endpoint
}

// roceV2GID finds the IPv4 RoCE v2 GID of port 1.
func roceV2GID(t testing.TB, ctx *uverbs.Context) (uint8, [16]byte) {
	t.Helper()
	gids, err := ctx.QueryGIDTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gids {
		if g.Port == 1 && g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
			return uint8(g.Index), g.GID
		}
	}
	t.Fatalf("no IPv4 RoCE v2 GID on port 1 in %+v", gids)
	return 0, [16]byte{}
}

func newRig(t testing.TB, typ qp.Type, caps provider.QPCaps) *rig {
	t.Helper()
	name := testenv.RequireDevice(t)
	ctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx}
	t.Cleanup(func() {
		for _, e := range []*endpoint{&r.a, &r.b} {
			if e.qp != nil {
				check(t, "close QP", e.qp.Close())
			}
			if e.cq != nil {
				check(t, "close CQ", e.cq.Close())
			}
			if e.buf != nil {
				check(t, "close MR", e.buf.Close())
			}
		}
		if r.pd != nil {
			check(t, "close PD", r.pd.Close())
		}
		check(t, "close context", ctx.Close())
	})
	if r.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	r.gidIndex, r.gid = roceV2GID(t, ctx)
	for _, e := range []*endpoint{&r.a, &r.b} {
		if e.cq, err = ctx.CreateCQ(uverbs.CQAttr{CQE: 64}); err != nil {
			t.Fatal(err)
		}
		if e.buf, err = mr.New(r.pd, 1<<16, allAccess); err != nil {
			t.Fatal(err)
		}
		if e.qp, err = r.pd.CreateQP(uverbs.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq, Cap: caps}); err != nil {
			t.Fatal(err)
		}
	}
	r.connect(&r.a, &r.b)
	r.connect(&r.b, &r.a)
	return r
}

const testQKey = 0x11111111

// connect moves e's QP to RTS, talking to peer.
func (r *rig) connect(e, peer *endpoint) {
	r.t.Helper()
	connectPair(r.t, e.qp, peer.qp, r.gid, r.gidIndex)
}

func check(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// waitWC polls cq until it has n completions or a deadline passes.
func waitWC(t *testing.T, cq *uverbs.CQ, n int) []wr.Completion {
	t.Helper()
	out := make([]wr.Completion, 0, n)
	buf := make([]wr.Completion, n)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(buf[:n-len(out)])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return out
}

func wantOK(t *testing.T, c wr.Completion, id uint64, op wr.WCOpcode) {
	t.Helper()
	if c.Status != wr.Success || c.ID != id || c.Opcode != op {
		t.Fatalf("completion %+v (status %v); want ID %d opcode %v success", c, c.Status, id, op)
	}
}

func TestDeviceRCSendRecv(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64})
	src, dst := r.a.buf.Bytes(), r.b.buf.Bytes()
	copy(src, "hello over soft-RoCE from pure Go")
	msg := len("hello over soft-RoCE from pure Go")

	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 7, SGList: []wr.SGE{r.b.buf.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled,
		SGList: []wr.SGE{r.a.buf.SGE(0, 10), r.a.buf.SGE(10, msg-10)}}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 1, wr.WCSend)
	rc := waitWC(t, r.b.cq, 1)[0]
	wantOK(t, rc, 7, wr.WCRecv)
	if int(rc.ByteLen) != msg || !bytes.Equal(dst[:msg], src[:msg]) {
		t.Fatalf("received %d bytes %q; want %q", rc.ByteLen, dst[:rc.ByteLen], src[:msg])
	}
	if rc.QPNum != r.b.qp.Num() {
		t.Errorf("receive completion on QP %d, want %d", rc.QPNum, r.b.qp.Num())
	}

	// Send with immediate, inline from memory that is not registered.
	unregistered := []byte("inline bytes need no registration")
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 8, SGList: []wr.SGE{r.b.buf.SGE(100, 100)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSendWithImm, Imm: 0xdeadbeef, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{{Addr: addrOf(unregistered), Length: uint32(len(unregistered))}}}}); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(unregistered) // inline data is copied during the post
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 2, wr.WCSend)
	rc = waitWC(t, r.b.cq, 1)[0]
	wantOK(t, rc, 8, wr.WCRecv)
	if rc.Flags&wr.WCWithImm == 0 || rc.Imm != 0xdeadbeef {
		t.Errorf("immediate: flags %v imm %#x; want 0xdeadbeef", rc.Flags, rc.Imm)
	}
	if got := dst[100 : 100+len(unregistered)]; !bytes.Equal(got, unregistered) {
		t.Errorf("inline send delivered %q", got)
	}
}

func TestDeviceRCWriteReadAtomic(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1})
	local, remote := r.a.buf, r.b.buf
	copy(local.Bytes(), bytes.Repeat([]byte("W"), 512))

	// RDMA write, then write with immediate, which consumes a receive.
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 9}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(0, 256)}, RemoteAddr: remote.Addr() + 1024, RKey: remote.RKey},
		{ID: 2, Opcode: wr.OpRDMAWriteWithImm, Imm: 42, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(256, 256)}, RemoteAddr: remote.Addr() + 1280, RKey: remote.RKey},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, r.a.cq, 2)
	wantOK(t, wcs[0], 1, wr.WCRDMAWrite)
	wantOK(t, wcs[1], 2, wr.WCRDMAWrite)
	rc := waitWC(t, r.b.cq, 1)[0]
	wantOK(t, rc, 9, wr.WCRecvRDMAWithImm)
	if rc.Imm != 42 || rc.ByteLen != 256 {
		t.Errorf("write with immediate: imm %d byte_len %d; want 42 and 256", rc.Imm, rc.ByteLen)
	}
	if got := remote.Bytes()[1024:1536]; !bytes.Equal(got, local.Bytes()[:512]) {
		t.Fatalf("RDMA write delivered %q", got[:16])
	}

	// RDMA read back from the peer.
	copy(remote.Bytes()[4096:], "read me back")
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 3, Opcode: wr.OpRDMARead, Flags: wr.Signaled,
		SGList: []wr.SGE{local.SGE(8192, 12)}, RemoteAddr: remote.Addr() + 4096, RKey: remote.RKey}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 3, wr.WCRDMARead)
	if got := string(local.Bytes()[8192:8204]); got != "read me back" {
		t.Fatalf("RDMA read got %q", got)
	}

	// Atomics return the old value.
	ne := binary.NativeEndian
	ne.PutUint64(remote.Bytes()[16384:], 100)
	if _, err := r.a.qp.PostSend([]wr.SendWR{
		{ID: 4, Opcode: wr.OpAtomicFetchAdd, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(16384, 8)}, RemoteAddr: remote.Addr() + 16384, RKey: remote.RKey, CompareAdd: 5},
		{ID: 5, Opcode: wr.OpAtomicCmpAndSwp, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(16392, 8)}, RemoteAddr: remote.Addr() + 16384, RKey: remote.RKey, CompareAdd: 105, Swap: 7},
	}); err != nil {
		t.Fatal(err)
	}
	wcs = waitWC(t, r.a.cq, 2)
	wantOK(t, wcs[0], 4, wr.WCFetchAdd)
	wantOK(t, wcs[1], 5, wr.WCCompSwap)
	if old1, old2, now := ne.Uint64(local.Bytes()[16384:]), ne.Uint64(local.Bytes()[16392:]), ne.Uint64(remote.Bytes()[16384:]); old1 != 100 || old2 != 105 || now != 7 {
		t.Fatalf("atomics: fetch-add returned %d (want 100), compare-swap returned %d (want 105), memory now %d (want 7)", old1, old2, now)
	}
}

// localKeyError reports whether status is what rxe reports for a bad local
// key. It is the kernel's choice, not the provider's: rdma-core's own
// libibverbs gets the same statuses on the same kernels (Linux 6.1 and 6.12
// complete the request with LOC_QP_OP_ERR, 7.x flushes it), while the IB
// spec's answer is LOC_PROT_ERR.
func localKeyError(s wr.Status) bool {
	return s == wr.LocProtErr || s == wr.LocQPOpErr || s == wr.WRFlushErr
}

func TestDeviceRCBadLKey(t *testing.T) {
	for _, op := range []wr.Opcode{wr.OpRDMAWrite, wr.OpSend} {
		r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: op, Flags: wr.Signaled,
			SGList: []wr.SGE{{Addr: r.a.buf.Addr(), Length: 8, LKey: r.a.buf.LKey + 0x1000}}, RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey}}); err != nil {
			t.Fatal(err)
		}
		c := waitWC(t, r.a.cq, 1)[0]
		if c.ID != 1 || !localKeyError(c.Status) {
			t.Errorf("%v with a bad lkey: completion %+v (%v), want a local key error", op, c, c.Status)
		}
		t.Logf("%v with a bad lkey on kernel %s: %v", op, testenv.Kernel(), c.Status)
	}
}

func TestDeviceRCRemoteAccessError(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
		SGList: []wr.SGE{r.a.buf.SGE(0, 8)}, RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey + 0x1000}}); err != nil {
		t.Fatal(err)
	}
	if c := waitWC(t, r.a.cq, 1)[0]; c.Status != wr.RemAccessErr {
		t.Errorf("bad rkey: status %v, want %v", c.Status, wr.RemAccessErr)
	}
	// The responder's QP reports the access violation as an async event;
	// rxe does so on newer kernels (measured: absent on 6.1 and 6.12,
	// present on 7.2).
	t.Run("AccessErrEvent", func(t *testing.T) {
		if !kernelAtLeast(t, 7, 0) {
			t.Skipf("rxe on Linux %s does not raise IBV_EVENT_QP_ACCESS_ERR on a remote access violation (measured on 7.2)", kernelRelease(t))
		}
		ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev, err := r.ctx.GetAsyncEvent(ectx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != uverbs.EventQPAccessErr || ev.QP != r.b.qp {
			t.Errorf("async event %v; want a local access violation on the responder QP %d", ev, r.b.qp.Num())
		}
	})
}

func TestDevicePostStateAndDepth(t *testing.T) {
	name := testenv.RequireDevice(t)
	ctx, err := uverbs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	send := []wr.SendWR{{ID: 1, Opcode: wr.OpSend}}
	if n, err := q.PostSend(send); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("post send in RESET: %d, %v; want 0, EINVAL", n, err)
	}
	if n, err := q.PostRecv([]wr.RecvWR{{ID: 1}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("post recv in RESET: %d, %v; want 0, EINVAL", n, err)
	}

	a, m := qp.InitAttrs(qp.RC, 1, 0, allAccess, 0)
	if err := q.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
	// Fill the receive queue past its depth: the first refused one is named.
	depth := int(q.Caps().MaxRecvWR)
	recvs := make([]wr.RecvWR, depth+3)
	for i := range recvs {
		recvs[i].ID = uint64(i)
	}
	n, err := q.PostRecv(recvs)
	var pe *uverbs.PostError
	if !errors.Is(err, unix.ENOMEM) || !errors.As(err, &pe) || pe.Index != n || n < depth {
		t.Errorf("posting %d receives on a queue of %d: %d posted, %v", len(recvs), depth, n, err)
	}
	// A wrong mask is refused before the kernel sees it, naming what is missing.
	bad := qp.Attr{State: qp.StateRTR}
	if err := q.Modify(&bad, qp.AttrState); !errors.Is(err, unix.EINVAL) {
		t.Errorf("INIT→RTR without attributes: %v, want EINVAL", err)
	}
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }
