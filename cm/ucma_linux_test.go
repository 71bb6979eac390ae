package cm

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWaitReadableEINTR: a poll that a signal interrupts does not make
// the file readable. A watcher that took EINTR for an event left a
// synchronous ID's completion wait reading an rdma_cm event that never
// came (perf -R, seen in CI on sid).
func TestWaitReadableEINTR(t *testing.T) {
	var p [2]int
	mustT(t, unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC))
	w := os.NewFile(uintptr(p[1]), "pipe w")
	defer w.Close()
	r := os.NewFile(uintptr(p[0]), "pipe r")
	defer r.Close()
	rc, err := r.SyscallConn()
	mustT(t, err)
	d := &devFile{f: r, rc: rc, wait: make(chan struct{}, 1)}

	interrupted := 0
	poll = func(fds []unix.PollFd, timeout int) (int, error) {
		if interrupted < 3 {
			interrupted++
			return 0, unix.EINTR
		}
		return unix.Poll(fds, timeout)
	}
	defer func() { poll = unix.Poll }()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := d.waitReadable(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitReadable on an empty pipe, its polls interrupted: %v, want context.DeadlineExceeded", err)
	}
	if interrupted != 3 {
		t.Fatalf("%d interrupted polls, want 3", interrupted)
	}
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := d.waitReadable(ctxT(t)); err != nil {
		t.Fatalf("waitReadable with a byte in the pipe: %v", err)
	}
}
