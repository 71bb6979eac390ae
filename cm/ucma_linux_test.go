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

// TestDevFileCommands: write and getEvent on a FIFO standing in for
// rdma_cm. A command allocates nothing (each used to cost two, through
// the poller's Control), getEvent waits while the file has nothing and
// reads once it has, and a closed file answers ErrClosed.
func TestDevFileCommands(t *testing.T) {
	path := t.TempDir() + "/rdma_cm"
	mustT(t, unix.Mkfifo(path, 0o600))
	old := devPath
	devPath = path
	defer func() { devPath = old }()
	d, err := openDevFile()
	mustT(t, err)
	defer d.close()

	cmd := []byte{1, 2, 3, 4}
	for _, quick := range []bool{false, true} {
		if n := testing.AllocsPerRun(100, func() {
			if err := d.write(cmd, quick); err != nil {
				t.Fatal(err)
			}
			// Drain what write put in the FIFO, so it never fills.
			var b [4]byte
			if _, err := unix.Read(d.raw, b[:]); err != nil || b != [4]byte{1, 2, 3, 4} {
				t.Fatalf("quick %v: read %v, %v", quick, b, err)
			}
		}); n != 0 && !raceEnabled {
			t.Errorf("write (quick %v): %v allocations a command, want 0", quick, n)
		}
	}

	// On a FIFO, GET_EVENT's write always has room: getEvent returns at
	// once with what the write said.
	if err := d.getEvent(ctxT(t), cmd); err != nil {
		t.Fatalf("getEvent: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := d.getEvent(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
		var b [4]byte
		unix.Read(d.raw, b[:])
	}); n != 0 && !raceEnabled {
		t.Errorf("getEvent: %v allocations, want 0", n)
	}

	mustT(t, d.close())
	for _, quick := range []bool{false, true} {
		if err := d.write(cmd, quick); !errors.Is(err, ErrClosed) {
			t.Fatalf("write (quick %v) after close: %v, want ErrClosed", quick, err)
		}
	}
	if err := d.getEvent(ctxT(t), cmd); !errors.Is(err, ErrClosed) {
		t.Fatalf("getEvent after close: %v, want ErrClosed", err)
	}
	mustT(t, d.close())
}
