//go:build !(linux && (amd64 || arm64))

package uverbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawWrite is write(2) as a raw system call (rawwrite.go says why the
// data path's architectures have their own).
func rawWrite(fd int, p unsafe.Pointer, n int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(p), uintptr(n))
	return int(r), e
}
