package uverbs_test

import (
	"io"
	"os"
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
			if out := stdoutOf(t, ex.run); !strings.Contains(out, ex.want) {
				t.Errorf("%s printed %q, want %q in it", ex.name, out, ex.want)
			} else {
				t.Logf("%s printed %q", ex.name, out)
			}
		})
	}
}

// stdoutOf runs f with os.Stdout going to a pipe, and returns what it
// wrote there.
func stdoutOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	os.Stdout = old
	w.Close()
	return <-got
}
