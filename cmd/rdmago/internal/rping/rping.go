// Package rping is "rdmago rping", as rdma-core's rping.
package rping

// "rdmago rping": rdma-core's rping (librdmacm/examples/rping.c, v44.0) in
// Go, wire compatible with it: either side may be the C program. This file
// holds the command line; wire.go the messages, the ping data and
// the states; run.go the run over package cm and the verbs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
)

// Commands are "rdmago rping".
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "rping",
		Summary: "RDMA read and write ping-pong over rdma_cm (as rping)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return rpingMain(context.Background(), args, stdout, stderr)
		},
		Usage: func(w io.Writer) { rpUsage(w) },
	}}
}

// rpOptions are rping's options, with its types.
type rpOptions struct {
	server     int        // -s: 1, -c: 0, neither: -1
	addr       netip.Addr // -a: the server's address (default 0.0.0.0)
	src        netip.Addr // -I: the client's source address, if valid
	port       uint16     // -p
	persistent bool       // -P
	count      int32      // -C: 0 pings for ever
	size       int32      // -S
	verbose    int        // -v
	validate   int        // -V
	debug      int        // -d
	selfQP     bool       // -q
	keepAlive  int32      // -K: report a dead peer within this many ms (rdmago's own)
}

func rpDefaults() rpOptions {
	return rpOptions{server: -1, addr: netip.IPv4Unspecified(), port: rpDefaultPort, size: rpDefaultSize}
}

// rpOwnUsage is the usage of the options rping does not have: the rest of
// the usage is rping's, byte for byte.
const rpOwnUsage = "\t-K ms\t\t(rdmago) keepalive: report a peer that stopped answering within ms milliseconds\n"

// rpUsage writes rping's usage, to stdout as rping does.
func rpUsage(w io.Writer) {
	const name = "rdmago rping"
	io.WriteString(w, name+" -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"+
		name+" -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n"+
		"\t-c\t\tclient side\n"+
		"\t-I\t\tSource address to bind to for client.\n"+
		"\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n"+
		"\t-v\t\tdisplay ping data to stdout\n"+
		"\t-V\t\tvalidate ping data\n"+
		"\t-d\t\tdebug printfs\n"+
		"\t-S size \tping data size\n"+
		"\t-C count\tping count times\n"+
		"\t-a addr\t\taddress\n"+
		"\t-p port\t\tport\n"+
		"\t-P\t\tpersistent server mode allowing multiple connections\n"+
		"\t-q\t\tuse self-created, self-modified QP\n"+
		rpOwnUsage)
}

// rpLookup resolves -a and -I; tests replace it.
var rpLookup = func(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs[0].Unmap(), nil
}

// gaiCode is the getaddrinfo error code (EAI_*) and gai_strerror text for
// a failed lookup.
func gaiCode(err error) (int, string) {
	var de *net.DNSError
	if errors.As(err, &de) && (de.IsTemporary || de.IsTimeout) && !de.IsNotFound {
		return -3, "Temporary failure in name resolution" // EAI_AGAIN
	}
	return -2, "Name or service not known" // EAI_NONAME
}

// rpParse parses args as rping's getopt loop does ("a:I:Pp:C:S:t:scvVdq",
// no getopt messages), acting on each option in order as rping does: the
// -d lines and the complaints about -S and -C are printed as they come,
// and the status is that of the last -a or -I, or EINVAL after a bad -S
// or -C. It returns the options, the status to exit with unless run is
// set, and whether to run. -h prints the usage with status 0.
func rpParse(ctx context.Context, args []string, stdout, stderr io.Writer) (o rpOptions, status int, run bool) {
	o = rpDefaults()
	ret := 0
	dbg := func(format string, a ...any) {
		if o.debug > 0 {
			fmt.Fprintf(stdout, format, a...)
		}
	}
	fs := getopt.NewFlagSet("rping")
	val := func(name string, set func(v string)) {
		fs.Var(getopt.FuncValue{SetFunc: func(v string) error { set(v); return nil }}, name, "")
	}
	boolean := func(name string, set func()) {
		fs.Var(getopt.FuncValue{IsBool: true, SetFunc: func(v string) error {
			if v != "true" {
				return errors.New("no value allowed")
			}
			set()
			return nil
		}}, name, "")
	}
	getAddr := func(v string, dst *netip.Addr) {
		a, err := rpLookup(ctx, v)
		if err != nil {
			code, msg := gaiCode(err)
			fmt.Fprintf(stdout, "getaddrinfo failed (%s) - invalid hostname or IP address\n", msg)
			ret = code
			return
		}
		*dst, ret = a, 0
	}
	val("a", func(v string) { getAddr(v, &o.addr) })
	val("I", func(v string) { getAddr(v, &o.src) })
	boolean("P", func() { o.persistent = true })
	val("p", func(v string) {
		o.port = uint16(clib.Atoi(v))
		dbg("port %d\n", clib.Atoi(v))
	})
	boolean("s", func() { o.server = 1; dbg("server\n") })
	boolean("c", func() { o.server = 0; dbg("client\n") })
	val("S", func(v string) {
		o.size = clib.Atoi(v)
		if !rpSizeOK(o.size) {
			fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, rpMinSize, rpBufSize)
			ret = 22 // EINVAL
		} else {
			dbg("size %d\n", clib.Atoi(v))
		}
	})
	val("C", func(v string) {
		o.count = clib.Atoi(v)
		if o.count < 0 {
			fmt.Fprintf(stderr, "Invalid count %d\n", o.count)
			ret = 22
		} else {
			dbg("count %d\n", o.count)
		}
	})
	boolean("v", func() { o.verbose++; dbg("verbose\n") })
	boolean("V", func() { o.validate++; dbg("validate data\n") })
	boolean("d", func() { o.debug++ })
	boolean("q", func() { o.selfQP = true })
	val("K", func(v string) {
		if o.keepAlive = clib.Atoi(v); o.keepAlive < 4 {
			fmt.Fprintf(stderr, "Invalid keepalive %d ms (at least 4)\n", o.keepAlive)
			ret = 22
		}
	})
	// -t is in rping's option string but not handled: its usage.
	fs.Var(getopt.FuncValue{SetFunc: func(string) error { return errors.New("not handled") }}, "t", "")

	if _, err := getopt.Parse(fs, args); err != nil {
		// -h among them: rping has none.
		rpUsage(stdout)
		return o, 22, false
	}
	if ret != 0 {
		return o, ret, false
	}
	if o.server == -1 {
		rpUsage(stdout)
		return o, 22, false
	}
	return o, 0, true
}

// rpingMain runs "rdmago rping" and returns rping's exit status: its
// main's return value (0, an errno, or -1 as 255).
func rpingMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &rpOutput{stdout: stdout, stderr: stderr}
	o, status, run := rpParse(ctx, args, syncWriter{out, false}, syncWriter{out, true})
	if !run {
		return int(uint8(status))
	}
	r := &rpRun{o: o, out: out}
	return r.main(ctx)
}

// rpOutput is the program's stdout and stderr, shared by its goroutines.
// Once the program has "exited" (a goroutine did what rping's threads do
// with exit()), nothing more is written.
type rpOutput struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	exited         bool
}

func (o *rpOutput) write(toErr bool, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.exited {
		return
	}
	if toErr {
		io.WriteString(o.stderr, s)
	} else {
		io.WriteString(o.stdout, s)
	}
}

// exit stops all output and reports whether this was the first exit.
func (o *rpOutput) exit() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	first := !o.exited
	o.exited = true
	return first
}

// syncWriter writes to one stream of an rpOutput.
type syncWriter struct {
	o     *rpOutput
	toErr bool
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.o.write(w.toErr, string(p))
	return len(p), nil
}
