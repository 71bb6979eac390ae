package uverbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// KeepAlive configures a QP's liveness check (QP.SetKeepAlive).
//
// The check posts a probe, a signaled zero-length RDMA write, every
// Interval. The peer's device answers it without the peer program taking
// part, and without a remote key or a registered buffer: any RC peer that
// grants remote writes (every rdma_cm connection does) acknowledges it. A
// probe that has not completed Timeout after it was posted, a probe that
// completes with an error, or a send queue that stays full with nothing
// retired for Timeout means the peer is gone. The QP is then moved to the
// error state, which flushes every outstanding work request to its CQ with
// WRFlushErr, and OnDead is called. So a dead peer is reported within
// about Interval + Timeout.
//
// A full send queue counts as progress only where the provider shows
// retired requests without a poll (provider.SendRetirer: rxe). Elsewhere a
// queue the program leaves full, unpolled, for Timeout reads as a stuck
// one.
//
// Why a check is needed at all: the transport's own bound, the QP's retry
// count times its ACK timeout, is no bound on rxe when the retry count is
// 7, which rxe treats as "retry forever" (and 7 is what rdma_cm and
// rdma-core's tools use), and it applies only while a request is
// outstanding: an idle connection never learns that its peer went away.
//
// What it cannot see: a peer process that is alive but stopped (SIGSTOP)
// or stuck. Its device keeps acknowledging; only the application can tell,
// with a deadline on what it waits for (the context of the completion
// waits).
type KeepAlive struct {
	// Interval is the time between probes. Zero turns the check off.
	Interval time.Duration
	// Timeout is how long a probe may stay unacknowledged, and how long
	// the send queue may stay full with nothing retired. It must be at
	// least a millisecond; round trips and the transport's own retransmits
	// of a lost probe need to fit in it (rxe retransmits after about 0.5 s
	// on Linux 6.12, 2.3 s on 6.1, with rdma_cm's default ACK timeout).
	Timeout time.Duration
	// OnDead, if set, is called once, on the check's goroutine, when the
	// peer is declared dead, with the reason: an error wrapping
	// unix.ETIMEDOUT, or the probe's failed completion (a
	// *wr.CompletionError). The QP is already in the error state.
	OnDead func(err error)
}

// probeWRID is the work request ID of the keepalive's probes. Poll takes
// their completions out before the caller sees them (CQ.dropProbes),
// matching the ID and a QP with a probe outstanding.
const probeWRID = 0x6b61_5072_6f62_6521 // "kaProbe!"

// keepAlive is a QP's running liveness check.
type keepAlive struct {
	cfg  KeepAlive
	stop chan struct{}
	once sync.Once
	// probe is the probe's work request, made once: posting it through
	// the provider's interface would move a fresh one to the heap each
	// time.
	probe [1]wr.SendWR
}

func (ka *keepAlive) halt() { ka.once.Do(func() { close(ka.stop) }) }

// probes counts a QP's probes. It is kept by the send CQ, by QP number, as
// long as a probe may be outstanding, so that a probe's completion is
// recognized however late it comes: after the check stopped, or after the
// QP was closed and its requests flushed.
type probes struct {
	sent, acked atomic.Uint64
	// failed holds the status of a probe that completed with an error.
	failed atomic.Uint32
	closed atomic.Bool // the QP is closed: forget it once nothing is out
}

func (p *probes) outstanding() bool { return p.acked.Load() != p.sent.Load() }

// SetKeepAlive starts, changes or (with a zero Interval) stops the QP's
// liveness check (see KeepAlive). The QP must be a connected RC QP, in RTS,
// not created SingleThreaded.
// Probes take a slot of the send queue and an entry of the send CQ while
// they are outstanding: size both for one request more than the program
// posts. Probe completions never reach the program: Poll drops them. A
// send CQ created SingleThreaded is polled only by the program, so the
// check can only see its probes complete while the program polls; other
// CQs are polled by the check itself when a probe is overdue, and what it
// finds there is returned by the next Poll, in order.
func (q *QP) SetKeepAlive(cfg KeepAlive) error {
	if q == nil {
		return errNil
	}
	const op = "set keepalive"
	switch {
	case cfg.Interval < 0:
		return &Error{Op: op, Err: fmt.Errorf("interval %v: %w", cfg.Interval, unix.EINVAL)}
	case cfg.Interval > 0 && cfg.Timeout < time.Millisecond:
		return &Error{Op: op, Err: fmt.Errorf("timeout %v, less than 1ms: %w", cfg.Timeout, unix.EINVAL)}
	case q.typ != qp.RC:
		return &Error{Op: op, Err: fmt.Errorf("QP %d is not RC (a probe needs an acknowledged transport): %w", q.num, unix.EINVAL)}
	case q.single && cfg.Interval > 0:
		// The check posts from its own goroutine, which the promise of
		// a SingleThreaded QP rules out.
		return &Error{Op: op, Err: fmt.Errorf("QP %d was created SingleThreaded, and the check posts from a goroutine of its own: %w", q.num, unix.EINVAL)}
	}
	if err := q.use(); err != nil {
		return err
	}
	defer q.done()
	if cfg.Interval > 0 && q.State() != qp.StateRTS {
		return &Error{Op: op, Err: fmt.Errorf("QP %d is in state %v, not RTS: %w", q.num, q.State(), unix.ENOTCONN)}
	}
	q.kaMu.Lock()
	defer q.kaMu.Unlock()
	if old := q.ka.Swap(nil); old != nil {
		old.halt()
	}
	if cfg.Interval == 0 {
		return nil
	}
	ka := &keepAlive{cfg: cfg, stop: make(chan struct{})}
	p := q.sendCQ.probesOf(q.num)
	p.failed.Store(0)
	q.ka.Store(ka)
	go ka.run(weak.Make(q), q.sendCQ, p)
	return nil
}

// run is the check's goroutine. It holds the QP weakly, so that a QP
// dropped without Close is still collected, and stops when the QP is
// closed, the check is stopped or the peer is declared dead.
func (ka *keepAlive) run(wq weak.Pointer[QP], cq *CQ, p *probes) {
	step := min(ka.cfg.Interval, ka.cfg.Timeout/4)
	step = max(step, time.Millisecond)
	t := time.NewTicker(step)
	defer t.Stop()
	var (
		posted   time.Time // when the outstanding probe was posted
		lastPost time.Time
		// retired is the send queue's retire counter at progressAt, the
		// last time it was seen to change or a probe completed.
		retired    uint32
		progressAt = time.Now()
	)
	if p.outstanding() {
		posted = progressAt // a probe of an earlier check
	}
	for {
		select {
		case <-ka.stop:
			return
		case <-t.C:
		}
		q := wq.Value()
		if q == nil || q.dead.Load() || q.ka.Load() != ka {
			return
		}
		now := time.Now()
		if r, ok := q.prov.(provider.SendRetirer); ok {
			if n := r.SendsRetired(); n != retired {
				retired, progressAt = n, now
			}
		}
		outstanding := p.outstanding()
		if outstanding && now.Sub(posted) >= ka.cfg.Timeout/2 {
			// Nobody has polled the probe's completion: look for it.
			cq.harvest()
			outstanding = p.outstanding()
		}
		if st := p.failed.Load(); st != 0 {
			ka.dead(q, &wr.CompletionError{Status: wr.Status(st)})
			return
		}
		if !outstanding && !posted.IsZero() {
			progressAt, posted = now, time.Time{}
		}
		switch {
		case outstanding && now.Sub(posted) >= ka.cfg.Timeout:
			ka.dead(q, fmt.Errorf("QP %d: a keepalive probe was not acknowledged in %v: %w", q.num, ka.cfg.Timeout, unix.ETIMEDOUT))
			return
		case outstanding:
		case now.Sub(lastPost) >= ka.cfg.Interval:
			switch err := q.postProbe(cq, p, ka.probe[:]); {
			case err == nil:
				posted, lastPost = now, now
			case q.failed.Load() || q.State() == qp.StateErr || q.dead.Load():
				// The connection ended otherwise: its completions say
				// so, and there is nothing left to check.
				return
			case now.Sub(progressAt) >= ka.cfg.Timeout:
				// A full send queue is fine while the device retires
				// requests from it.
				ka.dead(q, fmt.Errorf("QP %d: no send request retired in %v and no room for a keepalive probe: %w", q.num, ka.cfg.Timeout, unix.ETIMEDOUT))
				return
			}
		}
	}
}

// postProbe posts one probe: a signaled zero-length RDMA write, which needs
// no remote key.
func (q *QP) postProbe(cq *CQ, p *probes, w []wr.SendWR) error {
	w[0] = wr.SendWR{ID: probeWRID, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled}
	if err := q.use(); err != nil {
		return err
	}
	defer q.done()
	if q.State() != qp.StateRTS || q.failed.Load() {
		return unix.ENOTCONN
	}
	// Counted before the post: the completion may be polled before
	// PostSend returns.
	p.sent.Add(1)
	cq.probing.Add(1)
	if _, err := q.post(w); err != nil {
		p.sent.Add(^uint64(0))
		cq.probing.Add(-1)
		return err
	}
	return nil
}

// dead moves the QP to the error state and tells OnDead.
func (ka *keepAlive) dead(q *QP, why error) {
	if !q.ka.CompareAndSwap(ka, nil) {
		return // stopped meanwhile
	}
	ka.halt()
	if err := q.use(); err == nil {
		if s := q.State(); s != qp.StateErr && s != qp.StateReset {
			q.modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		}
		q.done()
	}
	if ka.cfg.OnDead != nil {
		ka.cfg.OnDead(&Error{Op: "keepalive", Err: why})
	}
}

// stopKeepAlive stops the QP's check, if any, when it is closed; the
// probes' completions may still come.
func (q *QP) stopKeepAlive() {
	if ka := q.ka.Swap(nil); ka != nil {
		ka.halt()
	}
	cq := q.sendCQ
	if cq == nil {
		return // an XRC receive QP: no send CQ, never probed
	}
	cq.probeMu.Lock()
	defer cq.probeMu.Unlock()
	if p := cq.probeQPs[q.num]; p != nil {
		p.closed.Store(true)
		if !p.outstanding() {
			delete(cq.probeQPs, q.num)
		}
	}
}

// probesOf returns the probe counts of QP number qpn, made on first use.
func (cq *CQ) probesOf(qpn uint32) *probes {
	cq.probeMu.Lock()
	defer cq.probeMu.Unlock()
	p := cq.probeQPs[qpn]
	if p == nil || p.closed.Load() {
		// A closed QP's number reused: its probes, if any are still out,
		// are this one's to drop now.
		if p == nil {
			p = new(probes)
		}
		p.closed.Store(false)
		if cq.probeQPs == nil {
			cq.probeQPs = map[uint32]*probes{}
		}
		cq.probeQPs[qpn] = p
	}
	return p
}

// dropProbes removes the keepalive's probe completions from wc, counting
// them on their QPs' checks, and returns how many completions remain.
func (cq *CQ) dropProbes(wc []wr.Completion) int {
	j := 0
	for i := range wc {
		c := &wc[i]
		if c.ID == probeWRID && cq.takeProbe(c) {
			continue
		}
		if j != i {
			wc[j] = *c
		}
		j++
	}
	return j
}

// takeProbe counts c as a probe's completion if its QP has a probe
// outstanding.
func (cq *CQ) takeProbe(c *wr.Completion) bool {
	cq.probeMu.Lock()
	defer cq.probeMu.Unlock()
	p := cq.probeQPs[c.QPNum]
	if p == nil || !p.outstanding() {
		return false
	}
	if c.Status != wr.Success {
		p.failed.CompareAndSwap(0, uint32(c.Status))
	}
	p.acked.Add(1)
	cq.probing.Add(-1)
	if p.closed.Load() && !p.outstanding() {
		delete(cq.probeQPs, c.QPNum)
	}
	return true
}

// harvest polls the CQ on the keepalive's behalf, when a probe is overdue
// and the program may not be polling. It takes rw exclusively, so that no
// Poll runs meanwhile, and keeps the completions it finds, other than
// probes, for the next Poll to return first: the order of completions is
// kept. A SingleThreaded CQ is left to the program.
func (cq *CQ) harvest() {
	if cq.single {
		return
	}
	cq.rw.Lock()
	defer cq.rw.Unlock()
	if cq.dead.Load() {
		return
	}
	var buf [16]wr.Completion
	for {
		cq.softMu.Lock()
		room := min(cq.cqe-len(cq.ahead), len(buf))
		cq.softMu.Unlock()
		if room <= 0 {
			return // the program is not polling at all; leave the rest
		}
		// As Poll: failures noted, probes taken out, and a short count
		// only once the device has no more.
		n := cq.pollDevice(buf[:room])
		if n > 0 {
			cq.softMu.Lock()
			cq.ahead = append(cq.ahead, buf[:n]...)
			cq.aheadN.Store(int32(len(cq.ahead)))
			cq.softMu.Unlock()
		}
		if n < room {
			return
		}
	}
}

// takeAhead moves completions harvest kept into wc.
func (cq *CQ) takeAhead(wc []wr.Completion) int { return cq.take(&cq.ahead, &cq.aheadN, wc) }
