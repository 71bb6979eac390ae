package uverbs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// waitPair is two connected RC QPs whose send CQs share one completion
// channel, each QP's send CQ its own: A writes into B, B into A.
type waitPair struct {
	*rdmatest.Pair
	ch       *uverbs.CompChannel
	aCQ, bCQ *uverbs.CQ
	aQP, bQP *uverbs.QP
	wrA, wrB []wr.SendWR
}

func newWaitPair(t testing.TB) *waitPair {
	t.Helper()
	p := &waitPair{Pair: rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})}
	var err error
	if p.ch, err = p.Ctx.NewCompChannel(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ch.Close() })
	for _, c := range []**uverbs.CQ{&p.aCQ, &p.bCQ} {
		if *c, err = p.Ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: p.ch}); err != nil {
			t.Fatal(err)
		}
		cq := *c
		t.Cleanup(func() { cq.Close() })
	}
	caps := qp.Caps{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	for _, x := range []struct {
		q  **uverbs.QP
		cq *uverbs.CQ
	}{{&p.aQP, p.aCQ}, {&p.bQP, p.bCQ}} {
		if *x.q, err = p.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: x.cq, RecvCQ: p.A.CQ, Caps: caps}); err != nil {
			t.Fatal(err)
		}
		q := *x.q
		t.Cleanup(func() { q.Close() })
	}
	rdmatest.ConnectQPs(t, p.aQP, p.bQP, p.GIDIndex, p.GID)
	for _, x := range []struct {
		w        *[]wr.SendWR
		src, dst *mr.Region
	}{{&p.wrA, p.A.Buf, p.B.Buf}, {&p.wrB, p.B.Buf, p.A.Buf}} {
		*x.w = []wr.SendWR{{Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{x.src.SGE(0, 8)}, Remote: wr.Remote{Addr: x.dst.Addr(), RKey: x.dst.RKey()}}}
	}
	return p
}

// write posts a signalled 8-byte RDMA write from A to B (a) or B to A.
// The request is built once per pair: a slice literal here would escape
// to the heap and be counted as the caller's allocation.
func (p *waitPair) write(t testing.TB, a bool, id uint64) {
	q, w := p.aQP, p.wrA
	if !a {
		q, w = p.bQP, p.wrB
	}
	w[0].ID = id
	if _, err := q.PostSend(w); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceCQWait: Wait returns completions as they come, for two CQs
// waited on at once through one channel; its context and the CQ's and the
// channel's Close end it; GetEvent is refused once the channel serves
// Wait; and a write and its Wait allocate nothing, with a context that can
// be cancelled.
func TestDeviceCQWait(t *testing.T) {
	p := newWaitPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("TwoCQsOneChannel", func(t *testing.T) {
		var wg sync.WaitGroup
		got := make([]wr.Completion, 2)
		errs := make([]error, 2)
		for i, cq := range []*uverbs.CQ{p.aCQ, p.bCQ} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wc := make([]wr.Completion, 4)
				n, err := cq.Wait(ctx, wc)
				if n > 0 {
					got[i] = wc[0]
				}
				errs[i] = err
			}()
		}
		time.Sleep(50 * time.Millisecond) // both blocked, most likely
		p.write(t, false, 2)
		p.write(t, true, 1)
		wg.Wait()
		for i := range got {
			if errs[i] != nil || got[i].ID != uint64(i+1) || got[i].Status != wr.Success {
				t.Errorf("Wait on CQ %d: %+v, %v", i, got[i], errs[i])
			}
		}
	})

	t.Run("GetEventRefused", func(t *testing.T) {
		if _, err := p.ch.GetEvent(ctx); !errors.Is(err, unix.EBUSY) {
			t.Errorf("GetEvent on a channel that serves Wait: %v, want EBUSY", err)
		}
	})

	t.Run("Context", func(t *testing.T) {
		wc := make([]wr.Completion, 1)
		short, c := context.WithTimeout(ctx, 50*time.Millisecond)
		defer c()
		if _, err := p.aCQ.Wait(short, wc); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its deadline: %v", err)
		}
		cctx, c2 := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, c2)
		if _, err := p.aCQ.Wait(cctx, wc); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait cancelled: %v", err)
		}
	})

	t.Run("Allocs", func(t *testing.T) {
		wc := make([]wr.Completion, 1)
		cctx, c := context.WithCancel(ctx)
		defer c()
		id := uint64(100)
		allocs := testing.AllocsPerRun(200, func() {
			id++
			p.write(t, true, id)
			if n, err := p.aCQ.Wait(cctx, wc); n != 1 || err != nil || wc[0].ID != id {
				t.Fatalf("Wait: %d, %+v, %v", n, wc[0], err)
			}
		})
		if allocs != 0 {
			t.Errorf("a write and its Wait allocate %v times", allocs)
		}
	})

	t.Run("CQClose", func(t *testing.T) {
		extra, err := p.Ctx.CreateCQ(uverbs.CQAttr{CQE: 4, Channel: p.ch})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := extra.Wait(ctx, make([]wr.Completion, 1))
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		rdmatest.Must(t, extra.Close())
		if err := <-done; !errors.Is(err, uverbs.ErrClosed) {
			t.Errorf("Wait on a CQ closed under it: %v, want ErrClosed", err)
		}
	})

	t.Run("ChannelClose", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := p.bCQ.Wait(ctx, make([]wr.Completion, 1))
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		p.ch.Close()
		select {
		case err := <-done:
			if !errors.Is(err, uverbs.ErrClosed) {
				t.Errorf("Wait on a channel closed under it: %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("closing the channel did not end a Wait")
		}
	})
}

// BenchmarkDeviceCQWait is an RDMA write and the Wait for its completion,
// with a context that can be cancelled: 0 allocs/op.
func BenchmarkDeviceCQWait(b *testing.B) {
	p := newWaitPair(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wc := make([]wr.Completion, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p.write(b, true, uint64(i))
		if n, err := p.aCQ.Wait(ctx, wc); n != 1 || err != nil {
			b.Fatalf("Wait: %d, %v", n, err)
		}
	}
}
