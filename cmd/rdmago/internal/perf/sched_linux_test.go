package perf

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// policies reads the scheduling policy of every thread of the process.
func policies() map[int]uint32 {
	m := make(map[int]uint32)
	eachThread(func(tid int, attr *unix.SchedAttr) { m[tid] = attr.Policy })
	return m
}

// TestQuietRuntime checks that the measured loop's thread keeps its
// policy, every other thread is SCHED_BATCH while the loop runs, and
// all are back to SCHED_NORMAL after. (A thread the runtime starts while
// the loop runs takes its creator's policy, so only those that were there
// before are checked during it.)
func TestQuietRuntime(t *testing.T) {
	// More threads than the runtime's own: goroutines held in locked
	// threads.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	started := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- struct{}{}
			<-stop
		}()
	}
	for range 3 {
		<-started
	}
	defer func() { close(stop); wg.Wait() }()

	done := make(chan struct{})
	go func() {
		defer close(done)
		// As the loop stays on its thread (it makes no blocking call),
		// this goroutine is locked to its own, so that its thread is
		// the one quietRuntime saw.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		before := policies()
		restore := quietRuntime()
		self := unix.Gettid()
		during := policies()
		restore()
		after := policies()
		if len(before) < 4 {
			t.Errorf("%d threads; want the loop's, the three locked ones and the runtime's", len(before))
		}
		for tid, p := range during {
			if _, ok := before[tid]; !ok {
				continue
			}
			want := uint32(unix.SCHED_BATCH)
			if tid == self {
				want = unix.SCHED_NORMAL
			}
			if p != want {
				t.Errorf("thread %d (loop's: %v) during the loop: policy %d, want %d", tid, tid == self, p, want)
			}
		}
		for tid, p := range after {
			if p != unix.SCHED_NORMAL {
				t.Errorf("thread %d after the loop: policy %d, want SCHED_NORMAL", tid, p)
			}
		}
	}()
	<-done
}
