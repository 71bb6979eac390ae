//go:build !linux

package cm

import (
	"errors"
	"fmt"
	"runtime"
)

// supported says that rdma_cm needs Linux, whose /dev/infiniband/rdma_cm
// the package speaks to: programs compile everywhere, and their calls that
// would open it fail with an error matching errors.ErrUnsupported.
func supported() error {
	return fmt.Errorf("cm: rdma_cm needs Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
