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
type spinLock struct{ v uint32 }

func (l *spinLock) lock() {
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

func (l *spinLock) unlock() { unlockStore(&l.v) }
