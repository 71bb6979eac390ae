package rxe

import "sync"

// queueLock serializes the users of one ring. A ring whose owner promised
// to use it from one goroutine at a time (provider.SingleThreader) skips
// it: off is set once, before the ring is shared.
type queueLock struct {
	mu  sync.Mutex
	off bool
}

func (l *queueLock) Lock() {
	if !l.off {
		l.mu.Lock()
	}
}

func (l *queueLock) Unlock() {
	if !l.off {
		l.mu.Unlock()
	}
}

// SetSingleThreaded drops the send and receive rings' locks.
func (qp *QP) SetSingleThreaded() { qp.sqMu.off, qp.rqMu.off = true, true }

// SetSingleThreaded drops the completion ring's lock.
func (cq *CQ) SetSingleThreaded() { cq.mu.off = true }
