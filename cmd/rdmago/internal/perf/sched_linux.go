package perf

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// quietRuntime puts every other thread of the process in SCHED_BATCH for
// the measured loop, and returns what puts them back.
//
// perftest is one thread, which the scheduler takes off the CPU only at a
// tick. A Go process has more: the runtime's sysmon wakes every 10 ms
// beside a busy loop. A waking SCHED_OTHER thread may preempt whatever
// runs, mid-tick, and the task picked after it may then keep the CPU
// until the tick after next. Where sender and receiver share one CPU,
// that longer slice lets the sender outrun the receiver's posted
// receives, and each receiver-not-ready NAK stalls the sender for rxe's
// retry timer, a jiffy or more (docs/performance.md, "Receiver-not-ready
// and the runtime's threads"). A SCHED_BATCH thread does not preempt on
// waking; it runs when a tick gives it the CPU. The runtime's threads
// keep doing their work; only when they start it changes. The calling
// thread, which runs the loop, keeps its policy.
//
// The loop's goroutine is not locked to that thread. Locked, it hands its
// P to another thread and back at each of sysmon's preemptions, and the
// first hand-off may start a thread: seven heap allocations inside the
// measured loop, in 8 of 25 runs of write_bw -R (none in 25 unlocked).
// The loop makes no blocking system call, so it stays on its thread; one
// that moved would run in SCHED_BATCH, which measured the same
// (docs/performance.md).
func quietRuntime() (restore func()) {
	self := unix.Gettid()
	// Threads already in SCHED_BATCH before the loop stay so after it.
	kept := make(map[int]bool)
	eachThread(func(tid int, attr *unix.SchedAttr) {
		switch {
		case attr.Policy == unix.SCHED_BATCH:
			kept[tid] = true
		case tid != self && attr.Policy == unix.SCHED_NORMAL:
			attr.Policy = unix.SCHED_BATCH
			// One that has exited since the listing gives ESRCH; one
			// that cannot change is left as it is.
			unix.SchedSetAttr(tid, attr, 0)
		}
	})
	return func() {
		// A thread the runtime started during the loop took its
		// creator's policy; it is put back too.
		eachThread(func(tid int, attr *unix.SchedAttr) {
			if attr.Policy == unix.SCHED_BATCH && !kept[tid] {
				attr.Policy = unix.SCHED_NORMAL
				unix.SchedSetAttr(tid, attr, 0)
			}
		})
	}
}

// eachThread calls f with each thread of the process and its scheduling
// attributes.
func eachThread(f func(tid int, attr *unix.SchedAttr)) {
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
			f(tid, attr)
		}
	}
}
