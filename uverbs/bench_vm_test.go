package uverbs_test

import (
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// roundTrip posts one signaled RDMA write and polls until it completes,
// through the public API on the device.
func roundTrip(tb testing.TB, r *rdmatest.Pair, send []wr.SendWR, out []wr.Completion) {
	if _, err := r.A.QP.PostSend(send); err != nil {
		tb.Fatal(err)
	}
	pollOK(tb, r, out)
}

// pollOK polls A's CQ until a completion comes, which must be a success.
func pollOK(tb testing.TB, r *rdmatest.Pair, out []wr.Completion) {
	for {
		n, err := r.A.CQ.Poll(out)
		if err != nil {
			tb.Fatal(err)
		}
		if n > 0 {
			if out[0].Status != wr.Success {
				tb.Fatal(out[0].Err())
			}
			return
		}
	}
}

func writeWR(r *rdmatest.Pair) []wr.SendWR {
	return []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{r.A.Buf.SGE(0, 64)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}}}
}

// TestDeviceHotPathAllocs checks that posting and polling on a real device,
// doorbell system call included, allocate nothing.
func TestDeviceHotPathAllocs(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	send, out := writeWR(r), make([]wr.Completion, 4)
	recv := []wr.RecvWR{{ID: 2, SGList: []wr.SGE{r.B.Buf.SGE(0, 64)}}}
	if a := testing.AllocsPerRun(200, func() { roundTrip(t, r, send, out) }); a != 0 {
		t.Errorf("post send + poll allocates %.1f times per round trip", a)
	}
	if a := testing.AllocsPerRun(5, func() {
		if _, err := r.B.QP.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("post recv allocates %.1f times per call", a)
	}
}

func BenchmarkDeviceWriteRoundTrip(b *testing.B) {
	r := rdmatest.NewPair(b, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	send, out := writeWR(r), make([]wr.Completion, 4)
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, r, send, out)
	}
}
