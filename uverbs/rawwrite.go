//go:build linux && (amd64 || arm64)

package uverbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawWrite is write(2) as one system call instruction and nothing else:
// no entersyscall/exitsyscall (as unix.RawSyscall) and none of the four
// calls unix.RawSyscall makes on its way to the instruction (an ABI
// wrapper, syscall.RawSyscall, RawSyscall6, the runtime's Syscall6). It is
// the doorbell of every post on rxe and the arming of every CQ wait; with
// kernelPort.Doorbell's own call removed it took a doorbell from 705 to
// 666 guest instructions, the system call's entry and exit included
// (BenchmarkDoorbell, docs/performance.md). p is a pointer argument: the
// memory stays alive and unmoved for the call.
//
//go:noescape
func rawWrite(fd int, p unsafe.Pointer, n int) (r int, errno unix.Errno)
