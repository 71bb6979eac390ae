//go:build !linux

package uverbs

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// supported says that RDMA verbs need Linux: the kernel interfaces the
// package speaks (/dev/infiniband, RDMA netlink) are Linux's. Programs
// using the API compile everywhere; their calls that would reach a device
// fail with an error matching errors.ErrUnsupported.
func supported(op string) error {
	return &Error{Op: op, Err: fmt.Errorf("RDMA verbs need Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)}
}

func netlinkDevices() ([]Device, error) { return nil, supported("list devices") }

// directRead is never reached: no channel opens here.
func (ch *CompChannel) directRead(uintptr) { ch.directErr = unix.ENOSYS }

// kick has no sleep to end here.
func (ch *CompChannel) kick() {}

const directUnbounded = false
