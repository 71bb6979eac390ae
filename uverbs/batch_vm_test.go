package uverbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceSendBatch posts every kind of RC request through one batch on
// the device, and checks what each did at the peer; then a failed batch,
// of which nothing may reach the peer.
func TestDeviceSendBatch(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64})
	local, remote := r.A.Buf, r.B.Buf
	lb, rb := local.Bytes(), remote.Bytes()
	copy(lb, "first half|second half")
	copy(rb[4096:], "read me back")
	ne := binary.NativeEndian
	ne.PutUint64(rb[8192:], 100)
	for _, id := range []uint64{20, 21} {
		if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: id, SGList: []wr.SGE{remote.SGE(12288+int(id-20)*256, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}

	b, err := r.A.QP.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.RDMAWrite(1, wr.Signaled, remote.RKey(), remote.Addr()+1024)
	b.SetSGEList([]wr.SGE{local.SGE(0, 11), local.SGE(11, 11)})
	b.RDMAWriteWithImm(2, wr.Signaled, remote.RKey(), remote.Addr()+2048, 42)
	b.SetInlineData([]byte("inline write"))
	b.RDMARead(3, wr.Signaled, remote.RKey(), remote.Addr()+4096)
	b.SetSGE(local.LKey(), local.Addr()+512, 12)
	b.AtomicFetchAdd(4, wr.Signaled, remote.RKey(), remote.Addr()+8192, 5)
	b.SetSGE(local.LKey(), local.Addr()+1024, 8)
	b.AtomicCmpSwp(5, wr.Signaled|wr.Fence, remote.RKey(), remote.Addr()+8192, 105, 7)
	b.SetSGE(local.LKey(), local.Addr()+1032, 8)
	b.SendWithImm(6, wr.Signaled, 77)
	b.SetSGE(local.LKey(), local.Addr(), 5)
	if n, err := b.Complete(); n != 6 || err != nil {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	wcs := rdmatest.WaitWC(t, r.A.CQ, 6)
	for i, op := range []wr.WCOpcode{wr.WCRDMAWrite, wr.WCRDMAWrite, wr.WCRDMARead, wr.WCFetchAdd, wr.WCCompSwap, wr.WCSend} {
		rdmatest.WantOK(t, wcs[i], uint64(i+1), op)
	}
	if got := string(rb[1024:1046]); got != "first half|second half" {
		t.Errorf("RDMA write of a gather list delivered %q", got)
	}
	if got := string(rb[2048:2060]); got != "inline write" {
		t.Errorf("inline RDMA write delivered %q", got)
	}
	if got := string(lb[512:524]); got != "read me back" {
		t.Errorf("RDMA read got %q", got)
	}
	if old1, old2, now := ne.Uint64(lb[1024:]), ne.Uint64(lb[1032:]), ne.Uint64(rb[8192:]); old1 != 100 || old2 != 105 || now != 7 {
		t.Errorf("atomics: fetch-add returned %d (want 100), compare-swap %d (want 105), memory now %d (want 7)", old1, old2, now)
	}
	rcv := rdmatest.WaitWC(t, r.B.CQ, 2)
	rdmatest.WantOK(t, rcv[0], 20, wr.WCRecvRDMAWithImm)
	rdmatest.WantOK(t, rcv[1], 21, wr.WCRecv)
	if rcv[0].Imm != 42 || rcv[1].Imm != 77 || rcv[1].ByteLen != 5 || string(rb[12288+256:12288+256+5]) != "first" {
		t.Errorf("receives %+v %+v", rcv[0], rcv[1])
	}

	// A batch that fails posts nothing: its first request, whole and
	// valid, never reaches the peer.
	b, err = r.A.QP.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.RDMAWrite(7, wr.Signaled, remote.RKey(), remote.Addr()+16384)
	b.SetInlineData([]byte("must not land"))
	b.RDMAWrite(8, wr.Signaled, remote.RKey(), remote.Addr()+16384)
	b.SetSGEList(make([]wr.SGE, r.A.QP.Caps().MaxSendSGE+1)) // more than the QP takes
	var pe *uverbs.PostError
	if n, err := b.Complete(); n != 0 || !errors.Is(err, unix.EINVAL) || !errors.As(err, &pe) || pe.Index != 1 {
		t.Fatalf("failed batch: Complete = %d, %v; want 0 and EINVAL at request 1", n, err)
	}
	// The queue is as it was: a post after it is the next to run.
	if _, err := r.A.QP.PostSend([]wr.SendWR{{ID: 9, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{local.SGE(0, 5)}, Remote: wr.Remote{Addr: remote.Addr() + 16400, RKey: remote.RKey()}}}); err != nil {
		t.Fatal(err)
	}
	rdmatest.WantOK(t, rdmatest.WaitWC(t, r.A.CQ, 1)[0], 9, wr.WCRDMAWrite)
	if got := rb[16384:16405]; !bytes.Equal(got[:16], make([]byte, 16)) || string(got[16:]) != "first" {
		t.Errorf("remote memory after a failed batch and a write: %q", got)
	}
}

// TestDeviceSendBatchUD sends datagrams through a batch, the address set
// before and after the data.
func TestDeviceSendBatchUD(t *testing.T) {
	r := rdmatest.NewPair(t, qp.UD, qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	ah, err := r.PD.CreateAH(qp.AHAttr{IsGlobal: true, DGID: r.GID, SGIDIndex: r.GIDIndex, HopLimit: 1, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	for i := range 2 {
		if _, err := r.B.QP.PostRecv([]wr.RecvWR{{ID: uint64(10 + i), SGList: []wr.SGE{r.B.Buf.SGE(i*1024, grhSize+256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	copy(r.A.Buf.Bytes(), "datagram one")
	b, err := r.A.QP.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.Send(1, wr.Signaled)
	b.SetUDAddr(ah, r.B.QP.Num(), rdmatest.QKey)
	b.SetSGE(r.A.Buf.LKey(), r.A.Buf.Addr(), 12)
	b.SendWithImm(2, wr.Signaled, 99)
	b.SetInlineData([]byte("datagram two"))
	b.SetUDAddr(ah, r.B.QP.Num(), rdmatest.QKey)
	if n, err := b.Complete(); n != 2 || err != nil {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	wcs := rdmatest.WaitWC(t, r.A.CQ, 2)
	rdmatest.WantOK(t, wcs[0], 1, wr.WCSend)
	rdmatest.WantOK(t, wcs[1], 2, wr.WCSend)
	rcv := rdmatest.WaitWC(t, r.B.CQ, 2)
	for i, want := range []string{"datagram one", "datagram two"} {
		rdmatest.WantOK(t, rcv[i], uint64(10+i), wr.WCRecv)
		off := i*1024 + grhSize
		if got := string(r.B.Buf.Bytes()[off : off+len(want)]); got != want || rcv[i].SrcQP != r.A.QP.Num() {
			t.Errorf("datagram %d: %q from QP %d", i, got, rcv[i].SrcQP)
		}
	}
	if rcv[1].Imm != 99 {
		t.Errorf("immediate %d, want 99", rcv[1].Imm)
	}
}

// batchRoundTrip is roundTrip's write through a batch.
func batchRoundTrip(tb testing.TB, r *rdmatest.Pair, data []byte, out []wr.Completion) {
	b, err := r.A.QP.BeginSend()
	if err != nil {
		tb.Fatal(err)
	}
	b.RDMAWrite(1, wr.Signaled, r.B.Buf.RKey(), r.B.Buf.Addr())
	b.SetInlineData(data)
	if _, err := b.Complete(); err != nil {
		tb.Fatal(err)
	}
	pollOK(tb, r, out)
}

// TestDeviceSendBatchAllocs checks that a batch on the device, doorbell
// included, allocates nothing after the QP's first.
func TestDeviceSendBatchAllocs(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	data, out := make([]byte, 64), make([]wr.Completion, 4)
	batchRoundTrip(t, r, data, out)
	if a := testing.AllocsPerRun(200, func() { batchRoundTrip(t, r, data, out) }); a != 0 {
		t.Errorf("a batch + poll allocates %.1f times per round trip", a)
	}
}

// BenchmarkDeviceBatchWriteRoundTrip is BenchmarkDeviceWriteRoundTrip's
// 64-byte inline write through a batch.
func BenchmarkDeviceBatchWriteRoundTrip(b *testing.B) {
	r := rdmatest.NewPair(b, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	data, out := make([]byte, 64), make([]wr.Completion, 4)
	b.ReportAllocs()
	for b.Loop() {
		batchRoundTrip(b, r, data, out)
	}
}

// TestDeviceQPCreateFlags: rxe refuses every creation flag, as a program
// can tell (errors.ErrUnsupported, EOPNOTSUPP), and the refusal costs
// nothing: the same QP without the flag is made after it.
func TestDeviceQPCreateFlags(t *testing.T) {
	ctx, pd := rdmatest.OpenPD(t)
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	attr := uverbs.QPInitAttr{Type: qp.UD, SendCQ: cq, RecvCQ: cq, Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	for _, f := range []uverbs.QPCreateFlags{uverbs.QPCreateBlockSelfMcastLB, uverbs.QPCreateScatterFCS,
		uverbs.QPCreateCVLANStripping, uverbs.QPCreatePCIWriteEndPadding} {
		a := attr
		a.CreateFlags = f
		q, err := pd.CreateQP(a)
		if err == nil {
			q.Close()
			t.Fatalf("rxe made a QP with create flag %#x", f)
		}
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("create flag %#x: %v, want EOPNOTSUPP", f, err)
		}
	}
	q, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
}
