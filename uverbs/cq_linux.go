package uverbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// directRead reads events from fd, sleeping in poll(2) for at most
// directFor while there are none; after a quiet slice it returns with
// directN 0. It runs under RawConn.Control, which keeps fd open meanwhile
// (Close waits for it).
func (ch *CompChannel) directRead(fd uintptr) {
	buf := ch.buf[:]
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if e == 0 {
			ch.directN = int(n)
			return
		}
		if e != unix.EAGAIN {
			ch.directErr = e
			return
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
