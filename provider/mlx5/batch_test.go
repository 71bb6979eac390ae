package mlx5

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/wr"
)

// batch posts wrs through BeginBatch, AddToBatch and EndBatch.
func batch(t *testing.T, q *QP, wrs []wr.SendWR) {
	t.Helper()
	if err := q.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	for i := range wrs {
		if err := q.AddToBatch(&wrs[i]); err != nil {
			t.Fatalf("AddToBatch(%d): %v", i, err)
		}
	}
	n, err := q.EndBatch()
	mustPost(t, n, err, len(wrs))
}

// The device model runs a batch's WQEs as it runs PostSend's: the model
// checks each WQE and the doorbell (record, BlueFlame copy) against what
// the queue holds. Batches of one WQE of two or more units go through
// BlueFlame, longer ones through the doorbell register, and the ring
// wraps.
func TestModelBatch(t *testing.T) {
	p := newRCPair(t, pairCaps, 64)
	local, remote := make([]byte, 4096), make([]byte, 4096)
	copy(local, "batched!")
	kl := p.h.regMR(local, wr.LocalWrite)
	kr := p.h.regMR(remote, wr.RemoteWrite|wr.RemoteRead)
	la, ra := addrOfBuf(local), addrOfBuf(remote)
	id := uint64(0)
	for round := range 12 {
		var wrs []wr.SendWR
		for range round%3 + 1 {
			id++
			off := uint64(id%64) * 16
			wrs = append(wrs, wr.SendWR{ID: id, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
				SGList: []wr.SGE{{Addr: la, Length: 8, LKey: kl}}, Remote: wr.Remote{Addr: ra + off, RKey: kr}})
			if id%4 == 0 {
				wrs[len(wrs)-1].Flags |= wr.Inline
				wrs[len(wrs)-1].SGList[0].LKey = 0
			}
		}
		batch(t, p.a, wrs)
		p.h.run()
		for i, c := range pollN(t, p.cqa, len(wrs)) {
			if c.ID != wrs[i].ID || c.Status != wr.Success || c.Opcode != wr.WCRDMAWrite {
				t.Fatalf("round %d, completion %d: %+v", round, i, c)
			}
			off := wrs[i].Remote.Addr - ra
			if string(remote[off:off+8]) != "batched!" {
				t.Fatalf("round %d: write %d did not land", round, wrs[i].ID)
			}
		}
	}
}

// An aborted batch reaches the device in no way: the next post's WQE goes
// where the batch's first went, and the device runs only that.
func TestModelBatchAbort(t *testing.T) {
	p := newRCPair(t, pairCaps, 16)
	local, remote := make([]byte, 64), make([]byte, 64)
	copy(local, "kept")
	kl := p.h.regMR(local, wr.LocalWrite)
	kr := p.h.regMR(remote, wr.RemoteWrite)
	w := func(id uint64, off uint64) wr.SendWR {
		return wr.SendWR{ID: id, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{{Addr: addrOfBuf(local), Length: 4, LKey: kl}}, Remote: wr.Remote{Addr: addrOfBuf(remote) + off, RKey: kr}}
	}
	start := p.a.sq.curPost
	if err := p.a.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a := w(uint64(10+i), 32)
		if err := p.a.AddToBatch(&a); err != nil {
			t.Fatal(err)
		}
	}
	// A refused request leaves the batch as it was.
	bad := wr.SendWR{Opcode: wr.OpRDMAWrite, SGList: make([]wr.SGE, 5)}
	if err := p.a.AddToBatch(&bad); !errors.Is(err, unix.EINVAL) {
		t.Errorf("too many SGEs: %v, want EINVAL", err)
	}
	p.a.AbortBatch()
	if p.a.sq.curPost != start || p.a.sq.head != 0 {
		t.Fatalf("after the abort: post position %d (was %d), head %d", p.a.sq.curPost, start, p.a.sq.head)
	}
	mustPost2(t, p.a, []wr.SendWR{w(1, 0)})
	p.h.run()
	if cs := pollN(t, p.cqa, 1); cs[0].ID != 1 {
		t.Errorf("completion %+v, want request 1", cs[0])
	}
	if string(remote[:4]) != "kept" || string(remote[32:36]) != "\x00\x00\x00\x00" {
		t.Errorf("remote memory %q: the aborted batch reached it, or the post did not", remote[:36])
	}
	p.a.Stop()
	if err := p.a.BeginBatch(); err != provider.ErrStopped {
		t.Errorf("BeginBatch on a stopped QP: %v", err)
	}
}
