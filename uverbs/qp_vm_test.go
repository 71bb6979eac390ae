package uverbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceRCSendRecv sends on an RC QP from two SGEs, then with
// immediate data inline from unregistered memory.
func TestDeviceRCSendRecv(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64})
	src, dst := r.A.Buf.Bytes(), r.B.Buf.Bytes()
	copy(src, "hello over soft-RoCE from pure Go")
	msg := len("hello over soft-RoCE from pure Go")

	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 7, SGList: []wr.SGE{r.B.Buf.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled,
		SGList: []wr.SGE{r.A.Buf.SGE(0, 10), r.A.Buf.SGE(10, msg-10)}}}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 1, wr.WCSend)
	rc := rdmatest.WaitWC(t, r.B.CQ, 1)[0]
	rdmatest.WantOK(t, rc, 7, wr.WCRecv)
	if int(rc.ByteLen) != msg || !bytes.Equal(dst[:msg], src[:msg]) {
		t.Fatalf("received %d bytes %q; want %q", rc.ByteLen, dst[:rc.ByteLen], src[:msg])
	}
	if rc.QPNum != r.B.QP.Num() {
		t.Errorf("receive completion on QP %d, want %d", rc.QPNum, r.B.QP.Num())
	}

	// Send with immediate, inline from memory that is not registered.
	unregistered := []byte("inline bytes need no registration")
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 8, SGList: []wr.SGE{r.B.Buf.SGE(100, 100)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 2, Opcode: wr.OpSendWithImm, Imm: 0xdeadbeef, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{{Addr: addrOf(unregistered), Length: uint32(len(unregistered))}}}}); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(unregistered) // inline data is copied during the post
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 2, wr.WCSend)
	rc = rdmatest.WaitWC(t, r.B.CQ, 1)[0]
	rdmatest.WantOK(t, rc, 8, wr.WCRecv)
	if rc.Flags&wr.WCWithImm == 0 || rc.Imm != 0xdeadbeef {
		t.Errorf("immediate: flags %v imm %#x; want 0xdeadbeef", rc.Flags, rc.Imm)
	}
	if got := dst[100 : 100+len(unregistered)]; !bytes.Equal(got, unregistered) {
		t.Errorf("inline send delivered %q", got)
	}
}

// TestDeviceRCWriteReadAtomic runs RDMA write (with and without
// immediate), read and both atomics on an RC QP.
func TestDeviceRCWriteReadAtomic(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1})
	local, remote := r.A.Buf, r.B.Buf
	copy(local.Bytes(), bytes.Repeat([]byte("W"), 512))

	// RDMA write, then write with immediate, which consumes a receive.
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 9}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(0, 256)}, Remote: wr.Remote{Addr: remote.Addr() + 1024, RKey: remote.RKey()}},
		{ID: 2, Opcode: wr.OpRDMAWriteWithImm, Imm: 42, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(256, 256)}, Remote: wr.Remote{Addr: remote.Addr() + 1280, RKey: remote.RKey()}},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := rdmatest.WaitWC(t, r.A.CQ, 2)
	rdmatest.WantOK(t, wcs[0], 1, wr.WCRDMAWrite)
	rdmatest.WantOK(t, wcs[1], 2, wr.WCRDMAWrite)
	rc := rdmatest.WaitWC(t, r.B.CQ, 1)[0]
	rdmatest.WantOK(t, rc, 9, wr.WCRecvRDMAWithImm)
	if rc.Imm != 42 || rc.ByteLen != 256 {
		t.Errorf("write with immediate: imm %d byte_len %d; want 42 and 256", rc.Imm, rc.ByteLen)
	}
	if got := remote.Bytes()[1024:1536]; !bytes.Equal(got, local.Bytes()[:512]) {
		t.Fatalf("RDMA write delivered %q", got[:16])
	}

	// RDMA read back from the peer.
	copy(remote.Bytes()[4096:], "read me back")
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 3, Opcode: wr.OpRDMARead, Flags: wr.Signaled,
		SGList: []wr.SGE{local.SGE(8192, 12)}, Remote: wr.Remote{Addr: remote.Addr() + 4096, RKey: remote.RKey()}}}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 3, wr.WCRDMARead)
	if got := string(local.Bytes()[8192:8204]); got != "read me back" {
		t.Fatalf("RDMA read got %q", got)
	}

	// Atomics return the old value.
	ne := binary.NativeEndian
	ne.PutUint64(remote.Bytes()[16384:], 100)
	if _, err := r.A.QP.PostSend([]wr.SendWR{
		{ID: 4, Opcode: wr.OpAtomicFetchAdd, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(16384, 8)}, Remote: wr.Remote{Addr: remote.Addr() + 16384, RKey: remote.RKey()}, CompareAdd: 5},
		{ID: 5, Opcode: wr.OpAtomicCmpAndSwp, Flags: wr.Signaled, SGList: []wr.SGE{local.SGE(16392, 8)}, Remote: wr.Remote{Addr: remote.Addr() + 16384, RKey: remote.RKey()}, CompareAdd: 105, Swap: 7},
	}); err != nil {
		t.Fatal(err)
	}
	wcs = rdmatest.WaitWC(t, r.A.CQ, 2)
	rdmatest.WantOK(t, wcs[0], 4, wr.WCFetchAdd)
	rdmatest.WantOK(t, wcs[1], 5, wr.WCCompSwap)
	if old1, old2, now := ne.Uint64(local.Bytes()[16384:]), ne.Uint64(local.Bytes()[16392:]), ne.Uint64(remote.Bytes()[16384:]); old1 != 100 || old2 != 105 || now != 7 {
		t.Fatalf("atomics: fetch-add returned %d (want 100), compare-swap returned %d (want 105), memory now %d (want 7)", old1, old2, now)
	}
}

// TestDeviceUCSendWrite sends and writes on a UC QP, which cannot read.
func TestDeviceUCSendWrite(t *testing.T) {
	r := rdmatest.NewPair(t, qp.UC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	copy(r.A.Buf.Bytes(), "unreliable but connected")
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 5, SGList: []wr.SGE{r.B.Buf.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 24)}},
		{ID: 2, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 24)}, Remote: wr.Remote{Addr: r.B.Buf.Addr() + 1000, RKey: r.B.Buf.RKey()}},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := rdmatest.WaitWC(t, r.A.CQ, 2)
	rdmatest.WantOK(t, wcs[0], 1, wr.WCSend)
	rdmatest.WantOK(t, wcs[1], 2, wr.WCRDMAWrite)
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.B.CQ, 1)[0], 5, wr.WCRecv)
	// UC acknowledges nothing: the send completes before the data may have
	// landed, so wait for the write's bytes.
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Equal(r.B.Buf.Bytes()[1000:1024], r.A.Buf.Bytes()[:24]) {
		if time.Now().After(deadline) {
			t.Fatalf("UC RDMA write delivered %q", r.B.Buf.Bytes()[1000:1024])
		}
		time.Sleep(time.Millisecond)
	}
	if !bytes.Equal(r.B.Buf.Bytes()[:24], r.A.Buf.Bytes()[:24]) {
		t.Fatalf("UC send delivered %q", r.B.Buf.Bytes()[:24])
	}
	// UC cannot read.
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 3, Opcode: wr.OpRDMARead, SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}}}); err == nil {
		t.Error("RDMA read on a UC QP was accepted")
	}
}

// TestDeviceQueryQP queries a connected QP.
func TestDeviceQueryQP(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	a, init, err := r.A.QP.Query(qp.AttrState | qp.AttrDestQPN | qp.AttrCap | qp.AttrPathMTU | qp.AttrAV | qp.AttrTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != qp.StateRTS || a.DestQPNum != r.B.QP.Num() || a.PathMTU != qp.MTU1024 || a.Timeout != rdmatest.QPTimeout {
		t.Errorf("query: state %v dest %d mtu %d timeout %d; want RTS, %d, 3, %d", a.State, a.DestQPNum, a.PathMTU, a.Timeout, r.B.QP.Num(), rdmatest.QPTimeout)
	}
	if !a.AHAttr.IsGlobal || a.AHAttr.DGID != r.GID || init.Caps.MaxSendWR < 8 {
		t.Errorf("query: AH %+v, init %+v", a.AHAttr, init)
	}
}

// TestDevicePostStateAndDepth posts in RESET, past the receive queue's
// depth, and modifies with a wrong mask: each is refused as it should be.
func TestDevicePostStateAndDepth(t *testing.T) {
	ctx, pd := rdmatest.OpenPD(t)
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
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

	a, m := qp.ToInit(qp.RC, 1, 0, rdmatest.AllAccess, 0)
	if err := q.Modify(a, m); err != nil {
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
	if err := q.Modify(bad, qp.AttrState); !errors.Is(err, unix.EINVAL) {
		t.Errorf("INIT→RTR without attributes: %v, want EINVAL", err)
	}
}

// TestDeviceDestroyFlushes closes a QP with receives outstanding: they come
// back flushed.
func TestDeviceDestroyFlushes(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 1, SGList: []wr.SGE{r.B.Buf.SGE(0, 64)}}, {ID: 2, SGList: []wr.SGE{r.B.Buf.SGE(64, 64)}}, {ID: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := r.B.QP.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range rdmatest.WaitWC(t, r.B.CQ, 3) {
		if c.Status != wr.WRFlushErr || c.ID != uint64(i+1) {
			t.Errorf("after destroy: completion %+v (%v), want ID %d flushed", c, c.Status, i+1)
		}
	}
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 4}}); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("post on a closed QP: %v, want ErrClosed", err)
	}
}

// Bad addresses and lengths in a work request are errors, not crashes or
// truncated messages.
func TestDeviceBadSGEs(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64})
	gone := testenv.UnmappedAddr(t)
	for _, tc := range []struct {
		name string
		w    wr.SendWR
		want error
	}{
		{"inline from unmapped memory", wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline,
			SGList: []wr.SGE{{Addr: gone, Length: 16}}}, unix.EFAULT},
		{"inline from address 0", wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline,
			SGList: []wr.SGE{{Addr: 0, Length: 16}}}, unix.EFAULT},
		{"lengths past 2^32", wr.SendWR{Opcode: wr.OpSend,
			SGList: []wr.SGE{r.A.Buf.SGE(0, 0xfffffff0), r.A.Buf.SGE(0, 0x20)}}, unix.EINVAL},
	} {
		n, err := r.A.QP.PostSend([]wr.SendWR{tc.w})
		if n != 0 || !errors.Is(err, tc.want) {
			t.Errorf("%s: posted %d, %v; want %v", tc.name, n, err, tc.want)
		}
	}
	n, err := r.B.QP.PostRecv([]wr.RecvWR{{SGList: []wr.SGE{r.B.Buf.SGE(0, 0xfffffff0), r.B.Buf.SGE(0, 0x20)}}})
	if n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("receive lengths past 2^32: posted %d, %v; want EINVAL", n, err)
	}
	// The queue is intact: a good send still goes through.
	msg := []byte("still working")
	copy(r.A.Buf.Bytes(), msg)
	if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: 2, SGList: []wr.SGE{r.B.Buf.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{r.A.Buf.SGE(0, len(msg))}}}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 1, wr.WCSend)
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.B.CQ, 1)[0], 2, wr.WCRecv)
	if got := r.B.Buf.Bytes()[:len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("received %q", got)
	}

	// Region memory stays valid after Close: reading and writing a slice
	// kept from Bytes does not fault.
	kept := r.B.Buf.Bytes()
	rdmatest.Check(t, "close region", r.B.Buf.Close())
	kept[0] = 1
	if kept[1] != msg[1] {
		t.Errorf("region memory changed after Close")
	}
}

// A receive posted to a QP in the error state completes with a flush
// error, whether the QP got there by Modify or by a failed request, even
// on kernels that leave such a receive in the queue for ever (rxe on 6.1).
func TestDeviceRecvInErrorStateFlushes(t *testing.T) {
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	t.Run("Modify", func(t *testing.T) {
		r := rdmatest.NewPair(t, qp.RC, caps)
		if err := r.A.QP.Modify(qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		n, err := r.A.QP.PostRecv([]wr.RecvWR{{ID: 1, SGList: []wr.SGE{r.A.Buf.SGE(0, 64)}}, {ID: 2}})
		if n != 2 || err != nil {
			t.Fatalf("PostRecv in ERR: %d, %v", n, err)
		}
		for i, c := range rdmatest.WaitWC(t, r.A.CQ, 2) {
			if c.ID != uint64(i+1) || c.Status != wr.WRFlushErr || c.Opcode != wr.WCRecv || c.QPNum != r.A.QP.Num() {
				t.Errorf("completion %d: %+v; want a flushed receive %d", i, c, i+1)
			}
			if err := c.Err(); !errors.Is(err, wr.ErrFlushed) || !errors.Is(err, unix.ECANCELED) {
				t.Errorf("completion %d: %v does not match wr.ErrFlushed and ECANCELED", i, err)
			}
		}
	})
	t.Run("ErrorCompletion", func(t *testing.T) {
		r := rdmatest.NewPair(t, qp.RC, caps)
		if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 7, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey() + 0x1000}}}); err != nil {
			t.Fatal(err)
		}
		if c := rdmatest.WaitWC(t, r.A.CQ, 1)[0]; c.Status != wr.RemAccessErr {
			t.Fatalf("write with a bad rkey: %v", c.Status)
		} else if err := c.Err(); !errors.Is(err, unix.EACCES) || errors.Is(err, wr.ErrFlushed) {
			t.Errorf("write with a bad rkey: %v does not match EACCES alone", err)
		}
		if _, err := r.A.QP.PostRecv([]wr.RecvWR{{ID: 8, SGList: []wr.SGE{r.A.Buf.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if c := rdmatest.WaitWC(t, r.A.CQ, 1)[0]; c.ID != 8 || c.Status != wr.WRFlushErr {
			t.Errorf("receive after the QP failed: %+v; want a flushed receive 8", c)
		} else if !errors.Is(c.Err(), wr.ErrFlushed) {
			t.Errorf("receive after the QP failed: %v does not match wr.ErrFlushed", c.Err())
		}
	})
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// TestDeviceRetryCount7 pins what the pingpong tests' end-race allowance
// (cmd/rdmago/internal/pingpong/endrace_test.go) rests on: rxe retries
// forever at a retry count of 7, the count rdma-core's pingpong programs
// and rdma_cm's defaults set, where the InfiniBand spec gives 7 retries
// and then an error (only the RNR retry count's 7 means unlimited).
func TestDeviceRetryCount7(t *testing.T) {
	r := rdmatest.ConnectToNobody(t, 7)
	retries := func() uint64 {
		n, err := rdmatest.HWCounter(testenv.DeviceName(), "completer_retry_err")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := retries()
	_, err := r.A.QP.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}},
	})
	rdmatest.Must(t, err)
	// Eight tries take 134 ms; wait for 30.
	time.Sleep(30 * 16800 * time.Microsecond)
	wcs := make([]wr.Completion, 1)
	n, err := r.A.CQ.Poll(wcs)
	rdmatest.Must(t, err)
	got := retries() - before
	t.Logf("after 0.5 s: %d completions, %d retries", n, got)
	if n != 0 || got <= 8 {
		t.Errorf("rxe on %s ended a retry count of 7 (%d completions, %+v, after %d retries): the pingpong tests' end-race allowance no longer holds here", rdmatest.KernelRelease(t), n, wcs[0], got)
	}
}

// TestDeviceRetryExceeded connects an RC QP to a QP number nobody has, with
// a short timeout and one retry: rxe drops what arrives for it, so the
// write's completion is a transport retry error, which matches ETIMEDOUT
// (wr.Status.Errno), and the request behind it is flushed.
func TestDeviceRetryExceeded(t *testing.T) {
	r := rdmatest.ConnectToNobody(t, 1)
	start := time.Now()
	_, err := r.A.QP.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}},
		{ID: 2, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(8, 8)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}},
	})
	rdmatest.Must(t, err)
	wcs := rdmatest.WaitWC(t, r.A.CQ, 2)
	t.Logf("completions after %v: %v, %v", time.Since(start).Round(time.Millisecond), wcs[0].Status, wcs[1].Status)
	if c := wcs[0]; c.ID != 1 || c.Status != wr.RetryExcErr {
		t.Errorf("write to a QP that does not exist: %+v; want %v", c, wr.RetryExcErr)
	} else if err := c.Err(); !errors.Is(err, unix.ETIMEDOUT) || errors.Is(err, wr.ErrFlushed) {
		t.Errorf("retry exceeded: %v does not match ETIMEDOUT alone", err)
	}
	if c := wcs[1]; c.ID != 2 || !errors.Is(c.Err(), wr.ErrFlushed) {
		t.Errorf("the write behind it: %+v, %v; want it flushed", c, c.Err())
	}
}
