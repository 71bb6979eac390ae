package cm_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// The rdma_verbs.h calls on a connected loopback pair over rxe, each a
// round trip: post, then wait for the completion with rdma_get_send_comp
// (or rdma_get_recv_comp). Wall-clock time in the VM, mostly the kernel's
// (rxe runs the transfer inside the doorbell's system call); the point is
// 0 allocs/op through the convenience layer. docs/performance.md has the
// comparisons with rdma-core.

// benchPair is a connected pair with registered memory: the client's
// for messages, the server's for messages, remote writes and remote reads.
type benchPair struct {
	c, s                *cm.ID
	cbuf, sbuf          []byte
	cmsg                *uverbs.MR
	smsg, swrite, sread *uverbs.MR
	ctx                 context.Context
}

func newBenchPair(b *testing.B) *benchPair {
	bp := &benchPair{sbuf: rdmatest.Alloc(b, 4096), cbuf: rdmatest.Alloc(b, 4096)}
	p := rdmatest.ConnectCM(b, cm.PSTCP, rdmatest.Caps, func(s *cm.ID) {
		bp.smsg = rdmatest.Reg(b, s.RegMsgs, bp.sbuf[:1024])
		bp.swrite = rdmatest.Reg(b, s.RegWrite, bp.sbuf[1024:2048])
		bp.sread = rdmatest.Reg(b, s.RegRead, bp.sbuf[2048:])
	})
	bp.c, bp.s = p.Client, p.Server
	bp.cmsg = rdmatest.Reg(b, bp.c.RegMsgs, bp.cbuf)
	bp.ctx = rdmatest.Context(b)
	return bp
}

func (bp *benchPair) sendComp(b *testing.B) {
	if wc, err := bp.c.GetSendComp(bp.ctx); err != nil || wc.Status != wr.Success {
		b.Fatalf("rdma_get_send_comp: %+v, %v", wc, err)
	}
}

// run measures post, a signaled request of the client's, with its send
// completion.
func (bp *benchPair) run(b *testing.B, post func() error) {
	b.ReportAllocs()
	for b.Loop() {
		rdmatest.Must(b, post())
		bp.sendComp(b)
	}
}

// postWrite is the RDMA write the write benchmarks measure.
func (bp *benchPair) postWrite() error {
	return bp.c.PostWrite(1, bp.cbuf[:64], bp.cmsg, wr.Signaled, bp.swrite.Remote())
}

func BenchmarkDevicePostWrite(b *testing.B) {
	bp := newBenchPair(b)
	bp.run(b, bp.postWrite)
}

// BenchmarkDevicePostWriteInline is uverbs' BenchmarkDeviceWriteRoundTrip
// through the rdma_verbs.h calls: one 64-byte inline write and its
// completion. Under the instruction-counting clock the difference between
// the two is what cm adds per message (docs/performance.md).
func BenchmarkDevicePostWriteInline(b *testing.B) {
	bp := newBenchPair(b)
	bp.run(b, bp.postWriteInline)
}

// postWriteInline is the inline write of the layer benchmarks.
func (bp *benchPair) postWriteInline() error {
	return bp.c.PostWrite(1, bp.cbuf[:64], nil, wr.Signaled|wr.Inline, bp.swrite.Remote())
}

// pollOne busy-polls cq for one successful completion.
func pollOne(b *testing.B, cq *uverbs.CQ, out []wr.Completion) {
	for {
		n, err := cq.Poll(out)
		rdmatest.Must(b, err)
		if n > 0 {
			rdmatest.Must(b, out[0].Err())
			return
		}
	}
}

// BenchmarkDeviceQPPostWritePoll posts BenchmarkDevicePostWritePoll's
// write on the same QP through uverbs.QP.PostSend: the difference between
// the two is what cm's call adds.
func BenchmarkDeviceQPPostWritePoll(b *testing.B) {
	bp := newBenchPair(b)
	out := make([]wr.Completion, 4)
	cq, q := bp.c.SendCQ(), bp.c.QP()
	r := bp.swrite.Remote()
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&bp.cbuf[0]))), Length: 64}}, Remote: wr.Remote{Addr: r.Addr, RKey: r.RKey}}}
	b.ReportAllocs()
	for b.Loop() {
		_, err := q.PostSend(send)
		rdmatest.Must(b, err)
		pollOne(b, cq, out)
	}
}

// BenchmarkDevicePostWritePoll is BenchmarkDevicePostWriteInline with the
// completion busy-polled from the ID's send CQ, as uverbs'
// BenchmarkDeviceWriteRoundTrip polls: the difference between the two is
// cm's post call alone.
func BenchmarkDevicePostWritePoll(b *testing.B) {
	bp := newBenchPair(b)
	out := make([]wr.Completion, 4)
	cq := bp.c.SendCQ()
	b.ReportAllocs()
	for b.Loop() {
		rdmatest.Must(b, bp.postWriteInline())
		pollOne(b, cq, out)
	}
}

// BenchmarkDevicePostWriteKeepAlive is BenchmarkDevicePostWrite with a
// keepalive probing every millisecond: the probes' completions, taken out
// in Poll, cost the program no allocation.
func BenchmarkDevicePostWriteKeepAlive(b *testing.B) {
	bp := newBenchPair(b)
	rdmatest.Must(b, bp.c.SetKeepAlive(time.Millisecond, 10*time.Second))
	bp.run(b, bp.postWrite)
}

func BenchmarkDevicePostRead(b *testing.B) {
	bp := newBenchPair(b)
	bp.run(b, func() error {
		return bp.c.PostRead(1, bp.cbuf[:64], bp.cmsg, wr.Signaled, bp.sread.Remote())
	})
}

// BenchmarkDevicePostSendRecv is one message: rdma_post_recv on the
// server, rdma_post_send on the client, both completions collected.
func BenchmarkDevicePostSendRecv(b *testing.B) {
	bp := newBenchPair(b)
	b.ReportAllocs()
	for b.Loop() {
		rdmatest.Must(b, bp.s.PostRecv(2, bp.sbuf[:64], bp.smsg))
		rdmatest.Must(b, bp.c.PostSend(1, bp.cbuf[:64], bp.cmsg, wr.Signaled))
		bp.sendComp(b)
		if wc, err := bp.s.GetRecvComp(bp.ctx); err != nil || wc.Status != wr.Success || wc.ID != 2 {
			b.Fatalf("rdma_get_recv_comp: %+v, %v", wc, err)
		}
	}
}
