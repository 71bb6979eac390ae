package uverbs_test

import (
	"strings"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
)

// TestDeviceExamples runs the examples that need a device, which go test
// only compiles (they have no Output: they need one), and checks that they
// print what they claim. An example that fails calls log.Fatal, which ends
// the test binary: that fails the run too.
func TestDeviceExamples(t *testing.T) {
	rdmatest.Open(t).Close() // fails under the VM runner when rxe0 is missing
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"ExampleDevices", ExampleDevices, "rxe0 (rxe): PORT_ACTIVE, MTU 1024\n"},
		{"ExamplePD_CreateQP", ExamplePD_CreateQP, "hello\n"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			if out := rdmatest.Stdout(t, ex.run); !strings.Contains(out, ex.want) {
				t.Errorf("%s printed %q, want %q in it", ex.name, out, ex.want)
			} else {
				t.Logf("%s printed %q", ex.name, out)
			}
		})
	}
}
