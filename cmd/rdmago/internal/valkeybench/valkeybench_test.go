package valkeybench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// store is a RESP server with PING, SET, GET and BGSAVE, enough for both
// of the command's sequences; corrupt, when set, changes the GET reply of
// the key it names.
type store struct {
	mu      sync.Mutex
	data    map[string]string
	bgsaves int
	corrupt string
}

// serve serves s on l until l closes.
func serve(t *testing.T, l net.Listener, s *store) {
	t.Helper()
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
			go func() {
				defer wg.Done()
				defer c.Close()
				s.serveConn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
}

func (s *store) serveConn(c net.Conn) {
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		w.WriteString(s.do(args))
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

func (s *store) do(args []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	bulk := func(v string) string { return "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n" }
	switch {
	case args[0] == "PING" && len(args) == 1:
		return "+PONG\r\n"
	case args[0] == "SET" && len(args) == 3:
		s.data[args[1]] = args[2]
		return "+OK\r\n"
	case args[0] == "GET" && len(args) == 2:
		v, ok := s.data[args[1]]
		if !ok {
			return "$-1\r\n"
		}
		if args[1] == s.corrupt {
			v = "X" + v[1:]
		}
		return bulk(v)
	case args[0] == "BGSAVE" && len(args) == 1:
		s.bgsaves++
		return "+Background saving started\r\n"
	}
	return "-ERR unknown command\r\n"
}

// tcpStore serves a store on a loopback TCP port and returns the
// arguments that point the command at it.
func tcpStore(t *testing.T) (*store, []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &store{data: map[string]string{}}
	serve(t, l, s)
	return s, []string{"-h", "127.0.0.1", "-p", strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
}

func runMain(args ...string) (status int, stdout, stderr string) {
	var o, e bytes.Buffer
	status = Main(context.Background(), args, &o, &e)
	return status, o.String(), e.String()
}

// TestSetGet: every client's keys are stored with their values, and the
// figures name the run.
func TestSetGet(t *testing.T) {
	for _, tc := range []struct{ clients, requests, size, pipeline int }{
		{1, 10, 3, 1}, {4, 103, 1024, 1}, {3, 50, 70000, 8}, {16, 16, 16, 16},
	} {
		t.Run(fmt.Sprintf("c%d-n%d-d%d-P%d", tc.clients, tc.requests, tc.size, tc.pipeline), func(t *testing.T) {
			s, addr := tcpStore(t)
			status, out, errOut := runMain(append(addr, "-c", strconv.Itoa(tc.clients), "-n", strconv.Itoa(tc.requests),
				"-d", strconv.Itoa(tc.size), "-P", strconv.Itoa(tc.pipeline), "--csv")...)
			if status != 0 {
				t.Fatalf("status %d: %s", status, errOut)
			}
			if len(s.data) != tc.requests {
				t.Errorf("server holds %d keys, want %d", len(s.data), tc.requests)
			}
			for k, v := range s.data {
				if len(v) != tc.size {
					t.Errorf("%s: %d bytes, want %d", k, len(v), tc.size)
				}
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.HasPrefix(lines[1], `"SET","TCP","`+strconv.Itoa(tc.clients)+`"`) || !strings.HasPrefix(lines[2], `"GET","TCP"`) {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

// TestGetChecksValues: a GET reply that differs from the value set fails
// the run and names the key.
func TestGetChecksValues(t *testing.T) {
	s, addr := tcpStore(t)
	s.corrupt = "rdmago:1:3"
	status, _, errOut := runMain(append(addr, "-c", "2", "-n", "20", "-d", "100")...)
	if status != 1 || !strings.Contains(errOut, "GET rdmago:1:3") || !strings.Contains(errOut, "another value") {
		t.Fatalf("status %d, stderr %q; want 1 and the corrupted key", status, errOut)
	}
}

// TestRDMATestSequence: -t rdma-test prints rdma-test's progress lines,
// and issues one BGSAVE whatever the number of clients.
func TestRDMATestSequence(t *testing.T) {
	s, addr := tcpStore(t)
	status, out, errOut := runMain(append(addr, "-t", "rdma-test", "-c", "3", "-n", "40", "-d", "1024")...)
	if status != 0 {
		t.Fatalf("status %d: %s", status, errOut)
	}
	if s.bgsaves != 1 || len(s.data) != 120 {
		t.Errorf("%d BGSAVEs and %d keys, want 1 and 120", s.bgsaves, len(s.data))
	}
	for _, want := range []string{"PING/PONG [OK]", "prepare 40 KVs [OK]", "SET 40 KVs [OK]", "GET 40 KVs [OK]"} {
		if n := strings.Count(out, want); n != 3 {
			t.Errorf("%q printed %d times, want 3:\n%s", want, n, out)
		}
	}
	if !strings.HasSuffix(out, "Valkey Over RDMA test [OK]\n") {
		t.Errorf("output does not end with rdma-test's last line:\n%s", out)
	}
}

// TestBadOptions: options out of range are refused with status 2 before
// anything connects.
func TestBadOptions(t *testing.T) {
	for _, args := range [][]string{
		{"-c", "0"}, {"-n", "0"}, {"-d", "0"}, {"-P", "0"}, {"-p", "70000"}, {"-t", "incr"}, {"-t", "set,rdma-test"}, {"extra"}, {"-x"},
	} {
		if status, _, errOut := runMain(append(args, "-h", "192.0.2.1")...); status != 2 || errOut == "" {
			t.Errorf("%q: status %d, stderr %q; want 2 and a message", args, status, errOut)
		}
	}
}

// TestServerGone: a refused connection is an error, not a hang.
func TestServerGone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if status, _, errOut := runMain("-p", strconv.Itoa(port)); status != 1 || !strings.Contains(errOut, "refused") {
		t.Fatalf("status %d, stderr %q; want 1, connection refused", status, errOut)
	}
}

// TestUsage: -h alone, or last with no host after it, and --help print the
// usage with status 0; -h with a value is the host.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-c", "2", "-h"}} {
		status, out, _ := runMain(args...)
		if status != 0 || !strings.HasPrefix(out, "usage: rdmago valkey-benchmark") {
			t.Errorf("%q: status %d, stdout %q", args, status, out)
		}
	}
}

// replayConn reads reply again and again and drops what is written: a
// server that answers every GET with the same value.
type replayConn struct {
	net.Conn
	reply []byte
	off   int
}

func (c *replayConn) Read(b []byte) (int, error) {
	n := copy(b, c.reply[c.off:])
	c.off = (c.off + n) % len(c.reply)
	return n, nil
}

func (c *replayConn) Write(b []byte) (int, error) { return len(b), nil }

// TestRequestsAllocateNothing: a SET and a GET cost the client no
// allocation: the run's time is the transport's, not the collector's.
func TestRequestsAllocateNothing(t *testing.T) {
	value := bytes.Repeat([]byte("V"), 64)
	for _, tc := range []struct {
		name  string
		reply string
		req   func(c *client) error
	}{
		{"SET", "+OK\r\n", func(c *client) error {
			c.writeCommand("SET", "THREAD00-000001", value)
			if err := c.w.Flush(); err != nil {
				return err
			}
			return c.expectStatus("OK")
		}},
		{"GET", "$64\r\n" + string(value) + "\r\n", func(c *client) error {
			c.writeCommand("GET", "THREAD00-000001", nil)
			if err := c.w.Flush(); err != nil {
				return err
			}
			return c.expectBulk(value)
		}},
	} {
		c := newClient(&replayConn{reply: []byte(tc.reply)}, len(value))
		var err error
		n := testing.AllocsPerRun(1000, func() {
			if e := tc.req(c); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n != 0 {
			t.Errorf("%s: %v allocations per request, want 0", tc.name, n)
		}
	}
}

// writeCommand writes the same RESP whether the header fits the writer's
// free space (one append) or not (piece by piece).
func TestWriteCommandBytes(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		value     []byte
		want      string
	}{
		{"PING", "", nil, "*1\r\n$4\r\nPING\r\n"},
		{"GET", "THREAD00-000123", nil, "*2\r\n$3\r\nGET\r\n$15\r\nTHREAD00-000123\r\n"},
		{"SET", "k", []byte("value"), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n"},
		{"SET", "k", []byte{}, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"},
		{"BGSAVE", "", nil, "*1\r\n$6\r\nBGSAVE\r\n"},
	} {
		for _, size := range []int{4096, 16} { // 16: too little room for the one append
			var out bytes.Buffer
			c := &client{w: bufio.NewWriterSize(&out, size)}
			c.writeCommand(tc.name, tc.key, tc.value)
			if err := c.w.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("writeCommand(%q, %q, %q) with a %d-byte buffer wrote %q, want %q", tc.name, tc.key, tc.value, size, got, tc.want)
			}
		}
	}
}
