// Package valkeybench is "rdmago valkey-benchmark": SET and GET against a
// Valkey server, over its RDMA transport (package valkeyrdma) or over TCP,
// with valkey-benchmark's main options, and every reply checked.
package valkeybench

// valkey-benchmark (valkey 8.1) has no RDMA transport, and valkey's own
// RDMA client, tests/rdma/rdma-test, prints no figures. This command is
// what `make bench` measures the Go transport with: each client connects,
// answers a PING and builds its keys and values before a barrier, so that
// the timed part is the requests alone; then every client SETs its keys,
// and after a second barrier GETs them back and compares each value.
//
// -t rdma-test runs instead, per client, the sequence of rdma-test's
// thread (PING, its keys SET one by one, one BGSAVE from the first client
// to get there, the keys read back and compared) with no barriers, and
// prints rdma-test's progress lines: the bench times both programs' phases
// from those lines' arrival, so that the C client and this one are
// measured the same way.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/valkeyrdma"
)

// Commands is "rdmago valkey-benchmark".
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "valkey-benchmark",
		Summary: "SET and GET against a Valkey server over RDMA or TCP (as valkey-benchmark)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), args, stdout, stderr)
		},
	}}
}

// options are the command line.
type options struct {
	host     string
	port     int
	clients  int
	requests int
	size     int
	pipeline int
	tests    string
	rdma     bool
	direct   bool
	csv      bool
	timeout  time.Duration
}

const usageHead = `usage: rdmago valkey-benchmark [-h host] [-p port] [-c clients] [-n requests]
       [-d size] [-P pipeline] [-t set,get|rdma-test] [--rdma [--wait-in-kernel=false]]
       [--csv]

SET and GET against a Valkey server, over its RDMA transport with --rdma
(valkey-server --rdma-port) and over TCP without. Each client sets its own
keys and reads them back; every reply is checked. -t rdma-test runs the
sequence of valkey's tests/rdma/rdma-test instead (-n keys per client).

`

func newFlags(o *options, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("valkey-benchmark", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.host, "h", "127.0.0.1", "server `host`name or address")
	fs.IntVar(&o.port, "p", 6379, "server `port`")
	fs.IntVar(&o.clients, "c", 1, "parallel `clients`, each with its own connection")
	fs.IntVar(&o.requests, "n", 10000, "total `requests` of each test (with -t rdma-test, keys per client)")
	fs.IntVar(&o.size, "d", 3, "`bytes` in each SET value")
	fs.IntVar(&o.pipeline, "P", 1, "`requests` each client sends before reading their replies")
	fs.StringVar(&o.tests, "t", "set,get", "`tests` to run: set,get or rdma-test")
	fs.BoolVar(&o.rdma, "rdma", false, "connect over Valkey's RDMA transport")
	fs.BoolVar(&o.direct, "wait-in-kernel", true, "with --rdma, wait for replies in the kernel, as valkey's C client does (valkeyrdma.Dialer.WaitInKernel); false waits in Go's poller")
	fs.BoolVar(&o.csv, "csv", false, "print the figures as CSV")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "limit for each test")
	fs.Usage = func() {
		fmt.Fprint(w, usageHead)
		fs.PrintDefaults()
	}
	return fs
}

// Main runs the command and returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{}
	// -h is the host, as valkey-benchmark's; alone at the end, with no
	// host after it, it asks for the usage, as rdmago's commands' -h does.
	for i, a := range args {
		if a == "--help" || a == "-help" || a == "-h" && i == len(args)-1 {
			newFlags(o, stdout).Usage()
			return 0
		}
	}
	fs := newFlags(o, stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "valkey-benchmark: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := o.check(); err != nil {
		fmt.Fprintf(stderr, "valkey-benchmark: %v\n", err)
		return 2
	}
	var err error
	if o.tests == "rdma-test" {
		err = rdmaTest(ctx, o, stdout)
	} else {
		err = benchmark(ctx, o, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "valkey-benchmark: %v\n", err)
		return 1
	}
	return 0
}

func (o *options) check() error {
	switch {
	case o.clients < 1 || o.clients > 1024:
		return fmt.Errorf("-c %d: want 1 to 1024 clients", o.clients)
	case o.requests < 1:
		return fmt.Errorf("-n %d: want at least 1 request", o.requests)
	case o.size < 1 || o.size > 64<<20:
		return fmt.Errorf("-d %d: want 1 B to 64 MiB", o.size)
	case o.pipeline < 1 || o.pipeline > 4096:
		return fmt.Errorf("-P %d: want 1 to 4096", o.pipeline)
	case o.port < 1 || o.port > 65535:
		return fmt.Errorf("-p %d: not a port", o.port)
	}
	for _, t := range strings.Split(o.tests, ",") {
		if t != "set" && t != "get" && !(t == "rdma-test" && o.tests == t) {
			return fmt.Errorf("-t %q: want set, get or both, or rdma-test alone", o.tests)
		}
	}
	return nil
}

// dial connects one client.
func (o *options) dial(ctx context.Context) (net.Conn, error) {
	addr := net.JoinHostPort(o.host, strconv.Itoa(o.port))
	if o.rdma {
		// A goroutine per connection: what WaitInKernel suits.
		d := valkeyrdma.Dialer{WaitInKernel: o.direct}
		return d.DialContext(ctx, "rdma", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (o *options) transport() string {
	if o.rdma {
		return "RDMA"
	}
	return "TCP"
}

// client is one connection with its keys and buffered reader and writer.
type client struct {
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	keys    []string
	pattern []byte // the values' bytes after their key's number
	value   []byte // the value of the key last passed to valueOf
	line    []byte
}

func newClient(conn net.Conn, size int) *client {
	buf := max(64<<10, size+64)
	c := &client{conn: conn, r: bufio.NewReaderSize(conn, buf), w: bufio.NewWriterSize(conn, buf), value: make([]byte, size), pattern: make([]byte, size)}
	for j := range c.pattern {
		c.pattern[j] = 'a' + byte(j%26)
	}
	return c
}

// valueOf sets c.value to key i's value: a fixed pattern with i's decimal
// digits at its start, so that a reply from another key shows.
func (c *client) valueOf(i int) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], int64(i), 10)
	n := copy(c.value, digits)
	copy(c.value[n:], c.pattern[n:])
	return c.value
}

// writeCommand buffers one RESP array: the command's name, then key and
// value when they are not empty.
func (c *client) writeCommand(name, key string, value []byte) {
	n := 1
	if key != "" {
		n++
	}
	if value != nil {
		n++
	}
	// The header in one append to the writer's free space and one Write:
	// a WriteString or WriteByte per piece cost about 1,000 instructions
	// a GET (counted, docs/valkey.md). A nearly full buffer (a
	// pipeline's) takes the pieces one by one instead; appending past
	// the free space would allocate.
	if b := c.w.AvailableBuffer(); cap(b) >= len(name)+len(key)+80 {
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(n), 10)
		b = appendBulk(b, name)
		if key != "" {
			b = appendBulk(b, key)
		}
		if value != nil {
			b = append(b, "\r\n$"...)
			b = strconv.AppendInt(b, int64(len(value)), 10)
		}
		c.w.Write(append(b, "\r\n"...))
		if value != nil {
			c.w.Write(value)
			c.w.WriteString("\r\n")
		}
		return
	}
	c.w.WriteByte('*')
	c.writeInt(n)
	c.w.WriteString("\r\n")
	c.writeBulk(name, nil)
	if key != "" {
		c.writeBulk(key, nil)
	}
	if value != nil {
		c.writeBulk("", value)
	}
}

// appendBulk appends CRLF and the bulk string s without its final CRLF,
// which the next piece begins with.
func appendBulk(b []byte, s string) []byte {
	b = append(b, "\r\n$"...)
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	return append(b, s...)
}

// writeBulk buffers one bulk string, s or b.
func (c *client) writeBulk(s string, b []byte) {
	c.w.WriteByte('$')
	c.writeInt(len(s) + len(b))
	c.w.WriteString("\r\n")
	c.w.WriteString(s)
	c.w.Write(b)
	c.w.WriteString("\r\n")
}

// writeInt buffers n in decimal. It formats into the writer's free space
// (AvailableBuffer): a digits array of its own would move to the heap on
// every call, since Write hands its argument to the connection.
func (c *client) writeInt(n int) {
	c.w.Write(strconv.AppendInt(c.w.AvailableBuffer(), int64(n), 10))
}

// readLine reads one reply line without its CRLF.
func (c *client) readLine() ([]byte, error) {
	c.line = c.line[:0]
	for {
		frag, err := c.r.ReadSlice('\n')
		c.line = append(c.line, frag...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
	if len(c.line) < 2 || c.line[len(c.line)-2] != '\r' {
		return nil, fmt.Errorf("reply line %q does not end in CRLF", c.line)
	}
	return c.line[:len(c.line)-2], nil
}

// expectStatus reads a simple-string reply and checks it.
func (c *client) expectStatus(want string) error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	if string(line) != "+"+want {
		return fmt.Errorf("reply %q, want +%s", line, want)
	}
	return nil
}

// ping sends PING and checks the PONG.
func (c *client) ping() error {
	c.writeCommand("PING", "", nil)
	if err := c.w.Flush(); err != nil {
		return err
	}
	return c.expectStatus("PONG")
}

// expectBulk reads a bulk-string reply and compares it with want.
func (c *client) expectBulk(want []byte) error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	if len(line) == 0 || line[0] != '$' {
		return fmt.Errorf("reply %q, want a bulk string", line)
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil || n != len(want) {
		return fmt.Errorf("reply %q, want a bulk string of %d bytes", line, len(want))
	}
	// Compare in place, a buffer's worth at a time.
	for rest := want; len(rest) > 0; {
		got, err := c.r.Peek(min(len(rest), c.r.Size()))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, rest[:len(got)]) {
			return errors.New("GET returned another value than the SET stored")
		}
		c.r.Discard(len(got))
		rest = rest[len(got):]
	}
	crlf, err := c.readLine()
	if err != nil {
		return err
	}
	if len(crlf) != 0 {
		return fmt.Errorf("%d bytes after a bulk string", len(crlf))
	}
	return nil
}

// open connects the clients and gives each its keys: -n requests split
// evenly over them, "rdmago:C:I".
func open(ctx context.Context, o *options) ([]*client, error) {
	cs := make([]*client, 0, o.clients)
	for c := range o.clients {
		conn, err := o.dial(ctx)
		if err != nil {
			closeAll(cs)
			return nil, fmt.Errorf("client %d: %w", c, err)
		}
		cl := newClient(conn, o.size)
		n := o.requests / o.clients
		if c < o.requests%o.clients {
			n++
		}
		for i := range n {
			cl.keys = append(cl.keys, fmt.Sprintf("rdmago:%d:%d", c, i))
		}
		cs = append(cs, cl)
	}
	return cs, nil
}

func closeAll(cs []*client) {
	for _, c := range cs {
		c.conn.Close()
	}
}

// benchmark runs -t set,get.
func benchmark(ctx context.Context, o *options, stdout io.Writer) error {
	cs, err := open(ctx, o)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	for i, c := range cs {
		c.conn.SetDeadline(time.Now().Add(o.timeout))
		if err := c.ping(); err != nil {
			return fmt.Errorf("client %d: PING: %w", i, err)
		}
	}
	if o.csv {
		fmt.Fprintln(stdout, `"test","transport","clients","size","requests","seconds","rps"`)
	}
	for _, test := range strings.Split(o.tests, ",") {
		d, err := run(cs, o, test)
		if err != nil {
			return err
		}
		rps := float64(o.requests) / d.Seconds()
		if o.csv {
			fmt.Fprintf(stdout, "%q,%q,\"%d\",\"%d\",\"%d\",\"%.6f\",\"%.2f\"\n", strings.ToUpper(test), o.transport(), o.clients, o.size, o.requests, d.Seconds(), rps)
		} else {
			fmt.Fprintf(stdout, "%s: %.2f requests per second (%d requests, %d clients, %d-byte values, pipeline %d, %s, %.3f s)\n",
				strings.ToUpper(test), rps, o.requests, o.clients, o.size, o.pipeline, o.transport(), d.Seconds())
		}
	}
	return nil
}

// run times one test over every client at once, from the moment they
// all start to the last one's last reply.
func run(cs []*client, o *options, test string) (time.Duration, error) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, len(cs))
	)
	for i, c := range cs {
		c.conn.SetDeadline(time.Now().Add(o.timeout))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = c.run(test, o.pipeline)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	d := time.Since(t0)
	for i, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("%s: client %d: %w", strings.ToUpper(test), i, err)
		}
	}
	return d, nil
}

// run sends the client's requests of test, pipeline at a time, and checks
// their replies.
func (c *client) run(test string, pipeline int) error {
	for i := 0; i < len(c.keys); i += pipeline {
		batch := c.keys[i:min(i+pipeline, len(c.keys))]
		for j, k := range batch {
			if test == "set" {
				c.writeCommand("SET", k, c.valueOf(i+j))
			} else {
				c.writeCommand("GET", k, nil)
			}
		}
		if err := c.w.Flush(); err != nil {
			return err
		}
		for j := range batch {
			var err error
			if test == "set" {
				err = c.expectStatus("OK")
			} else {
				err = c.expectBulk(c.valueOf(i + j))
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", strings.ToUpper(test), batch[j], err)
			}
		}
	}
	return nil
}

// rdmaTest runs rdma-test's sequence on each client.
func rdmaTest(ctx context.Context, o *options, stdout io.Writer) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // one progress line at a time
		bgsaved atomic.Bool
		errs    = make([]error, o.clients)
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format, args...)
	}
	for t := range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[t] = rdmaTestClient(ctx, o, t, &bgsaved, say)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	say("Valkey Over RDMA test [OK]\n")
	return nil
}

// rdmaTestClient is rdma-test's test_routine, with -n keys of -d bytes
// (rdma-test's are 1024 bytes).
func rdmaTestClient(ctx context.Context, o *options, t int, bgsaved *atomic.Bool, say func(string, ...any)) error {
	conn, err := o.dial(ctx)
	if err != nil {
		return fmt.Errorf("client %d: %w", t, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(o.timeout))
	c := newClient(conn, o.size)
	if err := c.ping(); err != nil {
		return fmt.Errorf("client %d: PING: %w", t, err)
	}
	say("Valkey Over RDMA test thread[%d] PING/PONG [OK]\n", t)
	// Random upper-case values, as rdma-test's. With 16 clients the
	// others' SETs and GETs run meanwhile: a PCG of the client's own,
	// each draw giving two letters, keeps this to a few instructions a
	// byte, as glibc's random() takes in rdma-test (rand.IntN's ChaCha8
	// took half the client's CPU).
	rng := rand.NewPCG(uint64(time.Now().UnixNano()), uint64(t))
	values := make([][]byte, o.requests)
	for i := range values {
		v := make([]byte, o.size)
		for k := 0; k < len(v); k += 2 {
			x := rng.Uint64()
			v[k] = 'A' + byte(uint64(uint32(x))*26>>32)
			if k+1 < len(v) {
				v[k+1] = 'A' + byte((x>>32)*26>>32)
			}
		}
		values[i] = v
		c.keys = append(c.keys, fmt.Sprintf("THREAD%02d-%06d", t, i))
	}
	say("Valkey Over RDMA test thread[%d] prepare %d KVs [OK]\n", t, o.requests)
	for i, k := range c.keys {
		c.writeCommand("SET", k, values[i])
		if err := c.w.Flush(); err != nil {
			return err
		}
		if err := c.expectStatus("OK"); err != nil {
			return fmt.Errorf("client %d: SET %s: %w", t, k, err)
		}
	}
	say("Valkey Over RDMA test thread[%d] SET %d KVs [OK]\n", t, o.requests)
	if !bgsaved.Swap(true) {
		c.writeCommand("BGSAVE", "", nil)
		if err := c.w.Flush(); err != nil {
			return err
		}
		if err := c.expectStatus("Background saving started"); err != nil {
			return fmt.Errorf("client %d: BGSAVE: %w", t, err)
		}
		say("Valkey Over RDMA test thread[%d] BGSAVE [OK]\n", t)
	}
	for i, k := range c.keys {
		c.writeCommand("GET", k, nil)
		if err := c.w.Flush(); err != nil {
			return err
		}
		if err := c.expectBulk(values[i]); err != nil {
			return fmt.Errorf("client %d: GET %s: %w", t, k, err)
		}
	}
	say("Valkey Over RDMA test thread[%d] GET %d KVs [OK]\n", t, o.requests)
	return nil
}
