package pollctx

import (
	"context"
	"os"
	"testing"
	"time"
)

// slowDeadliner records deadlines; a past one waits for release first,
// like a cancellation goroutine that the scheduler runs late.
type slowDeadliner struct {
	release chan struct{}
	set     chan time.Time
}

func (d *slowDeadliner) SetReadDeadline(t time.Time) error {
	if t.Equal(Past) {
		<-d.release
	}
	d.set <- t
	return nil
}

// A stop after the cancellation started returns only once it is over, so
// the next read's deadline cannot be overwritten by it.
func TestStopWaitsForLateCancellation(t *testing.T) {
	d := &slowDeadliner{release: make(chan struct{}), set: make(chan time.Time, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	stop := CancelRead(ctx, d)
	if got := <-d.set; !got.IsZero() {
		t.Fatalf("deadline %v for a context without one", got)
	}
	cancel()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned while the cancellation was still to run")
	case <-time.After(50 * time.Millisecond):
	}
	close(d.release)
	<-stopped
	if got := <-d.set; !got.Equal(Past) {
		t.Fatalf("cancellation set %v", got)
	}
}

// A stop before ctx is done prevents the cancellation.
func TestStopBeforeDone(t *testing.T) {
	d := &slowDeadliner{release: make(chan struct{}), set: make(chan time.Time, 4)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	stop := CancelRead(ctx, d)
	if got := <-d.set; got.IsZero() {
		t.Fatal("no deadline for a context with one")
	}
	stop()
	cancel()
	time.Sleep(10 * time.Millisecond)
	if len(d.set) != 0 {
		t.Fatalf("deadline set after stop: %v", <-d.set)
	}
}

// End to end on a pipe: a cancelled read ends with a deadline error, and
// the next read, with a fresh context, waits for its data.
func TestReadAfterCancel(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	stop := CancelRead(ctx, r)
	if _, err := r.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("read: %v, want a timeout", err)
	}
	stop()
	cancel()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	stop2 := CancelRead(ctx2, r)
	go func() { time.Sleep(20 * time.Millisecond); w.Write([]byte{1}) }()
	if n, err := r.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("second read: %d, %v", n, err)
	}
	stop2()
}

// ReadErr reports ctx's error for a read its deadline or cancellation
// ended, waiting out ctx's timer when the copied deadline fired first, and
// nil for a read that failed otherwise.
func TestReadErr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := ReadErr(ctx, os.ErrDeadlineExceeded); err != context.DeadlineExceeded {
		t.Errorf("deadline error before ctx's timer: %v, want %v", err, context.DeadlineExceeded)
	}
	live, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := ReadErr(live, os.ErrClosed); err != nil {
		t.Errorf("closed file, ctx live: %v, want nil", err)
	}
	cancel2()
	if err := ReadErr(live, os.ErrDeadlineExceeded); err != context.Canceled {
		t.Errorf("cancelled ctx: %v, want %v", err, context.Canceled)
	}
}
