package uverbs

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawWrite is the doorbell's system call on every post: the bytes reach
// the file, the count comes back, and a failure comes back as its errno
// (on amd64 and arm64 it is assembly of our own).
func TestRawWrite(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	msg := []byte("a doorbell of 24 bytes..")
	n, e := rawWrite(p[1], unsafe.Pointer(&msg[0]), len(msg))
	if n != len(msg) || e != 0 {
		t.Fatalf("rawWrite = %d, %v; want %d, 0", n, e, len(msg))
	}
	got := make([]byte, 64)
	if m, err := unix.Read(p[0], got); err != nil || !bytes.Equal(got[:m], msg) {
		t.Fatalf("read %q, %v; want %q", got[:m], err, msg)
	}
	// -1, not a closed descriptor, whose number a parallel test may reuse.
	n, e = rawWrite(-1, unsafe.Pointer(&msg[0]), len(msg))
	if n != -1 || e != unix.EBADF {
		t.Errorf("rawWrite on a bad descriptor = %d, %v; want -1, EBADF", n, e)
	}
	f := &devFile{raw: -1}
	if err := f.doorbell(msg); !errors.Is(err, unix.EBADF) {
		t.Errorf("doorbell on a bad descriptor: %v, want EBADF", err)
	}
	if err := newKernelPort(f, 0).Doorbell(msg); !errors.Is(err, unix.EBADF) {
		t.Errorf("kernelPort.Doorbell on a bad descriptor: %v, want EBADF", err)
	}
}
