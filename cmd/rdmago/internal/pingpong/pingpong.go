// Package pingpong is "rdmago pingpong" and the *_pingpong commands, as
// rdma-core's ibv_{rc,uc,ud,srq}_pingpong.
package pingpong

// "rdmago pingpong": rdma-core's ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong and ibv_srq_pingpong (libibverbs/examples, v44.0) in Go,
// wire compatible with them: either side may be the C program. This file
// holds the command line; wire.go the TCP exchange and the output
// lines; verbs.go the run over the verbs API.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/qp"
)

// ppKind is which of the four C programs to be.
type ppKind int

const (
	ppRC ppKind = iota
	ppUC
	ppUD
	ppSRQ
	ppAll // every option of every kind: the first pass over "pingpong"'s arguments
)

var ppKindNames = [...]string{"rc", "uc", "ud", "srq"}

// ppKindCodes name the kinds in ppOpt.kinds.
const ppKindCodes = "rcds"

func (k ppKind) String() string {
	if k >= 0 && int(k) < len(ppKindNames) {
		return ppKindNames[k]
	}
	return fmt.Sprintf("ppKind(%d)", int(k))
}

// Commands are "rdmago pingpong" and one command per transport, as
// rdma-core's programs: rc_pingpong ...
func Commands() []*command.Command {
	cs := []*command.Command{{
		Name:    "pingpong",
		Summary: "ping-pong over RC, UC, UD or SRQ (as ibv_rc_pingpong and friends)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return pingpongMain(context.Background(), "pingpong", ppAll, args, stdout, stderr)
		},
	}}
	for _, k := range []ppKind{ppRC, ppUC, ppUD, ppSRQ} {
		name := k.String() + "_pingpong"
		cs = append(cs, &command.Command{
			Name:    name,
			Summary: fmt.Sprintf("ping-pong over %s (as ibv_%s)", ppTransport(k), name),
			Run: func(args []string, stdout, stderr io.Writer) int {
				return pingpongMain(context.Background(), name, k, args, stdout, stderr)
			},
			Usage: func(w io.Writer) { ppUsage(w, "rdmago "+name, k, false) },
		})
	}
	return cs
}

func ppTransport(k ppKind) string {
	if k == ppSRQ {
		return "RC queue pairs sharing an SRQ"
	}
	return strings.ToUpper(k.String())
}

// ppOptions are the parsed options, with the C programs' types.
type ppOptions struct {
	kind     ppKind
	devName  string
	devSet   bool
	port     uint32 // TCP port
	ibPort   int32
	size     uint32
	mtu      qp.MTU
	numQP    uint32 // srq
	rxDepth  uint32
	iters    uint32
	sl       int32
	events   bool
	gidIdx   int32 // -1: no GID
	chk      bool
	odp      bool // rc, srq
	iodp     bool // rc
	prefetch bool // rc
	ts       bool // rc
	dm       bool // rc
	newSend  bool // rc
	// server is the host to connect to: client mode when set.
	server string
}

func ppDefaults(k ppKind) ppOptions {
	o := ppOptions{kind: k, port: 18515, ibPort: 1, size: 4096, mtu: qp.MTU1024,
		numQP: 16, rxDepth: 500, iters: 1000, gidIdx: -1}
	if k == ppUD {
		o.size = 1024 // whatever its usage says
	}
	return o
}

// ppOpt is one option of the C programs.
type ppOpt struct {
	short, long string
	hasArg      bool
	kinds       string // the kinds that have it: r(c), (u)c, (u)d, s(rq)
	help        string // its usage line, after the option names
}

var ppOpts = []ppOpt{
	{"p", "port", true, "rcds", "=<port>      listen on/connect to port <port> (default 18515)"},
	{"d", "ib-dev", true, "rcds", "=<dev>     use IB device <dev> (default first device found)"},
	{"i", "ib-port", true, "rcds", "=<port>   use port <port> of IB device (default 1)"},
	{"s", "size", true, "rcds", "=<size>      size of message to exchange (default 4096)"},
	{"m", "mtu", true, "rcs", "=<size>       path MTU (default 1024)"},
	{"q", "num-qp", true, "s", "=<num>     number of QPs to use (default 16)"},
	{"r", "rx-depth", true, "rcds", "=<dep>   number of receives to post at a time (default 500)"},
	{"n", "iters", true, "rcds", "=<iters>    number of exchanges (default 1000)"},
	{"l", "sl", true, "rcds", "=<sl>          service level value"},
	{"e", "events", false, "rcds", "           sleep on CQ events (default poll)"},
	{"g", "gid-idx", true, "rcds", "=<gid index> local port gid index"},
	{"o", "odp", false, "rs", "\t\t    use on demand paging"},
	{"O", "iodp", false, "r", "\t\t    use implicit on demand paging"},
	{"P", "prefetch", false, "r", "\t    prefetch an ODP MR"},
	{"t", "ts", false, "r", "\t            get CQE with timestamp"},
	{"c", "chk", false, "rcds", "              validate received buffer"},
	{"j", "dm", false, "r", "\t            use device memory"},
	{"N", "new_send", false, "r", "            use new post send WR API"},
}

// has reports whether kind k has the option.
func (p ppOpt) has(k ppKind) bool {
	return k == ppAll || strings.Contains(p.kinds, ppKindCodes[k:k+1])
}

// ppUsage writes the usage of the C program of kind k, under name argv0.
// withType adds "pingpong"'s --type.
func ppUsage(w io.Writer, argv0 string, k ppKind, withType bool) {
	var b strings.Builder
	b.WriteString("Usage:\n")
	fmt.Fprintf(&b, "  %s            start a server and wait for connection\n", argv0)
	fmt.Fprintf(&b, "  %s <host>     connect to server at <host>\n", argv0)
	b.WriteString("\nOptions:\n")
	if withType {
		b.WriteString("      --type=<type>      rc, uc, ud or srq: which of ibv_{rc,uc,ud,srq}_pingpong to be (default rc)\n")
	}
	for _, p := range ppOpts {
		if !p.has(k) {
			continue
		}
		help := p.help
		switch {
		case k == ppUD && p.short == "s":
			help = "=<size>      size of message to exchange (default 2048)" // sic: it is 1024
		case k == ppUD && p.short == "l":
			help = "=<SL>          send messages with service level <SL> (default 0)"
		case k == ppSRQ && p.short == "n":
			help = "=<iters>    number of exchanges per QP(default 1000)"
		case k == ppRC && p.short == "c":
			help = "\t            validate received buffer"
		}
		fmt.Fprintf(&b, "  -%s, --%s%s\n", p.short, p.long, help)
	}
	io.WriteString(w, b.String())
}

// Why parsing stopped early.
type ppStopKind int

const (
	ppGo       ppStopKind = iota // parsed: run
	ppHelp                       // -h: usage on stdout, status 0
	ppUsageErr                   // usage on stdout, status 1, after msg on stderr
)

type ppStop struct {
	kind    ppStopKind
	msg     string // for stderr, with its newline; may be empty
	badType bool   // --type named no kind
}

var errPPStop = errors.New("stop")

// ppParse parses args as the C program of kind k does with getopt_long, or,
// for k == ppAll ("rdmago pingpong"), first finds --type and then does so
// for that kind.
func ppParse(argv0 string, k ppKind, args []string) (ppOptions, ppStop) {
	withType := k == ppAll
	if withType {
		// First pass, over every option of every kind, to learn the type;
		// the second pass judges the options by that type.
		o, stop := ppParseKind(argv0, ppAll, true, ppDefaults(ppRC), args)
		if stop.badType {
			return o, stop
		}
		k = o.kind
	}
	return ppParseKind(argv0, k, withType, ppDefaults(k), args)
}

func ppParseKind(argv0 string, k ppKind, withType bool, o ppOptions, args []string) (ppOptions, ppStop) {
	stop := ppStop{kind: ppGo}
	fail := func(msg string) error {
		if stop.kind == ppGo {
			stop = ppStop{kind: ppUsageErr, msg: msg}
		}
		return errPPStop
	}
	fs := getopt.NewFlagSet(argv0)

	set := map[string]func(v string) error{
		"p": func(v string) error {
			// ud uses strtol, the others strtoul: the same once in an
			// unsigned int.
			o.port = uint32(clib.Strtoul(v))
			if o.port > 65535 {
				return fail("")
			}
			return nil
		},
		"d": func(v string) error { o.devName, o.devSet = v, true; return nil },
		"i": func(v string) error {
			o.ibPort = int32(clib.Strtol(v))
			if o.ibPort < 1 {
				return fail("")
			}
			return nil
		},
		"s": func(v string) error {
			o.size = uint32(clib.Strtoul(v))
			if k == ppSRQ && o.size < 1 {
				return fail("")
			}
			return nil
		},
		"m": func(v string) error {
			o.mtu = clib.MTUEnum(int32(clib.Strtol(v)))
			if o.mtu == 0 {
				return fail("")
			}
			return nil
		},
		"q": func(v string) error { o.numQP = uint32(clib.Strtoul(v)); return nil },
		"r": func(v string) error { o.rxDepth = uint32(clib.Strtoul(v)); return nil },
		"n": func(v string) error { o.iters = uint32(clib.Strtoul(v)); return nil },
		"l": func(v string) error { o.sl = int32(clib.Strtol(v)); return nil },
		"e": func(string) error { o.events = true; return nil },
		"g": func(v string) error { o.gidIdx = int32(clib.Strtol(v)); return nil },
		"o": func(string) error { o.odp = true; return nil },
		"O": func(string) error { o.odp, o.iodp = true, true; return nil },
		"P": func(string) error { o.prefetch = true; return nil },
		"t": func(string) error { o.ts = true; return nil },
		"c": func(string) error { o.chk = true; return nil },
		"j": func(string) error { o.dm = true; return nil },
		"N": func(string) error { o.newSend = true; return nil },
	}
	for _, p := range ppOpts {
		if !p.has(k) {
			continue
		}
		f := set[p.short]
		v := getopt.Option(argv0, p.long, p.hasArg, f, fail)
		fs.Var(v, p.short, p.help)
		fs.Var(v, p.long, p.help)
	}
	if withType {
		fs.Var(getopt.FuncValue{SetFunc: func(s string) error {
			for i, n := range ppKindNames {
				if s == n {
					o.kind = ppKind(i)
					return nil
				}
			}
			err := fail(fmt.Sprintf("%s: --type %q: want rc, uc, ud or srq\n", argv0, s))
			stop.badType = true
			return err
		}}, "type", "rc, uc, ud or srq")
	}

	operands, err := getopt.Parse(fs, args)
	if err != nil {
		if stop.kind != ppGo {
			return o, stop
		}
		// -h is rdmago pingpong's own; ibv_*_pingpong call it an
		// invalid option, and so do their ports.
		if errors.Is(err, flag.ErrHelp) && withType {
			return o, ppStop{kind: ppHelp}
		}
		return o, ppStop{kind: ppUsageErr, msg: getopt.Message(argv0, args, err)}
	}
	switch len(operands) {
	case 0:
	case 1:
		o.server = operands[0]
	default:
		return o, ppStop{kind: ppUsageErr}
	}
	return o, stop
}

// pingpongMain runs "rdmago pingpong" (k == ppAll) or one of its aliases
// ("rdmago rc_pingpong": k fixed) and returns the exit status, the C
// program's: 0, or 1 for any failure.
func pingpongMain(ctx context.Context, name string, k ppKind, args []string, stdout, stderr io.Writer) int {
	argv0 := "rdmago " + name
	o, stop := ppParse(argv0, k, args)
	switch stop.kind {
	case ppHelp:
		ppUsage(stdout, argv0, o.kind, k == ppAll)
		return 0
	case ppUsageErr:
		io.WriteString(stderr, stop.msg)
		ppUsage(stdout, argv0, o.kind, k == ppAll)
		return 1
	}
	if err := ppCheckOptions(o); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	r := &ppRun{o: o, stdout: stdout, stderr: stderr}
	return r.main(ctx)
}

// ppMsg is an error whose text is a C program's message, capital letter,
// full stop and all.
type ppMsg string

func (m ppMsg) Error() string { return string(m) }

// ppCheckOptions refuses the combinations the C programs refuse before they
// open a device.
func ppCheckOptions(o ppOptions) error {
	switch o.kind {
	case ppRC:
		if o.odp && o.dm {
			return ppMsg("DM memory region can't be on demand")
		}
		if !o.odp && o.prefetch {
			return errors.New("prefetch is valid only with on-demand memory region")
		}
	case ppSRQ:
		if o.numQP > o.rxDepth {
			return ppMsg(fmt.Sprintf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP.", int32(o.rxDepth), int32(o.numQP)))
		}
		if o.numQP >= ppSRQSlots {
			return fmt.Errorf("num_qp %d must be less than %d", int32(o.numQP), ppSRQSlots-1)
		}
	}
	return nil
}
