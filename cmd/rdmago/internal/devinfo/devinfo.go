// Package devinfo is "rdmago devinfo", as rdma-core's ibv_devinfo.
package devinfo

// "rdmago devinfo": rdma-core's ibv_devinfo (v44.0) in Go. The output, the
// messages on stderr and the exit status are ibv_devinfo's; the formatting
// is in format.go, this file gathers the data.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/uverbs"
)

// Commands are "rdmago devinfo".
func Commands() []*command.Command {
	return []*command.Command{
		{Name: "devinfo", Summary: "print the attributes of RDMA devices (as ibv_devinfo)", Run: runDevinfo, Usage: devinfoUsage},
	}
}

// Exit statuses of ibv_devinfo. Its main returns -1 for most failures,
// which the shell sees as 255; per-device failures are or-ed together.
const (
	devinfoExitFail      = 255 // no device list, device not found, bad option
	devinfoExitUsage     = 1   // a bad -i value
	devinfoExitOpen      = 1   // the device could not be opened
	devinfoExitQuery     = 2   // its attributes could not be read
	devinfoExitClose     = 3   // it could not be closed
	devinfoExitBadPort   = 4   // -i names a port the device does not have
	devinfoExitGIDFailed = 255 // a GID table could not be read (C's -1)
)

// devinfoBackend is what devinfo needs of the verbs library; tests replace it.
type devinfoBackend interface {
	Devices() ([]uverbs.Device, error)
	Open(dev uverbs.Device) (devinfoContext, error)
	// BoardID returns the device's sysfs board_id as ibv_devinfo prints
	// it, or "" where there is none.
	BoardID(dev uverbs.Device) string
}

// devinfoContext is an open device; *uverbs.Context implements it.
type devinfoContext interface {
	QueryDevice() (uverbs.DeviceAttr, error)
	QueryPort(port uint8) (uverbs.PortAttr, error)
	QueryGIDTable() ([]uverbs.GIDEntry, error)
	NumCompVectors() int
	Close() error
}

// uverbsBackend is the real one.
type uverbsBackend struct{}

func (uverbsBackend) Devices() ([]uverbs.Device, error) { return uverbs.Devices() }

func (uverbsBackend) Open(dev uverbs.Device) (devinfoContext, error) {
	c, err := dev.Open()
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (uverbsBackend) BoardID(dev uverbs.Device) string {
	if dev.SysfsPath == "" {
		return ""
	}
	b, err := readAtMost(filepath.Join(dev.SysfsPath, "board_id"), 256)
	if err != nil {
		return ""
	}
	return sysfsValue(b, 256)
}

// readAtMost reads up to n bytes of a file with one read, as
// ibv_read_sysfs_file does.
func readAtMost(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := f.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:k], nil
}

// sysfsValue turns what ibv_read_sysfs_file read into a buffer of size
// bytes into the string printf("%s") then shows: one trailing newline
// removed, cut at the first NUL; "" where the C function fails (a full
// buffer with no newline to make room for the terminator).
func sysfsValue(b []byte, size int) string {
	switch {
	case len(b) > 0 && b[len(b)-1] == '\n':
		b = b[:len(b)-1]
	case len(b) >= size:
		return ""
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// devinfoUsage writes ibv_devinfo's usage text.
func devinfoUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s             print the ca attributes\n", "rdmago devinfo")
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "Options:\n")
	fmt.Fprintf(w, "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n")
	fmt.Fprintf(w, "  -i, --ib-port=<port>   use port <port> of IB device (default all ports)\n")
	fmt.Fprintf(w, "  -l, --list             print only the IB devices names\n")
	fmt.Fprintf(w, "  -v, --verbose          print all the attributes of the IB device(s)\n")
}

// runDevinfo is the devinfo command: args are its arguments (without the
// command name); it returns the exit status.
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	return devinfoMain(uverbsBackend{}, args, stdout, stderr)
}

// devinfoOpts are devinfo's parsed options.
type devinfoOpts struct {
	devName    string
	devNameSet bool
	port       uint8 // 0: all ports
	verbose    bool
}

// devinfoMain is runDevinfo over a given backend.
func devinfoMain(b devinfoBackend, args []string, stdout, stderr io.Writer) int {
	// ibv_devinfo handles its options one by one, in order, and the first
	// of these ends it: -l (the list is printed at once, later options are
	// never looked at), a -i value that is not a positive number (usage,
	// status 1), an unknown option or a missing value (usage, status 255).
	const (
		endNone = iota
		endList
		endBadPort
		endBadOption
	)
	end := endNone
	var o devinfoOpts

	// getopt's flag set prints nothing: the usage is printed below, once
	// we know which case this is.
	fs := getopt.NewFlagSet("rdmago devinfo")
	dev := getopt.FuncValue{SetFunc: func(s string) error {
		o.devName, o.devNameSet = s, true
		return nil
	}}
	port := getopt.FuncValue{SetFunc: func(s string) error {
		// strtol into an int, then passed on as a uint8: "-i 257" is port 1.
		v := int32(clib.Strtol(s))
		if v <= 0 && end == endNone {
			end = endBadPort
		}
		o.port = uint8(v)
		return nil
	}}
	list := getopt.FuncValue{IsBool: true, SetFunc: func(s string) error {
		v, err := strconv.ParseBool(s)
		if v && end == endNone {
			end = endList
		}
		return err
	}}
	verbose := getopt.FuncValue{IsBool: true, SetFunc: func(s string) error {
		v, err := strconv.ParseBool(s)
		o.verbose = o.verbose || v
		return err
	}}
	for _, n := range []string{"d", "ib-dev"} {
		fs.Var(dev, n, "use IB device `dev` (default first device found)")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.Var(port, n, "use `port` of IB device (default all ports)")
	}
	for _, n := range []string{"l", "list"} {
		fs.Var(list, n, "print only the IB devices names")
	}
	for _, n := range []string{"v", "verbose"} {
		fs.Var(verbose, n, "print all the attributes of the IB device(s)")
	}

	_, err := getopt.Parse(fs, args)
	if err != nil && end == endNone {
		// -h among them: ibv_devinfo has none.
		end = endBadOption
	}
	switch end {
	case endBadOption:
		io.WriteString(stderr, getopt.Message("rdmago devinfo", args, err))
		devinfoUsage(stdout)
		return devinfoExitFail
	case endBadPort:
		devinfoUsage(stdout)
		return devinfoExitUsage
	}

	devs, err := b.Devices()
	if err != nil {
		fmt.Fprintf(stderr, "Failed to get IB devices list: %s\n", clib.Strerror(err))
		return devinfoExitFail
	}
	// libibverbs lists devices in the order RDMA netlink reports them, by
	// kernel index; uverbs.Devices sorts them by name.
	devs = slices.Clone(devs)
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })

	if end == endList {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		writeDevList(stdout, names)
		return 0
	}

	if o.devNameSet {
		for _, d := range devs {
			if d.Name == o.devName {
				return devinfoDevice(b, d, o, stdout, stderr)
			}
		}
		fmt.Fprintf(stderr, "IB device '%s' wasn't found\n", o.devName)
		return devinfoExitFail
	}
	if len(devs) == 0 {
		fmt.Fprintf(stderr, "No IB devices found\n")
		return devinfoExitFail
	}
	status := 0
	for _, d := range devs {
		status |= devinfoDevice(b, d, o, stdout, stderr)
	}
	return status & 0xff
}

// devinfoDevice prints one device, as ibv_devinfo's print_hca_cap does, and
// returns its status.
func devinfoDevice(b devinfoBackend, dev uverbs.Device, o devinfoOpts, stdout, stderr io.Writer) int {
	ctx, err := b.Open(dev)
	if err != nil {
		fmt.Fprintf(stderr, "Failed to open device\n")
		return devinfoExitOpen
	}
	status := 0
	var failure string // what to tell stderr after the output
	func() {
		attr, err := ctx.QueryDevice()
		if err != nil {
			fmt.Fprintf(stderr, "Failed to query device props\n")
			status = devinfoExitQuery
			return
		}
		if o.port != 0 && o.port > attr.PhysPortCnt {
			fmt.Fprintf(stderr, "Invalid port requested for device\n")
			status = devinfoExitBadPort
			return
		}
		info := &devInfo{
			Dev:            dev,
			Attr:           attr,
			NumCompVectors: ctx.NumCompVectors(),
			BoardID:        b.BoardID(dev),
		}
		var gids []uverbs.GIDEntry
		var gidErr error
		gidsRead := false
		for p := uint32(1); p <= uint32(attr.PhysPortCnt); p++ {
			if o.port != 0 && p != uint32(o.port) {
				continue
			}
			pa, err := ctx.QueryPort(uint8(p))
			if err != nil {
				failure = fmt.Sprintf("Failed to query port %d props\n", p)
				status = errnoStatus(err)
				break
			}
			pi := portInfo{Num: p, Attr: pa}
			// The GID table is read only for -v, and only once a port
			// has entries to show: ibv_devinfo's loop over the table never
			// reads a GID of a port whose gid_tbl_len is 0.
			if o.verbose && pa.GIDTblLen > 0 {
				if !gidsRead {
					gids, gidErr = ctx.QueryGIDTable()
					gidsRead = true
				}
				if gidErr != nil {
					pi.GIDsFailed = true
					failure = fmt.Sprintf("Failed to query gid to port %d, index %d\n", p, 0)
					status = devinfoExitGIDFailed
				}
				pi.GIDs = gids
			}
			info.Ports = append(info.Ports, pi)
			if pi.GIDsFailed {
				break
			}
		}
		writeDevInfo(stdout, info, o.verbose)
		fmt.Fprint(stderr, failure)
	}()
	if err := ctx.Close(); err != nil {
		fmt.Fprintf(stderr, "Failed to close device")
		status = devinfoExitClose
	}
	return status
}

// errnoStatus is the status ibv_devinfo returns when ibv_query_port fails:
// the errno the provider returned, or 1 where there is none.
func errnoStatus(err error) int {
	if e := clib.Errno(err); e > 0 {
		return e & 0xff
	}
	return 1
}
