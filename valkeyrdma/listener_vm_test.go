//go:build linux

package valkeyrdma_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/valkeyrdma"
)

// kvServer is a small RESP server: PING, ECHO, SET, GET, DEL, INCR,
// BGSAVE (answered, not done), HELLO and CLIENT (refused), enough for
// valkey's rdma-test and for the clients' basic commands.
type kvServer struct {
	mu     sync.Mutex
	data   map[string]string
	active atomic.Int32 // connections being served
}

// listenKV serves a kvServer on a valkeyrdma Listener on the VM's address.
func listenKV(t testing.TB, lc *valkeyrdma.ListenConfig) *valkeyrdma.Listener {
	l, _ := listenKVServer(t, lc)
	return l
}

func listenKVServer(t testing.TB, lc *valkeyrdma.ListenConfig) (*valkeyrdma.Listener, *kvServer) {
	t.Helper()
	testenv.RequireDevice(t)
	if lc == nil {
		lc = &valkeyrdma.ListenConfig{}
	}
	l, err := lc.Listen(context.Background(), "rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	s := &kvServer{data: map[string]string{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			s.active.Add(1)
			go func() {
				defer wg.Done()
				defer s.active.Add(-1)
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return l, s
}

func (s *kvServer) keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.data)
}

func (s *kvServer) serve(c net.Conn) error {
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(c, s.do(args)); err != nil {
			return err
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil // an inline command
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 1<<20 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || !strings.HasPrefix(line, "$") || size < 0 || size > 64<<20 {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

func (s *kvServer) do(args []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch strings.ToUpper(args[0]) {
	case "PING":
		return "+PONG\r\n"
	case "ECHO":
		if len(args) == 2 {
			return bulk(args[1])
		}
	case "SET":
		if len(args) == 3 {
			s.data[args[1]] = args[2]
			return "+OK\r\n"
		}
	case "GET":
		if len(args) == 2 {
			v, ok := s.data[args[1]]
			if !ok {
				return "$-1\r\n"
			}
			return bulk(v)
		}
	case "DEL":
		n := 0
		for _, k := range args[1:] {
			if _, ok := s.data[k]; ok {
				delete(s.data, k)
				n++
			}
		}
		return ":" + strconv.Itoa(n) + "\r\n"
	case "INCR":
		if len(args) == 2 {
			n, _ := strconv.Atoi(s.data[args[1]])
			n++
			s.data[args[1]] = strconv.Itoa(n)
			return ":" + strconv.Itoa(n) + "\r\n"
		}
	case "BGSAVE":
		return "+Background saving started\r\n"
	}
	return "-ERR unknown command or wrong number of arguments for '" + args[0] + "'\r\n"
}

// TestDeviceRDMATestAgainstListener: valkey's own RDMA test client, two
// threads of PING, SET, BGSAVE and GET, against a Go server on this
// package's Listener, so that the server half of the protocol is checked
// by code this project did not write.
func TestDeviceRDMATestAgainstListener(t *testing.T) {
	l := listenKV(t, nil)
	port := l.Addr().(valkeyrdma.Addr).Port()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// rdma-test gives each read one second: under the race detector one
	// thread, so that the Go server answers each in time.
	threads := "2"
	if raceEnabled {
		threads = "1"
	}
	cmd := exec.CommandContext(ctx, filepath.Join(valkeyBin(t), "rdma-test"),
		"-h", rdmatest.VMAddr.String(), "-p", strconv.Itoa(int(port)), "-m", "500", "-M", "1000", "-t", threads)
	out, err := cmd.CombinedOutput()
	t.Logf("rdma-test:\n%s", out)
	if err != nil {
		t.Fatalf("rdma-test: %v", err)
	}
	for _, step := range []string{"PING/PONG [OK]", "SET", "GET"} {
		if n, want := strings.Count(string(out), step), int(threads[0]-'0'); n < want {
			t.Errorf("rdma-test reported %q %d times, want once per thread", step, n)
		}
	}
}

// TestDeviceDialListener: this package's Dial against its Listener, with
// the smallest and the largest buffers, one ECHO crossing both buffers
// several times; with the waits of the CQ's reader goroutine, and in the
// kernel (WaitInKernel).
func TestDeviceDialListener(t *testing.T) {
	for _, direct := range []bool{false, true} {
		for _, size := range []int{valkeyrdma.MinBuffer, valkeyrdma.MaxBuffer} {
			name := strconv.Itoa(size)
			if direct {
				name = "WaitInKernel/" + name
			}
			t.Run(name, func(t *testing.T) { testDialListener(t, size, direct) })
		}
	}
}

func testDialListener(t *testing.T, size int, direct bool) {
	l := listenKV(t, &valkeyrdma.ListenConfig{RecvBuffer: size, WaitInKernel: direct})
	d := valkeyrdma.Dialer{RecvBuffer: size, WaitInKernel: direct}
	c, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound on a hang, not a timing: 48 MiB each way at
	// MaxBuffer take minutes under the race detector.
	limit := time.Minute
	if raceEnabled {
		limit = 5 * time.Minute
	}
	c.SetDeadline(time.Now().Add(limit))
	r := bufio.NewReader(c)
	v := strings.Repeat("0123456789abcdef", 3*size/16+5)
	if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nECHO\r\n%s", bulk(v)); err != nil {
		t.Fatal(err)
	}
	want := bulk(v)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("ECHO came back different")
	}
	// Close ends a Read under way.
	errc := make(chan error, 1)
	go func() {
		_, err := r.ReadByte()
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read under Close: %v, want net.ErrClosed", err)
	}
}
