package uverbs

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmdFile is the command channel to the kernel: the uverbs character device.
// Everything the control path sends goes through these two calls, so unit
// tests replace the device with a fake that decodes and answers them.
type cmdFile interface {
	ioctl(req uint, arg unsafe.Pointer) error
	// quickIoctl is ioctl for a command the kernel completes with CPU
	// work alone (command.quick says which).
	quickIoctl(req uint, arg unsafe.Pointer) error
	write(b []byte) error
	// fastWrite is write for commands the kernel runs without sleeping.
	fastWrite(b []byte) error
	// doorbell is fastWrite without the guard against a closed file, for
	// a QP's doorbell (provider.Kernel.Doorbell says why that is safe).
	doorbell(b []byte) error
	fd() int
	Close() error
}

// devFile is an open /dev/infiniband/uverbsN. Close is idempotent and safe
// against concurrent use: the descriptor number is never closed twice, so a
// late call cannot hit a descriptor the process has since reused.
type devFile struct {
	mu     sync.RWMutex
	raw    int
	closed bool
}

func openDevFile(path string) (*devFile, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &devFile{raw: fd}, nil
}

func (f *devFile) ioctl(req uint, arg unsafe.Pointer) error { return f.ioctlAs(req, arg, false) }

// quickIoctl is ioctl as a raw system call, for the commands the kernel
// completes with CPU work alone (command.quick): like fastWrite, it keeps
// the thread's P, so the runtime's monitor neither wakes for the call nor
// hands the P to another thread while it runs.
func (f *devFile) quickIoctl(req uint, arg unsafe.Pointer) error { return f.ioctlAs(req, arg, true) }

func (f *devFile) ioctlAs(req uint, arg unsafe.Pointer, quick bool) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	var e unix.Errno
	if quick {
		_, _, e = unix.RawSyscall(unix.SYS_IOCTL, uintptr(f.raw), uintptr(req), uintptr(arg))
	} else {
		_, _, e = unix.Syscall(unix.SYS_IOCTL, uintptr(f.raw), uintptr(req), uintptr(arg))
	}
	if e != 0 {
		return e
	}
	return nil
}

func (f *devFile) write(b []byte) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	n, err := unix.Write(f.raw, b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return unix.EIO
	}
	return nil
}

// fastWrite is write for the commands the kernel runs without sleeping: a
// provider's doorbell (rxe's zero-request POST_SEND) and CQ arming. It is a
// raw system call: it skips the runtime's entersyscall/exitsyscall, so the
// thread keeps its P and sysmon never hands the P to another thread while
// the call runs. With the ordinary wrapper a loop ringing the doorbell tens
// of thousands of times a second made sysmon retake the P, start threads
// and wake them: measured under QEMU's instruction-counting clock, 64-byte
// write_bw went from 0.82x perftest's message rate to 0.95x with this call.
// A command that may sleep (registering memory, creating objects) must use
// write. The two are not one function taking the system call as a value:
// the compiler keeps b alive and unmoved only for a uintptr conversion
// written in a direct call to the system-call function.
func (f *devFile) fastWrite(b []byte) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	return f.doorbell(b)
}

// doorbell is fastWrite without f.mu. A provider rings it only for a QP it
// has not stopped, under the QP's send lock, and every QP is stopped (its
// Close, or the context's Close releasing it) before the file is closed:
// a live QP means an open file. Contexts refuse to register QPs once their
// Close has begun (registry.close).
func (f *devFile) doorbell(b []byte) error {
	if n, e := rawWrite(f.raw, unsafe.Pointer(unsafe.SliceData(b)), len(b)); n != len(b) {
		return shortWrite(e)
	}
	return nil
}

// shortWrite is the error of a write that did not take the whole command:
// the kernel's errno, or EIO for a short count. doorbell and
// kernelPort.Doorbell share it, off their common path.
func shortWrite(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return unix.EIO
}

func (f *devFile) fd() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return -1
	}
	return f.raw
}

func (f *devFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return unix.Close(f.raw)
}
