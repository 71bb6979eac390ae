package cm_test

import (
	"context"
	"testing"
	"time"

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
