//go:build !linux

package doctor

import (
	"errors"
	"fmt"
	"runtime"
)

// netlinkNetnsMode has no RDMA netlink to ask here.
func netlinkNetnsMode() (bool, error) {
	return false, fmt.Errorf("RDMA netlink is Linux's, not %s's: %w", runtime.GOOS, errors.ErrUnsupported)
}
