//go:build !linux

package main

import (
	"errors"
	"fmt"
	"runtime"
)

// netlinkNetnsMode has no RDMA netlink to ask here.
func netlinkNetnsMode() (bool, error) {
	return false, fmt.Errorf("RDMA netlink is Linux's, not %s's: %w", runtime.GOOS, errors.ErrUnsupported)
}
