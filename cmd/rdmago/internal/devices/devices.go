// Package devices is "rdmago devices" and "rdmago asyncwatch", as
// rdma-core's ibv_devices and ibv_asyncwatch: the list of RDMA devices with
// their node GUIDs, and a device's asynchronous events as they come.
package devices

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/uverbs"
)

// Commands are the package's commands, each under rdmago's name and the C
// tool's.
func Commands() []*command.Command {
	devices := func(args []string, stdout, stderr io.Writer) int { return devicesMain(args, stdout, stderr) }
	watch := func(name string) func(args []string, stdout, stderr io.Writer) int {
		return func(args []string, stdout, stderr io.Writer) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return asyncwatchMain(ctx, name, args, stdout, stderr)
		}
	}
	return []*command.Command{
		{Name: "devices", Summary: "list RDMA devices and their node GUIDs (as ibv_devices)", Run: devices},
		{Name: "ibv_devices", Summary: "as devices", Run: devices},
		{Name: "asyncwatch", Summary: "print a device's asynchronous events (as ibv_asyncwatch)", Run: watch("asyncwatch")},
		{Name: "ibv_asyncwatch", Summary: "as asyncwatch", Run: watch("ibv_asyncwatch")},
	}
}

// devicesMain is ibv_devices, which takes no options and ignores its
// arguments; rdmago answers -h with a usage, as every rdmago command does.
func devicesMain(args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "--help" {
			fmt.Fprintf(stdout, "Usage: ibv_devices\n\nList RDMA devices available for use from userspace, with their node GUIDs.\n")
			return 0
		}
	}
	devs, ok := deviceList(stderr)
	if !ok {
		return 1
	}
	fmt.Fprintf(stdout, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(stdout, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(stdout, "    %-16s\t%016x\n", d.Name, binary.BigEndian.Uint64(d.NodeGUID[:]))
	}
	return 0
}

// deviceList is ibv_get_device_list as the C tools see it: a kernel without
// the RDMA subsystem fails it (libibverbs cannot start: ENOSYS, which
// they report with perror), a kernel without devices gives an empty list.
func deviceList(stderr io.Writer) ([]uverbs.Device, bool) {
	devs, err := uverbs.Devices()
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOSYS) || !errors.Is(err, uverbs.ErrNoDevice):
		io.WriteString(stderr, clib.Perror("Failed to get IB devices list", err))
		return nil, false
	default:
		devs = nil
	}
	return devs, true
}

// eventName is asyncwatch's event_name_str: the port and device events by
// name, anything else "unexpected" (a context without QPs, CQs or SRQs
// gets no other).
func eventName(t uverbs.EventType) string {
	switch t {
	case uverbs.EventDeviceFatal:
		return "IBV_EVENT_DEVICE_FATAL"
	case uverbs.EventPortActive:
		return "IBV_EVENT_PORT_ACTIVE"
	case uverbs.EventPortErr:
		return "IBV_EVENT_PORT_ERR"
	case uverbs.EventLIDChange:
		return "IBV_EVENT_LID_CHANGE"
	case uverbs.EventPKeyChange:
		return "IBV_EVENT_PKEY_CHANGE"
	case uverbs.EventSMChange:
		return "IBV_EVENT_SM_CHANGE"
	case uverbs.EventClientReregister:
		return "IBV_EVENT_CLIENT_REREGISTER"
	case uverbs.EventGIDChange:
		return "IBV_EVENT_GID_CHANGE"
	case uverbs.EventDeviceSpeedChange:
		return "IBV_EVENT_DEVICE_SPEED_CHANGE"
	}
	return "unexpected"
}

func asyncwatchUsage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "Usage:\n")
	fmt.Fprintf(w, "  %s            start an asyncwatch process\n", argv0)
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "Options:\n")
	fmt.Fprintf(w, "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n")
	fmt.Fprintf(w, "  -h, --help             print a help text and exit\n")
}

// asyncwatchMain is ibv_asyncwatch: it opens a device and prints each
// asynchronous event, until it is interrupted (ctx) or the events end.
func asyncwatchMain(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	var devName string
	var help bool
	var optErr string
	fs := getopt.NewFlagSet(argv0)
	fail := func(msg string) error { optErr = msg; return errors.New(msg) }
	for _, o := range []struct {
		short, long string
		hasArg      bool
		set         func(string) error
	}{
		{"d", "ib-dev", true, func(s string) error { devName = s; return nil }},
		{"h", "help", false, func(string) error { help = true; return nil }},
	} {
		v := getopt.Option(argv0, o.long, o.hasArg, o.set, fail)
		fs.Var(v, o.short, "")
		fs.Var(v, o.long, "")
	}
	if _, err := getopt.Parse(fs, args); err != nil {
		// getopt prints its complaint; the C program then prints its
		// usage to stdout and exits 1.
		if optErr == "" {
			optErr = getopt.Message(argv0, args, err)
		}
		io.WriteString(stderr, optErr)
		asyncwatchUsage(stdout, argv0)
		return 1
	}
	if help {
		asyncwatchUsage(stdout, argv0)
		return 0
	}
	devs, ok := deviceList(stderr)
	if !ok {
		return 1
	}
	i := 0
	if devName != "" {
		for ; i < len(devs) && devs[i].Name != devName; i++ {
		}
	}
	if i >= len(devs) {
		fmt.Fprintf(stderr, "IB device %s not found\n", devName)
		return 1
	}
	dev := devs[i]
	c, err := dev.Open()
	if err != nil {
		fmt.Fprintf(stderr, "Couldn't get context for %s\n", dev.Name)
		return 1
	}
	defer c.Close()
	fd := -1
	if conn, err := c.AsyncEventConn(); err == nil {
		conn.Control(func(f uintptr) { fd = int(f) })
	}
	fmt.Fprintf(stdout, "%s: async event FD %d\n", dev.Name, fd)
	for {
		ev, err := c.GetAsyncEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			return 1
		}
		// libibverbs puts the kernel's element, for every event that is
		// not about a CQ, QP, SRQ or WQ, in the int port_num.
		fmt.Fprintf(stdout, "  event_type %s (%d), port %d\n", eventName(ev.Type), ev.Type, int32(uint32(ev.Element)))
	}
}
