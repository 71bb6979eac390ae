package mlx5

import (
	"runtime"
	"sync/atomic"
)

// spinLock serializes posting on one queue (rdma-core's mlx5_spinlock, a
// pthread spinlock). The critical sections are a few dozen nanoseconds and
// never block, and a sync.Mutex costs two locked instructions where a
// spinlock needs one: the unlock is a plain store with release order
// (storeRelease), which on amd64 and arm64 is cheaper than sync/atomic's
// sequentially consistent store. Under the race detector the unlock is
// sync/atomic's, so the detector sees the hand-over.
//
// off, set once before the queue is shared, makes it no lock at all: the
// queue's owner promised to use it from one goroutine at a time
// (provider.SingleThreader), as rdma-core's thread domains do.
type spinLock struct {
	v   uint32
	off bool
}

func (l *spinLock) lock() {
	if l.off {
		return
	}
	if !atomic.CompareAndSwapUint32(&l.v, 0, 1) {
		l.lockSlow()
	}
}

func (l *spinLock) lockSlow() {
	for !atomic.CompareAndSwapUint32(&l.v, 0, 1) {
		for i := 0; atomic.LoadUint32(&l.v) != 0; i++ {
			if i > 64 {
				runtime.Gosched() // the holder may have been preempted
				i = 0
			}
		}
	}
}

func (l *spinLock) unlock() {
	if !l.off {
		unlockStore(&l.v)
	}
}

// SetSingleThreaded drops the send and receive queues' locks (not the
// BlueFlame register's, which QPs may share).
func (qp *QP) SetSingleThreaded() { qp.sqMu.off, qp.rqMu.off = true, true }

// SetSingleThreaded drops the CQ's lock.
func (cq *CQ) SetSingleThreaded() { cq.mu.off = true }
