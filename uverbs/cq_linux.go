package uverbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// directRead reads events from fd, sleeping in poll(2) for at most
// directFor while there are none; after a quiet slice it returns with
// directN 0. It runs under useMu (shared), which keeps fd open meanwhile
// (Close waits for it).
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
		ts := unix.NsecToTimespec(int64(ch.directFor))
		r, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e != 0:
			ch.directErr = e
			return
		case r == 0:
			return // a quiet slice: directN stays 0
		}
	}
}

// directProbeEvery is how often a channel that sleeps before it reads
// reads first once, to see whether events are queued by then again.
const directProbeEvery = 8
