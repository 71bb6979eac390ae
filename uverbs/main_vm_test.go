package uverbs_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
)

// TestMain checks, under the VM runner, that the tests left no kernel
// object behind: rdma res lists every PD, CQ, QP and MR with its owner.
func TestMain(m *testing.M) {
	code := m.Run()
	// A child process of TestDeviceTwoProcesses shares the command name with
	// its parent, which still holds its objects: only the parent checks.
	if code == 0 && testenv.InVM() && os.Getenv("RDMAGO_TWO_PROCESS_CHILD") == "" {
		if leaks := rdmatest.LeftBehind("pd", "cq", "qp", "mr", "srq"); leaks != "" {
			fmt.Fprintf(os.Stderr, "kernel objects left behind by the tests (rdma res):\n%s", leaks)
			code = 1
		}
	}
	os.Exit(code)
}
