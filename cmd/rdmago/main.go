package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdmago/rdma/cmd/rdmago/internal/cmtime"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/devices"
	"github.com/rdmago/rdma/cmd/rdmago/internal/devinfo"
	"github.com/rdmago/rdma/cmd/rdmago/internal/doctor"
	"github.com/rdmago/rdma/cmd/rdmago/internal/mckey"
	"github.com/rdmago/rdma/cmd/rdmago/internal/perf"
	"github.com/rdmago/rdma/cmd/rdmago/internal/pingpong"
	"github.com/rdmago/rdma/cmd/rdmago/internal/rdmaserver"
	"github.com/rdmago/rdma/cmd/rdmago/internal/rdmatool"
	"github.com/rdmago/rdma/cmd/rdmago/internal/rping"
	"github.com/rdmago/rdma/cmd/rdmago/internal/rstream"
	"github.com/rdmago/rdma/cmd/rdmago/internal/ucmatose"
	"github.com/rdmago/rdma/cmd/rdmago/internal/udaddy"
	"github.com/rdmago/rdma/cmd/rdmago/internal/valkeybench"
	"github.com/rdmago/rdma/uverbs"
)

// commands are rdmago's subcommands: each tool's, with help and version.
var commands = command.NewSet(
	[]*command.Command{{Name: "version", Summary: "print the version of rdmago", Run: runVersion}},
	cmtime.Commands(), devices.Commands(), devinfo.Commands(), doctor.Commands(), mckey.Commands(), perf.Commands(), pingpong.Commands(), rdmaserver.Commands(), rdmatool.Commands(), rping.Commands(), rstream.Commands(), ucmatose.Commands(), udaddy.Commands(), valkeybench.Commands(),
)

// version is set at link time with -ldflags "-X main.version=v1.2.3"; when
// empty, the module version recorded in the binary is used.
var version string

func main() {
	stop := startProfile(os.Getenv(cpuProfileEnv), os.Stderr)
	status := rdmago(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}

// cpuProfileEnv names a file for a CPU profile of the whole run, "%p" in
// it replaced by the process ID: how make pgo collects cmd/rdmago's
// default.pgo from the benchmarks' processes, servers and clients alike
// (docs/performance.md, "Profile-guided optimisation").
const cpuProfileEnv = "RDMAGO_CPUPROFILE"

// startProfile starts a CPU profile into the file path names, when it
// names one, and returns what stops it.
func startProfile(path string, stderr io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "rdmago: %s: %v\n", cpuProfileEnv, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "rdmago: %s: %v\n", cpuProfileEnv, err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "rdmago: %s: %v\n", cpuProfileEnv, err)
		}
	}
}

// rdmago runs the command line (without the program name) and returns the
// exit status.
func rdmago(args []string, stdout, stderr io.Writer) int {
	status := commands.Run(args, stdout, stderr)
	if status != 0 && status != 2 && needsRDMA(args) {
		// The ports print what rdma-core's tools print ("Failed to get
		// IB devices list: Function not implemented"); a user on a host
		// without RDMA also gets what is missing, and where to look.
		if hint := noRDMAHint(); hint != "" {
			fmt.Fprintf(stderr, "rdmago: %s; 'rdmago doctor' says what to fix\n", hint)
		}
	}
	return status
}

// needsRDMA reports whether args run a command that uses RDMA (not help,
// version or doctor, and not a request for a command's usage).
func needsRDMA(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "help", "version", "doctor", "-h", "-help", "--help", "--version":
		return false
	}
	for _, a := range args[1:] {
		if a == "-h" || a == "-help" || a == "--help" {
			return false
		}
	}
	return true
}

// noRDMAHint names what this host lacks for RDMA, or "" when it has an RDMA
// device and the connection manager.
func noRDMAHint() string {
	devs, err := uverbs.Devices()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		return "this host has no RDMA (no RDMA kernel modules are loaded)"
	case err == nil && len(devs) == 0:
		return "this host has no RDMA device (no driver such as rdma_rxe or mlx5_ib is loaded)"
	}
	if _, err := os.Stat("/dev/infiniband/rdma_cm"); errors.Is(err, fs.ErrNotExist) {
		return "this host has no RDMA connection manager (is the rdma_ucm module loaded?)"
	}
	return ""
}

// runVersion is "rdmago version".
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintf(stdout, "usage: rdmago version\n\nPrint the version of rdmago and of the Go toolchain that built it.\n")
			return 0
		}
		fmt.Fprintf(stderr, "usage: rdmago version\n")
		return 2
	}
	fmt.Fprintf(stdout, "rdmago %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// buildVersion is the version to report: the link-time one, else the main
// module's version ("(devel)" for a build from a work tree).
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
