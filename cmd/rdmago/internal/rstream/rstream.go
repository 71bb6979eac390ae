// Package rstream is "rdmago rstream", as librdmacm's rstream: a stream
// benchmark over rsockets (package rsocket) that talks to the C program
// either way round, with its options and its output.
package rstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/rsocket"
)

// Commands are "rdmago rstream".
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "rstream",
		Summary: "stream benchmark over rsockets (as rstream)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), args, stdout, stderr)
		},
		Usage: func(w io.Writer) { fmt.Fprintf(w, usage, "rdmago rstream") },
	}}
}

// The sizes of the default run: each latency and bandwidth test, with
// the -S all option level that includes it (rstream's test_size).
var testSizes = []struct{ size, option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1},
	{1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1},
	{1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1},
	{1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1},
	{1 << 22, 1}, {1<<22 + 1<<21, 1},
}

// options are rstream's.
type options struct {
	dst, src      string // -s, -b
	bufferSize    int    // -B
	inline        int    // -i
	iterations    int    // -I
	count         int    // -C
	size          int    // -S
	sizeOption    int    // -S all
	custom        bool
	port          string // -p
	keepAlive     int    // -k seconds
	sockets       bool   // -T s: TCP through package net
	verify        bool   // -T v
	blocking      bool   // -T b (the Go side blocks either way)
	async         bool   // -T a
	numericHost   bool   // -f ip
	testName      string
	optimizeLat   bool
	optimizeBW    bool
	verifyOut, in uint8 // format_buf's and verify_buf's counters
	verified      int64
}

const usage = "usage: %s\n" +
	"\t[-s server_address]\n" +
	"\t[-b bind_address]\n" +
	"\t[-f address_format]\n" +
	"\t    name, ip, ipv6, or gid\n" +
	"\t[-B buffer_size]\n" +
	"\t[-i inline_size]\n" +
	"\t[-I iterations]\n" +
	"\t[-C transfer_count]\n" +
	"\t[-S transfer_size or all]\n" +
	"\t[-p port_number]\n" +
	"\t[-k keepalive_time]\n" +
	"\t[-T test_option]\n" +
	"\t    s|sockets - use standard tcp/ip sockets\n" +
	"\t    a|async - asynchronous operation (use poll)\n" +
	"\t    b|blocking - use blocking calls\n" +
	"\t    f|fork - fork server processing\n" +
	"\t    n|nonblocking - use nonblocking calls\n" +
	"\t    r|resolve - use rdma cm to resolve address\n" +
	"\t    v|verify - verify data\n"

// parse parses rstream's command line ("s:b:f:B:i:I:C:S:p:k:T:").
func parse(args []string, stdout, stderr io.Writer) (*options, int, bool) {
	o := &options{inline: 64, iterations: 1, count: 1000, size: 1000, port: "7471", testName: "custom"}
	fs := getopt.NewFlagSet("rstream")
	val := func(name string, set func(v string) error) {
		fs.Var(getopt.FuncValue{SetFunc: set}, name, "")
	}
	num := func(dst *int, custom bool) func(string) error {
		return func(v string) error {
			*dst = int(clib.Atoi(v))
			o.custom = o.custom || custom
			return nil
		}
	}
	val("s", func(v string) error { o.dst = v; return nil })
	val("b", func(v string) error { o.src = v; return nil })
	val("f", func(v string) error {
		switch {
		case hasPrefixFold(v, "ip"):
			o.numericHost = true
		case hasPrefixFold(v, "gid"):
			return errors.New("AF_IB addresses are not supported")
		default:
			fmt.Fprintf(stderr, "Warning: unknown address format\n")
		}
		return nil
	})
	val("B", num(&o.bufferSize, false))
	val("i", num(&o.inline, false))
	val("I", num(&o.iterations, true))
	val("C", num(&o.count, true))
	val("S", func(v string) error {
		if hasPrefixFold(v, "all") {
			o.sizeOption = 1
			return nil
		}
		o.custom = true
		o.size = int(clib.Atoi(v))
		return nil
	})
	val("p", func(v string) error { o.port = v; return nil })
	val("k", num(&o.keepAlive, false))
	val("T", func(v string) error { return o.testOption(v) })
	if _, err := getopt.Parse(fs, args); err != nil {
		// -h among them: rstream has none.
		io.WriteString(stderr, getopt.Message("rdmago rstream", args, err))
		fmt.Fprintf(stdout, usage, "rdmago rstream")
		return nil, 1, false
	}
	return o, 0, true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// testOption is set_test_opt.
func (o *options) testOption(arg string) error {
	if len(arg) == 1 {
		switch arg[0] {
		case 's':
			o.sockets = true
		case 'a':
			o.async = true
		case 'b':
			o.blocking = true
		case 'n':
			o.blocking = false
		case 'r':
		case 'v':
			o.verify = true
		case 'f':
			return errors.New("fork is not supported")
		default:
			return errors.New("invalid test option")
		}
		return nil
	}
	switch {
	case hasPrefixFold(arg, "socket"):
		o.sockets = true
	case hasPrefixFold(arg, "async"):
		o.async = true
	case hasPrefixFold(arg, "block"):
		o.blocking = true
	case hasPrefixFold(arg, "nonblock"):
		o.blocking = false
	case hasPrefixFold(arg, "resolve"):
	case hasPrefixFold(arg, "verify"):
		o.verify = true
	default:
		return errors.New("invalid test option")
	}
	return nil
}

// Main runs "rdmago rstream" and returns its exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, status, ok := parse(args, stdout, stderr)
	if !ok {
		return status
	}
	if err := o.run(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 255
	}
	return 0
}

func (o *options) run(ctx context.Context, stdout io.Writer) error {
	bufSize := o.size
	if !o.custom {
		bufSize = testSizes[len(testSizes)-1].size
	}
	buf := make([]byte, bufSize)
	var l net.Listener
	if o.dst == "" {
		var err error
		if l, err = o.listen(ctx); err != nil {
			return err
		}
		defer l.Close()
	}
	fmt.Fprintf(stdout, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n",
		"name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	if o.custom {
		c, err := o.connect(ctx, l)
		if err != nil {
			return err
		}
		defer c.Close()
		err = o.runTest(c, buf, stdout)
		shutdown(c)
		return err
	}
	for _, bw := range []bool{false, true} {
		o.optimizeLat, o.optimizeBW = !bw, bw
		c, err := o.connect(ctx, l)
		if err != nil {
			return err
		}
		for _, t := range testSizes {
			if t.option > o.sizeOption {
				continue
			}
			if bw {
				o.testName = sizeStr(int64(t.size), 4) + "_bw"
				o.iterations, o.size, o.count = 1, t.size, sizeToCount(t.size)
			} else {
				o.testName = sizeStr(int64(t.size), 4) + "_lat"
				o.count, o.size, o.iterations = 1, t.size, sizeToCount(t.size)
			}
			if err := o.runTest(c, buf, stdout); err != nil {
				c.Close()
				return err
			}
		}
		shutdown(c)
		c.Close()
	}
	return nil
}

// shutdown is rs_shutdown(SHUT_RDWR) before rs_close, with one
// difference: after shutting its sending down it waits, a moment at most,
// for the peer to end the connection (its SHUTDOWN or DISCONNECT, read as
// EOF), so that the peer reads everything before this side's DISCONNECT
// can reach it. rstream in -T a mode needs that: its rpoll reports
// POLLHUP alongside POLLIN when the DISCONNECT arrives with the last data
// unread, and it gives up with exit status 16, against its own server as
// against any other (docs/rsocket.md).
func shutdown(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	if cw.CloseWrite() != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(peerCloseWait))
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}

// peerCloseWait bounds shutdown's wait for the peer.
const peerCloseWait = 2 * time.Second

func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// sizeStr is size_str, truncated to fit n bytes as snprintf does.
func sizeStr(size int64, n int) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var fraction int64
	if size/base < 10 {
		fraction = (size % base) * 10 / base
	}
	s := fmt.Sprintf("%d%s", size/base, mag)
	if fraction != 0 {
		s = fmt.Sprintf("%d.%d%s", size/base, fraction, mag)
	}
	if n > 0 && len(s) > n {
		s = s[:n]
	}
	return s
}

func cntStr(cnt int64) string {
	switch {
	case cnt >= 1000000000:
		return fmt.Sprintf("%db", cnt/1000000000)
	case cnt >= 1000000:
		return fmt.Sprintf("%dm", cnt/1000000)
	case cnt >= 1000:
		return fmt.Sprintf("%dk", cnt/1000)
	}
	return fmt.Sprint(cnt)
}

// rsocket options of set_options: 1 MiB buffers unless -B (rsockets
// doubles SO_SNDBUF and SO_RCVBUF, as Linux does), inline per the test.
func (o *options) rsConfig() (sendBuf, recvBuf, inline int) {
	b := o.bufferSize
	if b == 0 {
		b = 1 << 19
	}
	inline = 0 // librdmacm's default
	if o.optimizeLat {
		inline = o.inline
	} else if o.optimizeBW {
		inline = -1
	}
	return 2 * b, 2 * b, inline
}

// listen listens; its connections, as connect's, wait in the kernel
// (rsocket WaitInKernel), as C rstream's blocking rsockets do: one
// goroutine drives the one connection, as one thread does in C.
func (o *options) listen(ctx context.Context) (net.Listener, error) {
	addr := net.JoinHostPort(o.src, o.port)
	if o.sockets {
		return (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	}
	s, r, in := o.rsConfig()
	lc := rsocket.ListenConfig{SendBuffer: s, RecvBuffer: r, Inline: in, Backlog: 1,
		KeepAlive: time.Duration(o.keepAlive) * time.Second, WaitInKernel: true}
	return lc.Listen(ctx, "rdma", addr)
}

// connect is client_connect, or server_connect's accept.
func (o *options) connect(ctx context.Context, l net.Listener) (net.Conn, error) {
	if l != nil {
		// The listener's settings are those of the latency run: unlike
		// rstream's set_options on the listening rsocket, the bandwidth
		// run's inline size of 0 applies to the client's writes only.
		return l.Accept()
	}
	addr := net.JoinHostPort(o.dst, o.port)
	if o.sockets {
		d := net.Dialer{}
		if o.src != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(o.src)}
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.(*net.TCPConn).SetNoDelay(true)
		}
		return c, err
	}
	s, r, in := o.rsConfig()
	d := rsocket.Dialer{SendBuffer: s, RecvBuffer: r, Inline: in, KeepAlive: time.Duration(o.keepAlive) * time.Second,
		WaitInKernel: true}
	if o.src != "" {
		a, err := rsocket.ResolveAddr("rdma", net.JoinHostPort(o.src, "0"))
		if err != nil {
			return nil, err
		}
		d.LocalAddr = a
	}
	return d.DialContext(ctx, "rdma", addr)
}

// runTest is run_test: a 16-byte exchange, then iterations of count
// transfers each way, timed.
func (o *options) runTest(c net.Conn, buf []byte, stdout io.Writer) error {
	client := o.dst != ""
	if err := o.xfer(c, buf, 16, client); err != nil {
		return err
	}
	if err := o.xfer(c, buf, 16, !client); err != nil {
		return err
	}
	start := time.Now()
	for range o.iterations {
		for range o.count {
			if err := o.xfer(c, buf, o.size, client); err != nil {
				return err
			}
		}
		for range o.count {
			if err := o.xfer(c, buf, o.size, !client); err != nil {
				return err
			}
		}
	}
	o.show(stdout, time.Since(start))
	return nil
}

// xfer is send_xfer when send is set, recv_xfer otherwise.
func (o *options) xfer(c net.Conn, buf []byte, size int, send bool) error {
	b := buf[:size]
	if send {
		if o.verify {
			for i := range b {
				b[i] = o.verifyOut
				o.verifyOut++
			}
		}
		if _, err := c.Write(b); err != nil {
			return fmt.Errorf("rsend: %w", err)
		}
		return nil
	}
	// recv_xfer's loop of rrecv calls, on c itself: io.ReadFull would
	// convert c to an io.Reader on every message, an itab lookup the C
	// tool does not pay.
	for off := 0; off < len(b); {
		n, err := c.Read(b[off:])
		off += n
		if err != nil && off < len(b) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("rrecv: %w", err)
		}
	}
	if o.verify {
		for i := range b {
			if b[i] != o.in {
				return fmt.Errorf("data verification failed byte %d", o.verified)
			}
			o.in++
			o.verified++
		}
	}
	return nil
}

// show is show_perf, with its float arithmetic.
func (o *options) show(w io.Writer, d time.Duration) {
	usec := float32(d.Microseconds())
	bytes := int64(o.iterations) * int64(o.count) * int64(o.size) * 2
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n",
		o.testName, sizeStr(int64(o.size), 0), cntStr(int64(o.count)), cntStr(int64(o.iterations)),
		sizeStr(bytes, 0), float64(usec)/1000000., float64(bytes*8)/(1000.*float64(usec)),
		(float64(usec)/float64(o.iterations))/float64(o.count*2))
}
