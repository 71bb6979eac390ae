package mlx5

import (
	"testing"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// The benchmarks measure the library's own work per request: building the
// WQE and ringing the doorbell, which here is a BlueFlame copy to a plain
// memory page standing in for the UAR (the model's), with the same
// barriers as on a device. hack/mlx5gen/bench.c does the same work with
// rdma-core's mlx5dv.h helpers; make bench-mlx5 runs both.

func benchQP(b *testing.B, caps qp.Caps) *QP {
	h := newHCA(b)
	c := h.openContext()
	_, hcq := h.createCQ(c, 64)
	q, _ := h.createQP(c, provider.QPInitAttr{Type: qp.RC, Caps: caps}, hcq, hcq, nil)
	return q
}

// BenchmarkPostSend posts one signaled RDMA write of one SGE: control,
// remote address and data segments (48 bytes), doorbell record, BlueFlame
// copy of the WQE. Every 32 posts the send queue is emptied, as a poll of
// 32 completions would (hack/mlx5gen/bench.c does the same).
func BenchmarkPostSend(b *testing.B) {
	q := benchQP(b, qp.Caps{MaxSendWR: 64, MaxSendSGE: 1})
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: 0x10000, Length: 64, LKey: 0x1234}},
		Remote: wr.Remote{Addr: 0x7f0000001000, RKey: 0x5678}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if n, err := q.PostSend(send); n != 1 {
			b.Fatal(err)
		}
		if i&31 == 31 {
			q.sq.tail.Store(q.sq.head)
		}
	}
}

// BenchmarkPostSendList4 posts four writes with one doorbell (64-bit, no
// BlueFlame).
func BenchmarkPostSendList4(b *testing.B) {
	q := benchQP(b, qp.Caps{MaxSendWR: 64, MaxSendSGE: 1})
	send := make([]wr.SendWR, 4)
	for i := range send {
		send[i] = wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: 0x10000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}
	}
	b.ReportAllocs()
	for b.Loop() {
		q.PostSend(send)
		q.sq.tail.Store(q.sq.head)
	}
}

func BenchmarkPostRecv(b *testing.B) {
	q := benchQP(b, qp.Caps{MaxRecvWR: 64, MaxRecvSGE: 1})
	recv := []wr.RecvWR{{ID: 1, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}}}
	b.ReportAllocs()
	for b.Loop() {
		q.PostRecv(recv)
		q.rq.tail.Store(q.rq.head)
	}
}

// BenchmarkPoll decodes one send completion per call from a CQ the
// benchmark refills as the device would.
func BenchmarkPoll(b *testing.B) { benchPoll(b, false) }

// BenchmarkPollTimestamps polls a CQ whose completions carry timestamps.
func BenchmarkPollTimestamps(b *testing.B) { benchPoll(b, true) }

func benchPoll(b *testing.B, ts bool) {
	h := newHCA(b)
	c := h.openContext()
	cq, hcq := h.createCQEx(c, provider.CQAttr{CQE: 255, Timestamp: ts})
	q, hq := h.createQP(c, provider.QPInitAttr{Type: qp.RC, Caps: qp.Caps{MaxSendWR: 64, MaxSendSGE: 1}}, hcq, hcq, nil)
	op := sendOp{opcode: opRDMAWrite}
	out := make([]wr.Completion, 1)
	b.ReportAllocs()
	for b.Loop() {
		h.reqCQE(hq, &op, 0, 0, false)
		cq.Poll(out)
	}
	_ = q
}
