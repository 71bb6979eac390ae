package mckey

import (
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// TestMain makes the test binary rdmago (with this package's commands) in
// the child processes of the device tests: see tooltest.Start.
func TestMain(m *testing.M) { tooltest.Main(m, Commands()) }
