// Package rdmatool is "rdmago rdma", iproute2's rdma tool: RDMA devices,
// their links, the kernel's resource tracking (QPs, CQs, MRs, PDs,
// rdma_cm IDs, contexts), hardware counters and the subsystem's netns
// mode, read and set over RDMA netlink. Its output is the C tool's
// (iproute2 6.1), plain or JSON, so that scripts written for one read the
// other; so are its messages and exit statuses.
package rdmatool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/internal/abi"
)

const (
	netlinkRDMA = 20 // NETLINK_RDMA
	rdmaNLNLDev = abi.RDMA_NL_NLDEV
)

// Commands are the package's commands: "rdma", the C tool's name and
// rdmago's.
func Commands() []*command.Command {
	return []*command.Command{
		{Name: "rdma", Summary: "show and set RDMA devices, links, resources and counters (as iproute2's rdma)", Run: Main},
	}
}

// errFailed is a failure already reported: the command exits 1.
var errFailed = errors.New("rdma: failed")

// rd is one run of the tool: its options, the remaining arguments, the
// devices and the outputs.
type rd struct {
	args    []string
	details int
	json    bool
	pretty  bool
	stdout  *bufio.Writer
	stderr  io.Writer
	p       *printer
	nl      transport
	devs    []devMap
	// dev and port are the device and port a callback runs for.
	dev  devMap
	port uint32
	// filters are the res show filters, by key.
	filters map[string]string
}

// maxPorts bounds the ports of a device the tool walks: a switch has at
// most 255, and a bad count must not make a loop of billions of requests
// (or, at the top of uint32, an endless one).
const maxPorts = 1024

// devMap is what the tool knows of each device from the start.
type devMap struct {
	name     string
	index    uint32
	numPorts uint32
}

const usage = `Usage: rdma [ OPTIONS ] OBJECT { COMMAND | help }
       rdma [ -f[orce] ] -b[atch] filename
where  OBJECT := { dev | link | resource | system | statistic | help }
       OPTIONS := { -V[ersion] | -d[etails] | -j[son] | -p[retty] -r[aw]}
`

// version is the iproute2 release whose output rdmago's matches; -V
// prints it as the C tool does, so that scripts that check it keep working.
const version = "6.1.0"

// Main runs "rdma args..." and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	r := &rd{stdout: bufio.NewWriter(stdout), stderr: stderr}
	defer r.stdout.Flush()
	args, st, done := r.parseOptions(args)
	if done {
		return st
	}
	r.args = args
	r.p = &printer{w: r.stdout, pretty: r.pretty}
	if err := r.init(); err != nil {
		r.errf("%s\n", err)
		return 1
	}
	defer r.nl.Close()
	if err := r.cmd(); err != nil {
		return 1
	}
	return 0
}

// parseOptions is getopt_long(":Vhdrpjfb:") as the C tool calls it:
// options may follow the object and command (GNU getopt permutes), "--"
// ends them, a long option may be abbreviated.
func (r *rd) parseOptions(args []string) (rest []string, status int, done bool) {
	long := []struct {
		name string
		opt  byte
	}{{"version", 'V'}, {"help", 'h'}, {"json", 'j'}, {"pretty", 'p'}, {"details", 'd'}, {"raw", 'r'}, {"force", 'f'}, {"batch", 'b'}}
	var opts []byte
	var batch, batchArg bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name := a[2:]
			if k := strings.IndexByte(name, '='); k >= 0 {
				name = name[:k]
			}
			var match []byte
			for _, l := range long {
				if l.name == name {
					match = []byte{l.opt}
					break
				}
				if strings.HasPrefix(l.name, name) {
					match = append(match, l.opt)
				}
			}
			if len(match) != 1 {
				opts = append(opts, '?')
				continue
			}
			opts = append(opts, match[0])
			if match[0] == 'b' {
				batch = true
				if strings.Contains(a, "=") {
					batchArg = true
				} else if i+1 < len(args) {
					batchArg = true
					i++
				}
			}
		case len(a) > 1 && a[0] == '-':
			for k := 1; k < len(a); k++ {
				c := a[k]
				opts = append(opts, c)
				if c == 'b' {
					batch = true
					if k+1 < len(a) {
						batchArg = true
					} else if i+1 < len(args) {
						batchArg = true
						i++
					}
					break
				}
			}
		default:
			rest = append(rest, a)
		}
	}
	for _, c := range opts {
		switch c {
		case 'V':
			fmt.Fprintf(r.stdout, "rdma utility, iproute2-%s\n", version)
			return nil, 0, true
		case 'h':
			io.WriteString(r.stdout, usage)
			return nil, 0, true
		case 'p':
			r.pretty = true
		case 'd':
			r.details++
		case 'j':
			r.json = true
		case 'r', 'f':
			// -r asks for the driver's raw resource dumps, which rxe does
			// not have; -f only matters in batch mode.
		case 'b':
		default:
			r.stdout.Flush()
			fmt.Fprintf(r.stderr, "Unknown option.\n")
			io.WriteString(r.stdout, usage)
			return nil, 1, true
		}
	}
	if batch && !batchArg {
		fmt.Fprintf(r.stderr, "-b option requires an argument\n")
		return nil, 1, true
	}
	if batch {
		// Batch files are not read by rdmago: said plainly rather than
		// guessed at.
		fmt.Fprintf(r.stderr, "rdmago rdma: -b (batch) is not supported\n")
		return nil, 1, true
	}
	return rest, 0, false
}

// errf writes a message to stderr after what stdout holds so far, as the
// C tool's unbuffered stderr lands after its flushed lines in a terminal.
func (r *rd) errf(format string, a ...any) {
	r.stdout.Flush()
	fmt.Fprintf(r.stderr, format, a...)
}

// outf writes to stdout (the C tool's pr_out).
func (r *rd) outf(format string, a ...any) { fmt.Fprintf(r.stdout, format, a...) }

// init opens RDMA netlink and lists the devices, as the C tool does before
// it reads its command.
func (r *rd) init() error {
	nl, err := dial()
	if err != nil {
		return err
	}
	replies, err := nl.request(abi.RDMA_NLDEV_CMD_GET, netlink.Dump, nil)
	if err != nil {
		nl.Close()
		return fmt.Errorf("error: %s", clib.Strerror(err))
	}
	r.nl = nl
	for _, b := range replies {
		a, err := decode(b)
		if err != nil {
			nl.Close()
			return err
		}
		if !a.has(abi.RDMA_NLDEV_ATTR_DEV_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) || !a.has(abi.RDMA_NLDEV_ATTR_PORT_INDEX) {
			continue
		}
		r.devs = append(r.devs, devMap{
			name:     a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME),
			index:    uint32(a.uint(abi.RDMA_NLDEV_ATTR_DEV_INDEX)),
			numPorts: min(uint32(a.uint(abi.RDMA_NLDEV_ATTR_PORT_INDEX)), maxPorts),
		})
	}
	return nil
}

// The argument cursor.
func (r *rd) noArg() bool  { return len(r.args) == 0 }
func (r *rd) argv() string { return r.args[0] }
func (r *rd) argInc()      { r.args = r.args[1:] }
func (r *rd) argMatch(p string) bool {
	// matches(): the argument is a prefix of the name.
	return len(r.args) > 0 && strings.HasPrefix(p, r.args[0])
}

// sub is one entry of a command table; name "" is the variant without an
// argument.
type sub struct {
	name string
	fn   func() error
}

// exec is rd_exec_cmd: the first entry runs without an argument, the
// others for an argument that is a prefix of their name; anything else is
// reported on stdout and is not a failure, as in the C tool.
func (r *rd) exec(cmds []sub, what string) error {
	if r.noArg() {
		return cmds[0].fn()
	}
	for _, c := range cmds[1:] {
		if r.argMatch(c.name) {
			r.argInc()
			return c.fn()
		}
	}
	r.errf("Unknown %s '%s'.\n", what, r.argv())
	return nil
}

func (r *rd) help() error { io.WriteString(r.stdout, usage); return nil }

func (r *rd) cmd() error {
	return r.exec([]sub{
		{"", r.help}, {"help", r.help}, {"dev", r.cmdDev}, {"link", r.cmdLink},
		{"resource", r.cmdRes}, {"system", r.cmdSys}, {"statistic", r.cmdStat},
	}, "object")
}

// unsupported is a command of the C tool that rdmago does not have.
func (r *rd) unsupported(what string) func() error {
	return func() error {
		r.errf("rdmago rdma: %s is not supported\n", what)
		return errFailed
	}
}

// lookup finds a device by name; with allowPort, a "/PORT" suffix is
// ignored.
func (r *rd) lookup(arg string, allowPort bool) (devMap, bool) {
	name := arg
	if allowPort {
		if k := strings.IndexByte(name, '/'); k >= 0 {
			name = name[:k]
		}
	}
	for _, d := range r.devs {
		if d.name == name {
			return d, true
		}
	}
	return devMap{}, false
}

// openJSON and closeJSON are new_json_obj and delete_json_obj: the array
// that holds a command's objects, with the line that ends it.
func (r *rd) openJSON() {
	if r.json {
		r.p.json = true
		r.p.startArray()
	}
}

func (r *rd) closeJSON() {
	if r.json {
		r.p.endArray()
		r.p.w.WriteByte('\n')
		r.p.json = false
		r.p.depth, r.p.sep = 0, 0
	}
}

// execDev is rd_exec_dev: cb for every device, or for the device the
// argument names.
func (r *rd) execDev(cb func() error) error {
	r.openJSON()
	defer r.closeJSON()
	if r.noArg() {
		for _, d := range r.devs {
			r.dev = d
			if err := cb(); err != nil {
				return err
			}
		}
		return nil
	}
	d, ok := r.lookup(r.argv(), false)
	if !ok {
		r.errf("Wrong device name - %s\n", r.argv())
		return errFailed
	}
	r.dev = d
	r.argInc()
	return cb()
}

// execLink is rd_exec_link: cb for every port of every device (from port 0
// unless strict), or for the DEV[/PORT] the argument names.
func (r *rd) execLink(cb func() error, strict bool) error {
	r.openJSON()
	defer r.closeJSON()
	if r.noArg() {
		for _, d := range r.devs {
			r.dev = d
			first := uint32(0)
			if strict {
				first = 1
			}
			for r.port = first; r.port <= d.numPorts; r.port++ {
				if err := cb(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	d, ok := r.lookup(r.argv(), true)
	port, all, perr := portOf(r.argv(), strict)
	if !ok || port > d.numPorts || perr {
		r.errf("Wrong device name\n")
		return errFailed
	}
	r.argInc()
	r.dev = d
	for r.port = port; r.port <= d.numPorts; r.port++ {
		if err := cb(); err != nil {
			return err
		}
		if !all {
			break
		}
	}
	return nil
}

// portOf reads the port of "DEV/PORT": a number, "-" for port 0 (objects
// on no port) where the port is optional, or nothing (every port, where
// it is optional).
func portOf(arg string, strict bool) (port uint32, all, bad bool) {
	k := strings.IndexByte(arg, '/')
	if k < 0 {
		return 0, !strict, strict
	}
	s := arg[k+1:]
	if s == "-" && !strict {
		// DEV/-: the objects of no port.
		return 0, false, false
	}
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false, true
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false, true
	}
	return uint32(n), false, false
}

// request sends an nldev command; a failure is reported as the C tool
// reports it.
func (r *rd) request(cmd uint16, flags netlink.HeaderFlags, e encoder) ([]attrs, error) {
	var b []byte
	if e.ae != nil {
		var err error
		if b, err = e.bytes(); err != nil {
			r.errf("%v\n", err)
			return nil, errFailed
		}
	}
	replies, err := r.nl.request(cmd, flags, b)
	if err != nil {
		r.errf("error: %s\n", clib.Strerror(err))
		return nil, errFailed
	}
	out := make([]attrs, 0, len(replies))
	for _, m := range replies {
		a, err := decode(m)
		if err != nil {
			r.errf("error: %v\n", err)
			return nil, errFailed
		}
		out = append(out, a)
	}
	return out, nil
}

// devEncoder is a request naming the current device (and port, if not 0).
func (r *rd) devEncoder(withPort bool) encoder {
	e := newEncoder()
	e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, r.dev.index)
	if withPort && r.port != 0 {
		e.u32(abi.RDMA_NLDEV_ATTR_PORT_INDEX, r.port)
	}
	return e
}

// name of an index into a table, with the C tool's fallback.
func tableName(t []string, i uint64, unknown string) string {
	if i < uint64(len(t)) && t[i] != "" {
		return t[i]
	}
	return unknown
}
