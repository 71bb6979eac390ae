//go:build linux

// Command vm runs commands inside throwaway QEMU virtual machines that boot
// Debian's own kernels with soft-RoCE (rdma_rxe), so that rdmago's device
// tests can run on hosts whose kernel has no RDMA support.
//
// Subcommands:
//
//	vm deps                      install the host packages the VMs need
//	vm kernel [--kernel SUITE]   fetch and prepare a Debian kernel, print its version
//	vm run [flags] -- CMD ARGS   boot a VM, run CMD in it, exit with CMD's status
//	vm pair [flags] -- CMD_A ARGS ::: CMD_B ARGS
//	                             boot two VMs on one link, run CMD_A in one and CMD_B in the other
//	vm shell [flags]             boot a VM with an interactive shell on the console
//	vm rdmacore [--release SUITE] [-- CMD ARGS]
//	                             unpack a suite's libibverbs and providers into the cache,
//	                             print the folder or run CMD against them (rdmacore.go)
//
// `vm run` is shaped to be used as `go test -exec "bin/vm run --"`: the guest
// sees the host's root file system read-only (with a throwaway writable overlay),
// runs the command in the host's working directory and passes its output and
// exit status back.
//
// Everything downloaded or built is cached under $RDMAGO_CACHE (default
// <repo root>/.cache); see cache.go.
package main

import (
	"fmt"
	"os"
	"strings"
)

// Exit codes of vm itself. The command's own status is passed through
// unchanged; these mirror coreutils' timeout(1) so scripts can tell them apart.
const (
	exitTimeout = 124 // --timeout expired
	exitVMError = 125 // the VM could not be prepared, booted or set up
)

const usage = `usage: vm <subcommand> [flags]

subcommands:
  deps      install the host packages the VMs need (apt-get, only if missing)
  kernel    resolve, download and prepare a Debian kernel; print its version
  run       boot a VM and run a command in it:  vm run [flags] -- CMD ARGS...
  pair      boot two VMs joined by one Ethernet link, each with rxe0, and run
            a command in each:  vm pair [flags] -- CMD_A ARGS... ::: CMD_B ARGS...
  shell     boot a VM with an interactive shell on the serial console
  rdmacore  unpack a Debian suite's libibverbs and providers into the cache and
            print the folder, or run a command against them:
            vm rdmacore --release trixie|sid [-- CMD ARGS...]
  valkey    build valkey-server with RDMA and valkey's rdma-test from a Debian
            suite's source package into the cache, and print their folder
  icprof    build the QEMU plugin that counts a guest's instructions per
            function (vm run --icount --icprof DIR), or report its
            counts: vm icprof report DIR K
  mark      in a guest run with --icprof: end one count and begin the next

Run "vm <subcommand> -h" for the flags of each.

environment:
  RDMAGO_CACHE            cache folder (default: <repo root>/.cache)
  RDMAGO_VM_KERNEL        default for --kernel (default: bookworm)
  RDMAGO_VM_ACCEL         default for --accel: auto, kvm or tcg (default: auto)
  RDMAGO_VM_CONSOLE=1     copy the guest's serial console to stderr while it runs
  RDMAGO_VM_VERBOSE=1     print boot and run timings
  RDMAGO_VM_DYNDBG        dynamic debug queries for the guest kernel, e.g.
                          "module rdma_rxe +p" (failing device tests print
                          the end of the kernel log)
  RDMAGO_DEBIAN_MIRROR    Debian mirror (default: http://deb.debian.org/debian)
  RDMAGO_DEBIAN_SECURITY  Debian security mirror (default: http://deb.debian.org/debian-security)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	args := os.Args[2:]
	var code int
	switch os.Args[1] {
	case "deps":
		code = cmdDeps(args)
	case "kernel":
		code = cmdKernel(args)
	case "run":
		code = cmdRun(args)
	case "pair":
		code = cmdPair(args)
	case "shell":
		code = cmdShell(args)
	case "rdmacore":
		code = cmdRDMACore(args)
	case "valkey":
		code = cmdValkey(args)
	case "icprof":
		code = cmdIcprof(args)
	case "mark":
		code = cmdMark(args)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "vm: unknown subcommand %q\n\n%s", os.Args[1], usage)
		code = 2
	}
	os.Exit(code)
}

// logf prints one diagnostic line on stderr, prefixed so that it stands out
// in test logs from the command's own output.
func logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "vm: "+strings.TrimRight(msg, "\n"))
}

// envBool reports whether the environment variable is set to a true-ish value.
func envBool(name string) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// envOr returns the variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
