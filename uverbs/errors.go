package uverbs

import (
	"errors"
	"fmt"
	"net"
)

// ErrClosed is returned by every method of an object after its Close, and
// by calls given a closed object as an argument; cm.ErrClosed is the same
// value, for IDs and event channels. It matches net.ErrClosed under
// errors.Is, so code that handles closed connections handles it too.
var ErrClosed error = closedError{}

type closedError struct{}

// As net's "use of closed network connection", the text names no package:
// the same value comes from uverbs and cm.
func (closedError) Error() string { return "use of closed RDMA object" }
func (closedError) Unwrap() error { return net.ErrClosed }

// Error is a failed kernel call. It wraps the errno, so callers test it with
// errors.Is(err, unix.EOPNOTSUPP) and the like.
type Error struct {
	Op  string // the verb, e.g. "query port"
	Err error  // usually a unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("uverbs: %s: %v", e.Op, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func wrapErr(op string, err error) error {
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return &Error{Op: op, Err: err}
}
