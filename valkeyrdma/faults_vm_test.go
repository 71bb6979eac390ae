//go:build linux

package valkeyrdma_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/valkeyrdma"
)

// TestDeviceServerKilled: valkey-server killed in the middle of a pipeline
// ends the client's calls with an error, soon; nothing hangs. Also with
// WaitInKernel, where the blocked Write and Read take turns waiting in the
// kernel.
func TestDeviceServerKilled(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "poller"
		if direct {
			name = "WaitInKernel"
		}
		t.Run(name, func(t *testing.T) { testServerKilled(t, direct) })
	}
}

func testServerKilled(t *testing.T, direct bool) {
	s := startServer(t)
	d := valkeyrdma.Dialer{WaitInKernel: direct}
	c, err := d.Dial("tcp", s.rdma)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A writer that pipelines SETs, and a reader of their replies.
	errc := make(chan error, 2)
	// Batches of commands, as a client's buffered writer sends them:
	// each write takes one of the server's 1024 receives until it polls.
	go func() {
		cmd := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n" + string(make([]byte, 100)) + "\r\n"
		w := bufio.NewWriterSize(c, 16<<10)
		for {
			if _, err := w.WriteString(cmd); err != nil {
				errc <- fmt.Errorf("write: %w", err)
				return
			}
		}
	}()
	var replies atomic.Int64
	go func() {
		r := bufio.NewReader(c)
		for {
			if _, err := r.ReadString('\n'); err != nil {
				errc <- fmt.Errorf("read after %d replies: %w", replies.Load(), err)
				return
			}
			replies.Add(1)
		}
	}()
	time.Sleep(time.Second)
	if replies.Load() == 0 {
		t.Fatal("no reply in a second of pipelining")
	}
	killed := time.Now()
	s.cmd.Process.Kill()
	// The connection's end comes by rdma_cm (the killed process's IDs
	// are destroyed, which disconnects them), or else by the keepalive.
	const bound = 10 * time.Second
	for i := range 2 {
		select {
		case err := <-errc:
			t.Logf("%v after %v", err, time.Since(killed).Round(time.Millisecond))
			if errors.Is(err, valkeyrdma.ErrProtocol) {
				t.Errorf("the server's end reported as a protocol error: %v", err)
			}
		case <-time.After(bound):
			t.Fatalf("%d of the 2 calls still blocked %v after the server was killed", 2-i, bound)
		}
	}
}

// TestDeviceClientKilled: valkey's rdma-test killed in the middle of its
// SETs ends its connection on the Listener, whose server goes on serving
// others.
func TestDeviceClientKilled(t *testing.T) {
	l, kv := listenKVServer(t, nil)
	port := l.Addr().(valkeyrdma.Addr).Port()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(valkeyBin(t), "rdma-test"),
		"-h", rdmatest.VMAddr.String(), "-p", strconv.Itoa(int(port)), "-m", "50000", "-M", "60000", "-t", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Kill it once its SETs are under way.
	for kv.keys() < 1000 {
		select {
		case err := <-exited:
			t.Fatalf("rdma-test ended before it was killed: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if kv.active.Load() != 1 {
		t.Fatalf("%d connections served, want rdma-test's", kv.active.Load())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	killed := time.Now()
	for kv.active.Load() != 0 {
		if time.Since(killed) > 10*time.Second {
			t.Fatal("the killed client's connection is still served after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the server's connection ended %v after the client was killed", time.Since(killed).Round(time.Millisecond))
	c, err := valkeyrdma.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "*1\r\n$4\r\nPING\r\n")
	b := make([]byte, 7)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "+PONG\r\n" {
		t.Fatalf("PING after the killed client: %q, %v", b, err)
	}
}
