// Package perf is "rdmago perf" and the ib_*_{bw,lat} commands, as
// perftest's.
package perf

// "rdmago perf": perftest's ib_write_bw, ib_write_lat, ib_read_bw,
// ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw and ib_atomic_lat
// (linux-rdma/perftest 4.5-0.17, version 6.06) in Go, wire compatible with
// them over their TCP exchange: either side may be the C program. This
// file holds the command line and the option rules; wire.go the TCP
// exchange; format.go the printed header, tables and the JSON report;
// verbs.go the run over the verbs API.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
)

// perfVerb is the operation measured, with the values of perftest's
// VerbType (they are printed and compared as such).
type perfVerb int

const (
	perfSend perfVerb = iota
	perfWrite
	perfRead
	perfAtomic
)

// perfTst is the kind of test: latency or bandwidth.
type perfTst int

const (
	perfLat perfTst = iota
	perfBW
)

// perfConnType is the transport, with the values of perftest's RC, UC, UD.
type perfConnType int

const (
	perfRC perfConnType = iota
	perfUC
	perfUD
)

var perfConnNames = [...]string{"RC", "UC", "UD"}

func (c perfConnType) String() string { return perfConnNames[c] }

// perfTestsStr are perftest's names of the verbs in its header.
var perfTestsStr = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// perfVerbNames name the verbs in test names ("write_bw").
var perfVerbNames = [...]string{"send", "write", "read", "atomic"}

// perfAtomicTypes are perftest's atomic operations (-A).
var perfAtomicTypes = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

const (
	perfCmpAndSwap  = 0
	perfFetchAndAdd = 1
)

// perfOutput is --output: what a run prints (enum verbosity_level).
type perfOutput int

const (
	perfOutFull perfOutput = iota - 1
	perfOutBW
	perfOutMsgRate
	perfOutLat
)

// perfTest is one benchmark.
type perfTest struct {
	verb perfVerb
	tst  perfTst
}

func (t perfTest) String() string {
	s := perfVerbNames[t.verb]
	if t.tst == perfBW {
		return s + "_bw"
	}
	return s + "_lat"
}

// perfTests are the benchmarks, by name.
var perfTests = func() map[string]perfTest {
	m := map[string]perfTest{}
	for v := perfSend; v <= perfAtomic; v++ {
		for _, t := range []perfTst{perfLat, perfBW} {
			pt := perfTest{v, t}
			m[pt.String()] = pt
		}
	}
	return m
}()

// Commands are "rdmago perf" and one command per test, as perftest's
// programs: ib_write_bw ...
func Commands() []*command.Command {
	cs := []*command.Command{{
		Name:    "perf",
		Summary: "RDMA benchmarks, wire compatible with perftest's ib_{write,read,send,atomic}_{bw,lat}",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return perfCommand(context.Background(), args, stdout, stderr)
		},
	}}
	for name, t := range perfTests {
		cs = append(cs, &command.Command{
			Name:    "ib_" + name,
			Summary: fmt.Sprintf("as perftest's ib_%s (rdmago perf %s)", name, name),
			Run: func(args []string, stdout, stderr io.Writer) int {
				return perfMain(context.Background(), "rdmago ib_"+name, t, args, stdout, stderr)
			},
		})
	}
	return cs
}

// perfCommand is "rdmago perf <test> [options] [host]".
func perfCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	names := make([]string, 0, len(perfTests))
	for n := range perfTests {
		names = append(names, n)
	}
	sort.Strings(names)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: rdmago perf <test> [options] [host]\n\nThe tests: %s.\n"+
			"Without a host, wait for a client; with one, connect to the server there.\n"+
			"\"rdmago perf <test> -h\" lists the options. \"rdmago ib_<test>\" is the same as \"rdmago perf <test>\".\n",
			strings.Join(names, ", "))
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	name := strings.TrimPrefix(args[0], "ib_")
	t, ok := perfTests[name]
	if !ok {
		fmt.Fprintf(stderr, "rdmago perf: unknown test %q\n", args[0])
		usage(stderr)
		return 2
	}
	return perfMain(ctx, "rdmago perf "+name, t, args[1:], stdout, stderr)
}

// perfOptions are the parsed options, with perftest's types and defaults,
// and, once a run has opened its device, what it learnt there.
type perfOptions struct {
	test       perfTest
	port       int
	devName    string
	ibPort     int
	mtu        int // bytes; 0: the port's active MTU
	size       uint64
	reqSize    bool
	iters      uint64
	txDepth    int
	qpTimeout  int
	sl         int
	gidIndex   int // -1: none (InfiniBand)
	useGIDUser bool
	runAll     bool // -a
	conn       perfConnType
	numQPs     int
	events     bool
	eqNum      int
	useEqNum   bool // -X
	inline     int  // -1: the default for the device
	outReads   int
	rxDepth    int
	cqMod      int
	reqCQMod   bool
	atomicType int
	postList   int
	duration   int
	margin     int
	durationOn bool // -D: run for a time, not a number of iterations
	noPeak     bool
	unsorted   bool // -U
	histogram  bool // -H
	reportG    bool // --report_gbits
	json       bool
	output     perfOutput
	ipv6       bool
	tclass     int
	limitBW    float64
	limitBWOn  bool
	limitMR    float64
	limitMROn  bool
	server     string // the host to connect to: client mode when set
	// rdmaCM (-R): the QPs are connected with rdma_cm, and, as perftest
	// then does, the exchange runs over an rdma_cm connection of its own
	// instead of TCP (see cm.go).
	rdmaCM bool
	// keepAlive (--keepalive, rdmago's own): the sending QPs run a liveness
	// check that fails the test within this many milliseconds of the peer
	// going silent (uverbs.QP.SetKeepAlive).
	keepAlive int

	// Learnt from the device and the peer.
	transport string
	linkType  string // "IB" or "Ethernet"
	curMTU    int    // ibv_mtu code
	cycleBuf  int
	cacheLine int
}

func (o *perfOptions) client() bool { return o.server != "" }

// perfDefaults are init_perftest_params's defaults for a test.
func perfDefaults(t perfTest) perfOptions {
	o := perfOptions{test: t, port: 18515, ibPort: 1, qpTimeout: 14, conn: perfRC,
		numQPs: 1, gidIndex: -1, inline: -1, cqMod: 100, postList: 1, duration: 5,
		margin: -1, output: perfOutFull, atomicType: perfFetchAndAdd, iters: 1000}
	if t.tst == perfBW {
		o.size, o.txDepth = 65536, 128
	} else {
		o.size, o.txDepth = 2, 1
	}
	if t.verb == perfSend {
		o.rxDepth = 512
	} else {
		o.rxDepth = 1
	}
	if t.tst == perfBW && t.verb == perfWrite {
		o.iters = 5000
	}
	if t.verb == perfAtomic {
		o.size = 8
	}
	return o
}

// perfOpt is one option.
type perfOpt struct {
	short, long string
	hasArg      bool
	help        string
	// applies says whether the option's usage line shows for a test.
	applies func(t perfTest) bool
}

func perfAll(perfTest) bool         { return true }
func perfBWOnly(t perfTest) bool    { return t.tst == perfBW }
func perfLatOnly(t perfTest) bool   { return t.tst == perfLat }
func perfNotWrite(t perfTest) bool  { return t.verb != perfWrite }
func perfSendOnly(t perfTest) bool  { return t.verb == perfSend }
func perfReadAtom(t perfTest) bool  { return t.verb == perfRead || t.verb == perfAtomic }
func perfNotAtomic(t perfTest) bool { return t.verb != perfAtomic }
func perfAtomicOnly(t perfTest) bool {
	return t.verb == perfAtomic
}
func perfNotReadAtom(t perfTest) bool { return !perfReadAtom(t) }

var perfOpts = []perfOpt{
	{"a", "all", false, " Run sizes from 2 till 2^23", perfNotAtomic},
	{"A", "atomic_type", true, "=<type>  type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD)", perfAtomicOnly},
	{"b", "bidirectional", false, " Measure bidirectional bandwidth (not supported by rdmago)", perfBWOnly},
	{"c", "connection", true, "", perfAll}, // help by verb, in perfUsage
	{"C", "report-cycles", false, " report times in cpu cycle units (not supported by rdmago)", perfLatOnly},
	{"d", "ib-dev", true, "=<dev>  Use IB device <dev> (default first device found)", perfAll},
	{"D", "duration", true, "  Run test for a customized period of seconds.", perfAll},
	{"e", "events", false, " Sleep on CQ events (default poll)", perfNotWrite},
	{"X", "vector", true, "=<completion vector>  Set <completion vector> used for events", perfNotWrite},
	{"f", "margin", true, "  measure results within margins. (default=2sec)", perfAll},
	{"F", "CPU-freq", false, "  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.", perfAll},
	{"h", "help", false, "  Show this help screen.", perfAll},
	{"H", "report-histogrm", false, "  Print out all results (default print summary only)", perfLatOnly},
	{"i", "ib-port", true, "=<port>  Use port <port> of IB device (default 1)", perfAll},
	{"I", "inline_size", true, "=<size>  Max size of message to be sent in inline", perfNotReadAtom},
	{"l", "post_list", true, "=<list size>\n Post list of send WQEs of <list size> size (instead of single post)", perfBWOnly},
	{"L", "hop_limit", true, "=<hop_limit>  Set hop limit value (ttl for IPv4 RawEth QP). Values 0-255 (default 64)", perfAll},
	{"m", "mtu", true, "=<mtu>  MTU size : 256 - 4096 (default port mtu)", perfAll},
	{"n", "iters", true, "", perfAll}, // help by test, in perfUsage
	{"N", "noPeak", false, " Cancel peak-bw calculation (default with peak up to iters=20000)", perfBWOnly},
	{"o", "outs", true, "=<num>  num of outstanding read/atom(default max of device)", perfReadAtom},
	{"p", "port", true, "=<port>  Listen on/connect to port <port> (default 18515)", perfAll},
	{"q", "qp", true, "=<num of qp's>  Num of qp's(default 1)", perfBWOnly},
	{"Q", "cq-mod", true, "  Generate Cqe only after <--cq-mod> completion", perfBWOnly},
	{"r", "rx-depth", true, "=<dep>  Rx queue size (default 512).", perfSendOnly},
	{"R", "rdma_cm", false, "  Connect QPs with rdma_cm and run test on those QPs", perfAll},
	{"s", "size", true, "", perfNotAtomic}, // help by test, in perfUsage
	{"S", "sl", true, "=<sl>  SL (default 0)", perfAll},
	{"t", "tx-depth", true, "=<dep>  Size of tx queue (default 128)", perfBWOnly},
	{"T", "tos", true, "=<tos value>  Set <tos_value> to RDMA-CM QPs. available only with -R flag. values 0-256 (default off)", perfAll},
	{"u", "qp-timeout", true, "=<timeout>  QP timeout, timeout value is 4 usec * 2 ^(timeout), default 14", perfAll},
	{"U", "report-unsorted", false, "  (implies -H) print out unsorted results (default sorted)", perfLatOnly},
	{"V", "version", false, "  Display version number", perfAll},
	{"w", "limit_bw", true, "=<value>  Set verifier limit for bandwidth", perfBWOnly},
	{"x", "gid-index", true, "=<index>  Test uses GID with GID index (Default : IB - no gid . ETH - 0)", perfAll},
	{"y", "limit_msgrate", true, "=<value>  Set verifier limit for Msg Rate", perfBWOnly},
	{"z", "comm_rdma_cm", false, "  Communicate with rdma_cm module to exchange data (not supported by rdmago)", perfAll},
	{"", "json", false, "  Print a JSON report on stdout instead of the header and tables", perfAll},
	{"", "ipv6", false, "  Use IPv6 GID. Default is IPv4", perfAll},
	{"", "output", true, "=<units> Set verbosity output level: bandwidth , message_rate, latency ", perfAll},
	{"", "report_gbits", false, "  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)", perfBWOnly},
	{"", "tclass", true, "=<value>  Set the Traffic Class in GRH (if GRH is in use)", perfAll},
	{"", "use_old_post_send", false, " Use old post send flow (ibv_post_send) (rdmago always does)", perfAll},
	{"", "keepalive", true, "=<ms>  Fail the test within <ms> milliseconds of the peer going silent (rdmago only)", perfAll},
}

// perfUnsupported are perftest's long options rdmago knows but does not
// implement: they are refused by name rather than as unknown.
var perfUnsupported = map[string]bool{
	"mcg": false, "MGID": true, "dualport": false, "report-counters": true,
	"use-srq": false, "recv_post_list": true, "perform_warm_up": false, "mr_per_qp": false,
	"odp": false, "use_hugepages": false, "run_infinitely": false, "reversed": false,
	"report-both": false, "report-per-port": false, "mmap": true, "mmap-offset": true,
	"dlid": true, "pkey_index": true, "out_json": false, "out_json_file": true, "cpu_util": false,
	"latency_gap": true, "flows": true, "flows_burst": true, "rate_limit": true,
	"burst_size": true, "rate_units": true, "rate_limit_type": true, "typical_pkt_size": true,
	"source_ip": true, "force-link": true, "wait_destroy": true, "retry_count": true,
	"dont_xchg_versions": false, "flow_label": true, "inline_recv": true, "use_rss": false,
	"disable_pcie_relaxed": false, "server": false, "client": false,
}

// perfUsage writes the usage of test t under the name argv0.
func perfUsage(w io.Writer, argv0 string, t perfTest) {
	var b strings.Builder
	b.WriteString("Usage:\n")
	fmt.Fprintf(&b, "  %s            start a server and wait for connection\n", argv0)
	fmt.Fprintf(&b, "  %s <host>     connect to server at <host>\n", argv0)
	b.WriteString("\nOptions:\n")
	for _, p := range perfOpts {
		if !p.applies(t) {
			continue
		}
		help := p.help
		switch p.long {
		case "connection":
			switch t.verb {
			case perfSend:
				help = "=<RC/UC/UD>  Connection type RC/UC/UD (default RC)"
			case perfWrite:
				help = "=<RC/UC>  Connection type RC/UC (default RC)"
			default:
				help = "=<RC>  Connection type RC (default RC)"
			}
		case "iters":
			def := 1000
			if t.verb == perfWrite && t.tst == perfBW {
				def = 5000
			}
			help = fmt.Sprintf("=<iters>  Number of exchanges (at least 5, default %d)", def)
		case "size":
			def := 65536
			if t.tst == perfLat {
				def = 2
			}
			help = fmt.Sprintf("=<size>  Size of message to exchange (default %d)", def)
		}
		if p.short != "" {
			fmt.Fprintf(&b, "  -%s, --%s%s\n", p.short, p.long, help)
		} else {
			fmt.Fprintf(&b, "      --%s%s\n", p.long, help)
		}
	}
	io.WriteString(w, b.String())
}

// perfStopKind says why parsing stopped early.
type perfStopKind int

const (
	perfGo       perfStopKind = iota // parsed: run
	perfHelp                         // -h: usage on stdout, status 0
	perfVersionV                     // -V: version on stdout, status 0
	perfFail                         // msg on stderr (stdout first), optionally the usage; status 1
)

type perfStop struct {
	kind      perfStopKind
	stdout    string // printed before msg, as perftest prints RESULT_LINE first
	msg       string // for stderr, with its newline
	withUsage bool
	// parserError: perftest's parser failed, so its main adds " Parser
	// function exited with Error".
	parserError bool
}

var errPerfStop = errors.New("stop")

// perfStrtolFull is perftest's CHECK_VALUE: strtol(s, &end, 0) that must
// consume the whole argument.
func perfStrtolFull(s string) (int64, bool) {
	if s == "" {
		return 0, true // strtol of "" leaves end at the (empty) end
	}
	v := clib.Strtol(s)
	// Find what strtol consumed: sign, base prefix, digits.
	i := 0
	for i < len(s) && strings.IndexByte(" \t\n\v\f\r", s[i]) >= 0 {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	base := uint64(10)
	start := i
	if i < len(s) && s[i] == '0' {
		base = 8
		if i+2 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') && clib.DigitVal(s[i+2]) < 16 {
			base = 16
			i += 2
		}
	}
	j := i
	for j < len(s) && clib.DigitVal(s[j]) < base {
		j++
	}
	if j == start { // no digits: strtol leaves end at the start
		return 0, len(s) == 0
	}
	return v, j == len(s)
}

// perfParse parses args as perftest's parser does, then applies its
// force_dependecies rules that need no device.
func perfParse(argv0 string, t perfTest, args []string) (perfOptions, perfStop) {
	o := perfDefaults(t)
	stop := perfStop{kind: perfGo}
	// stopWith records why parsing stops, unless an earlier option did.
	stopWith := func(s perfStop) error {
		if stop.kind == perfGo {
			stop = s
		}
		return errPerfStop
	}
	fail := func(msg string) error {
		return stopWith(perfStop{kind: perfFail, msg: msg, parserError: true})
	}
	// failExit is a check that perftest ends with exit(1) inside the
	// parser, without " Parser function exited with Error".
	failExit := func(stdout, msg string) error {
		return stopWith(perfStop{kind: perfFail, stdout: stdout, msg: msg})
	}
	intArg := func(name, typ string, v string, dst *int64) error {
		n, ok := perfStrtolFull(v)
		if !ok {
			return fail(fmt.Sprintf(" %s argument %s should be %s\n", name, v, typ))
		}
		*dst = n
		return nil
	}
	inRange := func(name, v string, lo, hi int64, dst *int) error {
		var n int64
		if err := intArg(name, "int", v, &n); err != nil {
			return err
		}
		n = int64(int32(n))
		if n < lo || n > hi {
			return fail(fmt.Sprintf(" %s should be between %d and %d\n", name, lo, hi))
		}
		*dst = int(n)
		return nil
	}
	unsupported := func(what string) error {
		return stopWith(perfStop{kind: perfFail, msg: fmt.Sprintf("%s: %s is not supported by rdmago\n", argv0, what)})
	}
	// number is the handler of an option perftest reads with strtol into
	// an int, or into a uint8_t when typ says so: the value, so truncated,
	// goes to dst unless bad, when not nil, complains of it.
	number := func(name, typ string, dst *int, bad func(n int) string) func(string) error {
		return func(v string) error {
			var n int64
			if err := intArg(name, typ, v, &n); err != nil {
				return err
			}
			c := int(int32(n))
			if typ == "uint8_t" {
				c = int(uint8(n))
			}
			if bad != nil {
				if msg := bad(c); msg != "" {
					return fail(msg)
				}
			}
			*dst = c
			return nil
		}
	}

	// latOnly is the handler of a latency test's report switch; a
	// bandwidth test refuses it with perftest's message refusal.
	latOnly := func(refusal string, dst *bool) func(string) error {
		return func(string) error {
			if t.tst == perfBW {
				return fail(refusal)
			}
			*dst = true
			return nil
		}
	}
	// limit is the handler of a verifier limit (-w, -y): perftest reads it
	// with atof into a float and refuses a negative one with bad.
	limit := func(bad string, on *bool, dst *float64) func(string) error {
		return func(v string) error {
			*on = true
			*dst = float64(float32(perfAtof(v)))
			if *dst < 0 {
				return fail(bad)
			}
			return nil
		}
	}

	set := map[string]func(v string) error{
		"p": number("Port", "int", &o.port, nil),
		"d": func(v string) error { o.devName = v; return nil },
		"i": number("IB Port", "uint8_t", &o.ibPort, func(n int) string {
			if n < 1 {
				return "IB Port can't be less than 1\n"
			}
			return ""
		}),
		"m": number("MTU", "int", &o.mtu, nil),
		"n": func(v string) error {
			var n int
			if err := inRange("Iteration num", v, 5, 100000000, &n); err != nil {
				return err
			}
			o.iters = uint64(n)
			return nil
		},
		"t": func(v string) error { return inRange("Tx depth", v, 1, 15000, &o.txDepth) },
		"T": func(v string) error {
			var n int
			if err := inRange("TOS", v, 0, 255, &n); err != nil {
				return err
			}
			// perftest says so on stdout.
			return failExit(" TOS only valid for rdma_cm based QP and RawEth QP \n", "")
		},
		"L": func(v string) error {
			var n int
			if err := inRange("Hop Limit", v, 0, 255, &n); err != nil {
				return err
			}
			if n != 64 {
				return failExit(" Hop limit only valid for RawEth QP \n", "")
			}
			return nil
		},
		"u": number("QP Timeout", "uint8_t", &o.qpTimeout, nil),
		"S": number("Service Level", "uint8_t", &o.sl, func(n int) string {
			if n > 15 {
				return " Only 15 Service levels\n"
			}
			return ""
		}),
		"x": func(v string) error {
			o.useGIDUser = true
			return number("Gid index", "uint8_t", &o.gidIndex, func(n int) string {
				if n > 64 {
					return " Gid index should be between 0 and 64\n"
				}
				return ""
			})(v)
		},
		"c": func(v string) error {
			switch v {
			case "RC":
				o.conn = perfRC
			case "UC":
				if t.verb == perfRead || t.verb == perfAtomic {
					return failExit("", " UC connection not possible in READ/ATOMIC verbs\n")
				}
				o.conn = perfUC
			case "UD":
				if t.verb != perfSend {
					return failExit("", " UD connection only possible in SEND verb\n")
				}
				o.conn = perfUD
			case "RawEth", "XRC", "DC", "SRD":
				return unsupported("connection type " + v)
			default:
				return failExit("", " Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}\n")
			}
			return nil
		},
		"q": func(v string) error {
			if t.tst != perfBW {
				return fail(" Multiple QPs only available on bw tests\n")
			}
			return inRange("num of Qps", v, 1, 16384, &o.numQPs)
		},
		"I": func(v string) error {
			if err := inRange("Max inline", v, 0, 912, &o.inline); err != nil {
				return err
			}
			if t.verb == perfRead || t.verb == perfAtomic {
				return fail(" Inline feature not available on READ/Atomic verbs\n")
			}
			return nil
		},
		"o": number("Outstanding Reads", "int", &o.outReads, func(int) string {
			if t.verb != perfRead && t.verb != perfAtomic {
				return " Setting Outstanding reads only available on READ verb\n"
			}
			return ""
		}),
		"r": func(v string) error {
			if err := inRange(" Rx depth", v, 1, 16384, &o.rxDepth); err != nil {
				return err
			}
			if t.verb != perfSend && o.rxDepth > 1 {
				return fail(" On RDMA verbs rx depth can be only 1\n")
			}
			return nil
		},
		"Q": func(v string) error {
			o.reqCQMod = true
			return inRange("CQ moderation", v, 1, 1024, &o.cqMod)
		},
		"A": func(v string) error {
			if t.verb != perfAtomic {
				return fail(" You are not running the atomic_lat/bw test!\n To change the atomic action type, you must run one of the atomic tests\n")
			}
			switch v {
			case "CMP_AND_SWAP":
				o.atomicType = perfCmpAndSwap
			case "FETCH_AND_ADD":
				o.atomicType = perfFetchAndAdd
			default:
				return failExit("", " Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}\n")
			}
			return nil
		},
		"l": number("Send Post List size", "int", &o.postList, func(n int) string {
			if n < 1 {
				return " Send Post List size must be positive\n"
			}
			return ""
		}),
		"D": func(v string) error {
			o.durationOn = true
			return number("Duration period", "int", &o.duration, func(n int) string {
				if n <= 0 {
					return " Duration period must be positive\n"
				}
				return ""
			})(v)
		},
		"f": number("Margin", "int", &o.margin, func(n int) string {
			if n < 0 {
				return " Margin must be non-negative\n"
			}
			return ""
		}),
		"a": func(string) error { o.runAll = true; return nil },
		"F": func(string) error { return nil }, // rdmago reads no CPU frequency
		"V": func(string) error { return stopWith(perfStop{kind: perfVersionV}) },
		"h": func(string) error { return stopWith(perfStop{kind: perfHelp}) },
		"z": func(string) error { return unsupported("-z (data exchange over rdma_cm)") },
		"R": func(string) error {
			o.rdmaCM = true
			return nil
		},
		"s": func(v string) error {
			factor := uint64(1)
			if strings.HasSuffix(v, "K") {
				v, factor = strings.TrimSuffix(v, "K"), 1024
			} else if strings.HasSuffix(v, "M") {
				v, factor = strings.TrimSuffix(v, "M"), 1024*1024
			}
			o.size = uint64(clib.Strtol(v)) * factor
			o.reqSize = true
			if o.size < 1 || o.size > 0xffffffff/2 {
				return fail(fmt.Sprintf(" Message Size should be between %d and %d\n", 1, 0xffffffff/2))
			}
			return nil
		},
		"e": func(string) error {
			o.events = true
			if t.verb == perfWrite {
				return fail(" Events feature not available on WRITE verb\n")
			}
			return nil
		},
		"X": func(v string) error {
			if t.verb == perfWrite {
				return fail(" Events feature not available on WRITE verb\n")
			}
			o.useEqNum = true
			return inRange("EQN", v, 0, 2048, &o.eqNum)
		},
		"b": func(string) error {
			if t.tst == perfLat {
				return fail(" Bidirectional is only available in BW test\n")
			}
			return unsupported("-b (bidirectional bandwidth)")
		},
		"N": func(string) error {
			o.noPeak = true
			if t.tst == perfLat {
				return fail(" NoPeak only valid for BW tests\n")
			}
			return nil
		},
		"C": func(string) error {
			if t.tst != perfLat {
				return fail(" Available only on Latency tests\n")
			}
			return unsupported("-C (reporting in CPU cycles)")
		},
		"H":                 latOnly(" Available only on Latency tests\n", &o.histogram),
		"U":                 latOnly(" is Available only on Latency tests\n", &o.unsorted),
		"w":                 limit(" Invalid Minimum BW Limit\n", &o.limitBWOn, &o.limitBW),
		"y":                 limit(" Invalid Minimum msgRate Limit\n", &o.limitMROn, &o.limitMR),
		"json":              func(string) error { o.json = true; return nil },
		"ipv6":              func(string) error { o.ipv6 = true; return nil },
		"report_gbits":      func(string) error { o.reportG = true; return nil },
		"use_old_post_send": func(string) error { return nil },
		"keepalive": func(v string) error {
			var n int64
			if err := intArg("keepalive", "int", v, &n); err != nil {
				return err
			}
			if n < 4 {
				return fail(" Invalid keepalive: at least 4 ms\n")
			}
			o.keepAlive = int(n)
			return nil
		},
		"output": func(v string) error {
			switch v {
			case "bandwidth":
				o.output = perfOutBW
			case "message_rate":
				o.output = perfOutMsgRate
			case "latency":
				o.output = perfOutLat
			default:
				return fail(" Invalid verbosity level output flag. Please use bandwidth, latency, message_rate\n")
			}
			return nil
		},
		"tclass": func(v string) error {
			var n int64
			if err := intArg("traffic class", "uint16_t", v, &n); err != nil {
				return err
			}
			o.tclass = int(uint8(n))
			return nil
		},
	}

	fs := getopt.NewFlagSet(argv0)
	for _, p := range perfOpts {
		key := p.short
		if key == "" {
			key = p.long
		}
		f := set[key]
		v := getopt.Option(argv0, p.long, p.hasArg, f, fail)
		if p.short != "" {
			fs.Var(v, p.short, p.help)
		}
		fs.Var(v, p.long, p.help)
	}
	for name, hasArg := range perfUnsupported {
		fs.Var(getopt.FuncValue{IsBool: !hasArg, SetFunc: func(string) error { return unsupported("--" + name) }}, name, "")
	}

	operands, err := getopt.Parse(fs, args)
	if err != nil {
		if stop.kind != perfGo {
			return o, stop
		}
		if errors.Is(err, flag.ErrHelp) {
			return o, perfStop{kind: perfHelp}
		}
		return o, perfStop{kind: perfFail, parserError: true, withUsage: true,
			msg: getopt.Message(argv0, args, err) + " Invalid Command or flag.\n Please check command line and run again.\n\n"}
	}
	switch len(operands) {
	case 0:
	case 1:
		o.server = operands[0]
	default:
		return o, perfStop{kind: perfFail, parserError: true, msg: " Invalid Command line. Please check command rerun \n"}
	}
	return perfForceDependencies(o)
}

// perfResultLine is perftest's RESULT_LINE.
const perfResultLine = "---------------------------------------------------------------------------------------\n"

// perfForceDependencies applies perftest's force_dependecies: the rules
// between options, some of which change values and print a note on stdout,
// and some of which end the program.
func perfForceDependencies(o perfOptions) (perfOptions, perfStop) {
	t := o.test
	var notes, warns strings.Builder // stdout and stderr lines printed along the way
	fail := func(stdout, msg string) (perfOptions, perfStop) {
		return o, perfStop{kind: perfFail, stdout: notes.String() + stdout, msg: warns.String() + msg}
	}
	if !o.durationOn {
		if uint64(o.txDepth) > o.iters {
			o.txDepth = int(o.iters)
		}
		if t.verb == perfSend && uint64(o.rxDepth) > o.iters {
			o.rxDepth = int(o.iters)
		}
		if (o.conn == perfUD || o.conn == perfUC) && o.rxDepth == 512 {
			o.rxDepth = int(min(o.iters, 16000))
		}
	}
	if o.size > 8192 && o.conn != perfUD && !o.runAll && !o.events {
		if !o.reqCQMod {
			o.cqMod = 1
		} else if o.cqMod > 1 {
			notes.WriteString(perfResultLine + "Warning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results\n")
		}
	}
	if o.cqMod > o.txDepth {
		o.cqMod = o.txDepth
	}
	if t.verb == perfRead || t.verb == perfAtomic {
		o.inline = 0
	}
	if o.runAll {
		o.size = 8388608
	}
	if o.rdmaCM {
		// perftest's own refusals, in its words.
		if o.conn == perfUC {
			return fail(perfResultLine+" UC is not supported in librdmacm\n", "")
		}
		// perftest connects UD QPs through rdma_cm too (the peer's QP
		// number and Q_Key from the ESTABLISHED event, an address handle
		// learnt from a first receive); rdmago does not.
		if o.conn == perfUD {
			return fail("", "rdmago perf: -R with UD QPs (-c UD) is not supported; use RC, or UD without -R\n")
		}
	}
	if t.verb == perfAtomic && o.size != 8 {
		return fail(perfResultLine+"Message size cannot be changed for Atomic tests \n", "")
	}
	if o.postList > 1 {
		if t.tst != perfBW {
			return fail(perfResultLine, "Post list is supported in BW tests only\n")
		}
		if !o.durationOn && o.iters%uint64(o.postList) != 0 {
			return fail(perfResultLine, "Number of iterations must be a multiple of post list size\n")
		}
		if !o.reqCQMod {
			o.cqMod = o.postList
			notes.WriteString(perfResultLine + "Post List requested - CQ moderation will be the size of the post list\n")
		} else if o.postList%o.cqMod != 0 {
			return fail(perfResultLine, "Post list size must be a multiple of CQ moderation\n")
		}
	}
	if o.durationOn {
		o.iters = 0
		o.noPeak = true
		if o.events {
			return fail(perfResultLine, "Duration mode doesn't work with events.\n")
		}
		if o.runAll {
			return fail(perfResultLine, "Duration mode currently doesn't support running on all sizes.\n")
		}
	}
	if t.verb == perfSend && t.tst == perfBW && !o.client() {
		o.noPeak = true
	}
	if o.conn == perfUD && o.inline > 884 {
		notes.WriteString(perfResultLine)
		warns.WriteString("Setting inline size to 884 (Max inline size in UD)\n")
		o.inline = 884
	}
	if o.output != perfOutFull {
		if t.tst == perfBW && o.output != perfOutBW && o.output != perfOutMsgRate {
			return fail(perfResultLine, " Output verbosity level for BW can be: bandwidth, message_rate\n")
		}
		if t.tst == perfLat && o.output != perfOutLat {
			return fail(perfResultLine, " Output verbosity level for LAT can be: latency\n")
		}
	}
	if o.durationOn && o.margin == -1 {
		o.margin = o.duration / 4
	}
	// The work-around for odd receive depths in SEND.
	if t.verb == perfSend && o.rxDepth%2 == 1 && !o.runAll {
		o.rxDepth++
	}
	if !o.durationOn && o.iters > 20000 && !o.noPeak && t.tst == perfBW {
		o.noPeak = true
	}
	if !(o.duration > 2*o.margin) {
		return fail(perfResultLine, "please check that DURATION > 2*MARGIN\n")
	}
	if o.useEqNum && !o.events {
		return fail("", " Events must be enabled to select a completion vector\n")
	}
	return o, perfStop{kind: perfGo, stdout: notes.String(), msg: warns.String()}
}

// perfMain runs one benchmark with its arguments and returns the exit
// status: 0, or 1 for any failure, as perftest.
func perfMain(ctx context.Context, argv0 string, t perfTest, args []string, stdout, stderr io.Writer) int {
	o, stop := perfParse(argv0, t, args)
	switch stop.kind {
	case perfHelp:
		perfUsage(stdout, argv0, t)
		return 0
	case perfVersionV:
		fmt.Fprintf(stdout, "Version: %s\n", perfVersion)
		return 0
	case perfFail:
		io.WriteString(stdout, stop.stdout)
		io.WriteString(stderr, stop.msg)
		if stop.withUsage {
			perfUsage(stdout, argv0, t)
		}
		if stop.parserError {
			io.WriteString(stderr, " Parser function exited with Error\n")
		}
		return 1
	}
	if !o.json {
		io.WriteString(stdout, stop.stdout)
	}
	io.WriteString(stderr, stop.msg)
	r := &perfRun{o: o, stdout: stdout, stderr: stderr}
	return r.main(ctx)
}
