package uverbs_test

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// stressOps is the number of operations of the stress tests: a short run
// in make test, RDMAGO_STRESS_OPS (make stress: a million) otherwise.
func stressOps(t *testing.T) int {
	if v := os.Getenv("RDMAGO_STRESS_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("RDMAGO_STRESS_OPS=%q", v)
		}
		return n
	}
	return 20000
}

// stream is several goroutines posting RDMA writes on one QP and one
// goroutine polling its CQ, counting every completion by work request ID.
type stream struct {
	t       *testing.T
	q       *uverbs.QP
	cq      *uverbs.CQ
	sge     wr.SGE
	raddr   uint64
	rkey    uint32
	perG    int
	seen    []atomic.Uint32 // completions per ID
	bad     []atomic.Uint32 // completions per ID with a status other than success or flush
	posted  []atomic.Bool   // IDs the QP took
	nPosted atomic.Int64
	nDone   atomic.Int64
	// slots bounds the completions outstanding (posted, not yet polled) to
	// what the CQ holds: the kernel frees a send queue slot when it writes
	// the completion, not when the program polls it.
	slots chan struct{}
}

const stressPosters = 4

func newStream(t *testing.T, r *rdmatest.Pair, ops int) *stream {
	s := &stream{t: t, q: r.A.QP, cq: r.A.CQ, sge: r.A.Buf.SGE(0, 8), raddr: r.B.Buf.Addr(), rkey: r.B.Buf.RKey(),
		perG: ops / stressPosters, slots: make(chan struct{}, r.A.CQ.CQE())}
	n := s.perG * stressPosters
	s.seen, s.bad, s.posted = make([]atomic.Uint32, n), make([]atomic.Uint32, n), make([]atomic.Bool, n)
	return s
}

// post posts this goroutine's writes until done or the QP is closed.
func (s *stream) post(g int) error {
	w := []wr.SendWR{{Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{s.sge}, Remote: wr.Remote{Addr: s.raddr, RKey: s.rkey}}}
	for i := 0; i < s.perG; i++ {
		id := g*s.perG + i
		w[0].ID = uint64(id)
		s.slots <- struct{}{}
		for {
			n, err := s.q.PostSend(w)
			if n == 1 {
				s.posted[id].Store(true)
				s.nPosted.Add(1)
				break
			}
			if errors.Is(err, net.ErrClosed) {
				<-s.slots
				return err
			}
			if err == nil {
				s.t.Errorf("PostSend posted nothing without an error")
				return nil
			}
			// A full send queue (ENOMEM) empties as the device works.
			time.Sleep(50 * time.Microsecond)
		}
	}
	return nil
}

// poll polls until stop is closed and every posted request completed.
func (s *stream) poll(stop <-chan struct{}) {
	wc := make([]wr.Completion, 16)
	for {
		n, err := s.cq.Poll(wc)
		if err != nil {
			s.t.Errorf("Poll: %v", err)
			return
		}
		for _, c := range wc[:n] {
			if c.ID >= uint64(len(s.seen)) {
				s.t.Errorf("completion for unknown ID %d", c.ID)
				continue
			}
			s.seen[c.ID].Add(1)
			if c.Status != wr.Success && c.Status != wr.WRFlushErr {
				s.bad[c.ID].Add(1)
			}
			s.nDone.Add(1)
			<-s.slots
		}
		if n == 0 {
			select {
			case <-stop:
				if s.nDone.Load() == s.nPosted.Load() {
					return
				}
			default:
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// check verifies that every posted request completed exactly once and
// nothing else did; flushed says whether flush errors are allowed.
func (s *stream) check(flushed bool) {
	for id := range s.seen {
		seen, posted := s.seen[id].Load(), s.posted[id].Load()
		switch {
		case posted && seen != 1:
			s.t.Fatalf("request %d: %d completions, want 1", id, seen)
		case !posted && seen != 0:
			s.t.Fatalf("request %d was not posted but completed %d times", id, seen)
		case s.bad[id].Load() != 0:
			s.t.Fatalf("request %d completed with an error status", id)
		}
	}
	if !flushed && s.nPosted.Load() != int64(len(s.seen)) {
		s.t.Fatalf("%d of %d requests posted", s.nPosted.Load(), len(s.seen))
	}
}

// run starts the posters and the poller, calls during once the posters
// are going, and waits for everything posted to complete.
func (s *stream) run(during func()) {
	stop := make(chan struct{})
	pollerDone := make(chan struct{})
	go func() { s.poll(stop); close(pollerDone) }()
	var wg sync.WaitGroup
	for g := 0; g < stressPosters; g++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.post(g) }()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	close(stop)
	select {
	case <-pollerDone:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("%d of %d posted requests completed after 60 s", s.nDone.Load(), s.nPosted.Load())
	}
}

// Several goroutines post on one QP that is not SingleThreaded while one
// polls its CQ: every request completes once, none is lost or repeated.
func TestDeviceStressPostPoll(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	s := newStream(t, r, stressOps(t))
	start := time.Now()
	s.run(nil)
	s.check(false)
	t.Logf("%d writes from %d goroutines in %v", s.nDone.Load(), stressPosters, time.Since(start))
}

// The same with Close of the QP racing the posters: a request is either
// refused with ErrClosed or completes once, successfully or flushed.
func TestDeviceStressCloseRace(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	s := newStream(t, r, stressOps(t))
	s.run(func() {
		for s.nPosted.Load() < int64(len(s.seen)/4) {
			time.Sleep(100 * time.Microsecond)
		}
		if err := r.A.QP.Close(); err != nil {
			t.Errorf("Close while posting: %v", err)
		}
	})
	s.check(true)
	t.Logf("%d of %d requests posted before Close; all completed once", s.nPosted.Load(), len(s.seen))
}
