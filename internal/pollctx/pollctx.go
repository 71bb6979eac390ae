// Package pollctx ends a read through the runtime poller when a context is
// done, by moving the file's read deadline into the past.
package pollctx

import (
	"context"
	"errors"
	"os"
	"time"
)

// Deadliner is the part of *os.File that the cancellation uses.
type Deadliner interface {
	SetReadDeadline(time.Time) error
}

// Past is a read deadline that has always passed: set on a file, it
// ends the read under way.
var Past = time.Unix(1, 0)

// CancelRead sets f's read deadline to ctx's (none if it has none) and
// arranges for it to move into the past when ctx is done, which ends a
// read in progress. Call the returned stop once the read has returned,
// then ReadErr with the read's error. A context that is never done
// (context.Background) needs no watcher, and then nothing is allocated.
//
// stop waits for the cancellation if it has already started. Without that
// wait, a cancellation that ran late (its goroutine scheduled after the
// read had returned, as happens on a loaded machine) moved the deadline
// into the past after the next read had set its own, and that read gave
// up at once, waiting for nothing.
func CancelRead(ctx context.Context, f Deadliner) (stop func()) {
	dl, _ := ctx.Deadline()
	f.SetReadDeadline(dl)
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopF := context.AfterFunc(ctx, func() {
		defer close(done)
		f.SetReadDeadline(Past)
	})
	return func() {
		if !stopF() {
			<-done
		}
	}
}

// ReadErr is ctx's error when err, from a read that CancelRead bounded,
// ended because of ctx, and nil otherwise. When the read deadline copied
// from ctx fired a moment before ctx's own timer, it waits for that timer,
// so that the caller reports context.DeadlineExceeded and not the file's
// timeout.
func ReadErr(ctx context.Context, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		<-ctx.Done()
	}
	return ctx.Err()
}
