//go:build linux

package valkeyrdma_test

import (
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
)

// runExample runs an example and checks what it printed. A failing
// example calls log.Fatal, which ends the test binary and fails the run.
func runExample(t *testing.T, f func(), want string) {
	t.Helper()
	if out := rdmatest.Stdout(t, f); out != want {
		t.Errorf("printed %q, want %q", out, want)
	} else {
		t.Logf("printed %q", out)
	}
}

// TestDeviceExamples runs the client examples, which go test only
// compiles, against valkey-server's RDMA listener on the address they
// name.
func TestDeviceExamples(t *testing.T) {
	startServerOn(t, 6379)
	t.Run("go-redis", func(t *testing.T) { runExample(t, Example_goRedis, "hello over RDMA\n") })
	t.Run("valkey-go", func(t *testing.T) { runExample(t, Example_valkeyGo, "42\n") })
}
