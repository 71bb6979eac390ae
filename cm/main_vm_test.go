package cm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
)

// resKinds are the kinds of kernel object the tests must not leave behind.
var resKinds = []string{"pd", "cq", "qp", "mr", "srq", "cm_id"}

// TestMain checks, under the VM runner, that the tests left no kernel
// object behind (rdma res lists every PD, CQ, QP, MR and rdma_cm ID with
// its owner) and no file descriptor open, beyond the device contexts
// rdma_cm IDs opened, which the package keeps for the process.
func TestMain(m *testing.M) {
	fds := fdCount()
	code := m.Run()
	if code == 0 && testenv.InVM() {
		// The device contexts the IDs opened are kept for the process.
		cm.CloseIdleDevices()
		if leaks := rdmatest.LeftBehind(resKinds...); leaks != "" {
			fmt.Fprintf(os.Stderr, "kernel objects left behind by the tests (rdma res):\n%s", leaks)
			code = 1
		}
		if n := fdCount(); n > fds {
			fmt.Fprintf(os.Stderr, "%d file descriptors left open by the tests (%d before, %d after):\n%s", n-fds, fds, n, fdList())
			code = 1
		}
	}
	os.Exit(code)
}

// fds lists the process's open descriptors and what they are, leaving out
// the Go runtime poller's own (created on first use) and the directory
// being read.
func fds() map[string]string {
	m := map[string]string{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || l == "anon_inode:[eventpoll]" || l == "anon_inode:[eventfd]" {
			continue
		}
		m[e.Name()] = l
	}
	return m
}

func fdCount() int { return len(fds()) }

func fdList() string {
	var b strings.Builder
	for fd, l := range fds() {
		fmt.Fprintf(&b, "  %s -> %s\n", fd, l)
	}
	return b.String()
}
