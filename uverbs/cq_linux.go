package uverbs

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directRead reads events from fd, sleeping in poll(2) for at most
// directFor while there are none (with no bound when it is negative);
// after a quiet slice it returns with directN 0. It runs under useMu
// (shared), which keeps fd open meanwhile: Close waits for a slice, and
// ends a longer sleep (kick) first.
//
// Whether it reads before it sleeps depends on what earlier waits found.
// A caller that waits on a busy stream of small messages mostly finds an
// event queued already, and one read is the whole wait; a caller of
// round trips or larger transfers mostly finds none, and a first read
// costs an empty read (EAGAIN) before the ppoll. Measured under QEMU's
// instruction counting (docs/performance.md), each shape lost a few
// percent with the other's order; directMiss picks per channel.
func (ch *CompChannel) directRead(fd uintptr) {
	buf := ch.buf[:]
	readFirst := ch.directMiss < 2
	if !readFirst {
		if ch.directProbe++; ch.directProbe == directProbeEvery {
			ch.directProbe, readFirst = 0, true
		}
	}
	for first := true; ; first = false {
		// The read: first, where the order says so, and after each
		// ppoll that found the descriptor readable.
		if readFirst || !first {
			n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			switch {
			case e == 0:
				if first && ch.directMiss > 0 {
					ch.directMiss--
				}
				ch.directN = int(n)
				return
			case e != unix.EAGAIN:
				ch.directErr = e
				return
			case first:
				if ch.directMiss < 3 {
					ch.directMiss++
				}
			case !readFirst:
				// Readable, then taken by another reader of the
				// descriptor (SyscallConn): as a quiet slice.
				return
			}
		}
		pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		// A sleep that may outlast a slice (until a deadline, or with no
		// timeout at all: no kernel timer to start and cancel, about 550
		// instructions a sleep, docs/performance.md) is named first, then
		// closed and the deadline's count are looked at again: kick
		// stores them before it looks at sleeper, so either it sees this
		// sleep or this look sees them. Close waits for a slice.
		named := ch.directFor < 0 || ch.directFor > directSlice
		if named {
			tid, _ := unix.RawSyscallNoError(unix.SYS_GETTID, 0, 0, 0)
			ch.sleeps++
			ch.sleeper.Store(uint64(ch.sleeps)<<32 | uint64(uint32(tid)))
			if ch.closed.Load() || ch.dlGen.Load() != ch.directGen {
				ch.sleeper.Store(0)
				return // as a quiet slice: the caller looks again
			}
		}
		r, e := ppoll(&pfd, ch.directFor)
		if named {
			ch.sleeper.Store(0)
		}
		switch {
		case e != 0:
			ch.directErr = e
			return
		case r == 0:
			return // a quiet slice: directN stays 0
		}
	}
}

// ppoll waits for pfd for at most d, with no bound when d is negative.
func ppoll(pfd *unix.PollFd, d time.Duration) (uintptr, unix.Errno) {
	if d < 0 {
		r, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, 0, 0, 0, 0)
		return r, e
	}
	ts := unix.NsecToTimespec(int64(d))
	r, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return r, e
}

// directProbeEvery is how often a channel that sleeps before it reads
// reads first once, to see whether events are queued by then again.
const directProbeEvery = 8

// kick ends GetEventDirect's sleep under way that may outlast a slice, if
// any, after the caller changed what the sleeper looks at (closed, the
// deadline): a signal to the sleeping thread ends poll(2) with EINTR.
// SIGURG is the runtime's preemption signal, which every Go thread takes
// already and which a goroutine not asked to yield ignores. A signal that
// lands just before the sleep begins is lost, so kick sends it again
// until that sleep (its number, not just its thread) has ended.
func (ch *CompChannel) kick() {
	s := ch.sleeper.Load()
	if s == 0 {
		return
	}
	pid := unix.Getpid()
	for d := 20 * time.Microsecond; ch.sleeper.Load() == s; d = min(2*d, time.Millisecond) {
		unix.Tgkill(pid, int(uint32(s)), unix.SIGURG)
		time.Sleep(d)
	}
}

// directUnbounded says that GetEventDirect may sleep with no bound: not
// with GODEBUG=asyncpreemptoff=1, where the runtime sends no signal when
// it needs the thread back (GC's stop-the-world).
var directUnbounded = !asyncPreemptOff(os.Getenv("GODEBUG"))
