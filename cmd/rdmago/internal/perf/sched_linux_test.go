package perf

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// policies reads the scheduling policy of every thread of the process.
func policies(t *testing.T) map[int]uint32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[int]uint32)
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
			m[tid] = attr.Policy
		}
	}
	return m
}

// TestQuietRuntime checks that the measured loop's thread keeps its
// policy, every other thread is SCHED_BATCH while the loop runs, and
// all are back to SCHED_NORMAL after.
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
		restore := quietRuntime()
		self := unix.Gettid()
		during := policies(t)
		restore()
		after := policies(t)
		if len(during) < 4 {
			t.Errorf("%d threads; want the loop's, the three locked ones and the runtime's", len(during))
		}
		for tid, p := range during {
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
