//go:build linux

package rsocket_test

import (
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/rsocket"
)

// exampleServerEnv makes the test binary run Example_httpServer instead of
// the tests: the example serves until its process ends, so
// TestDeviceExamples runs it in a process of its own and kills it.
const exampleServerEnv = "RDMAGO_RSOCKET_EXAMPLE_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(exampleServerEnv) == "1" {
		Example_httpServer()
		return
	}
	os.Exit(m.Run())
}

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

// TestDeviceExamples runs the examples that need a device, which go test
// only compiles, each against the peer it assumes.
func TestDeviceExamples(t *testing.T) {
	rdmatest.Open(t) // fails under the VM runner when the device is missing

	t.Run("HTTP", func(t *testing.T) {
		srv := exec.Command(os.Args[0], "-test.run=^$")
		srv.Env = append(os.Environ(), exampleServerEnv+"=1")
		srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			srv.Process.Kill()
			srv.Wait()
		}()
		rdmatest.WaitCMListening(t, 8080)
		runExample(t, Example_httpClient, "hello over RDMA\n")
	})

	t.Run("Dial", func(t *testing.T) {
		l, err := rsocket.Listen("rdma", "10.0.2.15:7471")
		rdmatest.Must(t, err)
		defer l.Close()
		got := make(chan string, 1)
		go func() {
			defer close(got)
			c, err := l.Accept()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			b, err := io.ReadAll(c) // the example's CloseWrite ends it
			if err != nil {
				t.Error(err)
				return
			}
			got <- string(b)
			if _, err := io.WriteString(c, "pong"); err != nil {
				t.Error(err)
			}
		}()
		runExample(t, ExampleDial, "pong\n")
		if msg := <-got; msg != "ping" {
			t.Errorf("the server read %q, want %q", msg, "ping")
		}
	})
}
