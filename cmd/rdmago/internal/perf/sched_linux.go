package perf

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// quietRuntime puts every other thread of the process in SCHED_BATCH for
// the measured loop, and returns what puts them back.
//
// perftest is one thread, which the scheduler takes off the CPU only at a
// tick. A Go process has more: the runtime's sysmon wakes every 10 ms
// beside a busy loop. A waking SCHED_OTHER thread preempts whatever runs,
// mid-tick, and the task picked after it may then keep the CPU until the
// tick after next. Where sender and receiver share one CPU, that longer
// slice lets the sender outrun the receiver's posted receives, and each
// receiver-not-ready NAK stalls the sender for rxe's retry timer, a
// jiffy or more (docs/performance.md, "Receiver-not-ready and the
// runtime's threads"). A SCHED_BATCH thread does not preempt on waking;
// it runs when the tick gives it the CPU. The runtime's threads keep
// doing their work; only when they start it changes. The calling thread, which runs
// the loop, is locked to its goroutine and keeps its policy.
func quietRuntime() (restore func()) {
	runtime.LockOSThread()
	self := unix.Gettid()
	ents, _ := os.ReadDir("/proc/self/task")
	var batched []int
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == self {
			continue
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil || attr.Policy != unix.SCHED_NORMAL {
			continue
		}
		attr.Policy = unix.SCHED_BATCH
		// A thread that has exited since the listing gives ESRCH; one
		// that cannot change is left as it is.
		if unix.SchedSetAttr(tid, attr, 0) == nil {
			batched = append(batched, tid)
		}
	}
	return func() {
		for _, tid := range batched {
			if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_BATCH {
				attr.Policy = unix.SCHED_NORMAL
				unix.SchedSetAttr(tid, attr, 0)
			}
		}
		runtime.UnlockOSThread()
	}
}
