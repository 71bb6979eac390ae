//go:build linux

package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// hostPackages are the Debian packages the VM runner and the interop tests
// need on the host. The guest sees the host's root file system, so the RDMA
// user-space tools installed here are also the ones the guest runs.
var hostPackages = []string{
	"qemu-system-x86",  // the VM
	"qemu-user-static", // the arm64 unit tests (qemu-aarch64-static)
	"qemu-system-arm",  // the arm64 VM (qemu-system-aarch64)
	"busybox-static",   // the guest's /init shell and tools
	"kmod",             // depmod and modprobe --show-depends on unpacked kernels
	"cpio",
	"xz-utils", // decompress .ko.xz modules and xz-compressed kernels
	"zstd",     // the same for zstd
	"iproute2", // rdma link add, run inside the guest
	"rdma-core",
	"ibverbs-utils",
	"ibverbs-providers",
	"rdmacm-utils",
	"perftest",
	"libibverbs-dev",
	"librdmacm-dev",
	"curl", // a socket program run under librspreload against rsocket
}

func cmdDeps(args []string) int {
	fs := flag.NewFlagSet("vm deps", flag.ExitOnError)
	check := fs.Bool("check", false, "only report missing packages; exit 1 if any")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: vm deps [--check]\n\nInstalls, if missing: %s\n", strings.Join(hostPackages, " "))
		fs.PrintDefaults()
	}
	fs.Parse(args)

	missing, err := missingPackages(hostPackages)
	if err != nil {
		logf("deps: %v", err)
		return 1
	}
	if len(missing) == 0 {
		return 0
	}
	if *check {
		logf("deps: missing packages: %s", strings.Join(missing, " "))
		return 1
	}
	logf("deps: installing %s", strings.Join(missing, " "))
	// Update the index only now: on a machine that has everything this
	// command must cost nothing, not a network round trip.
	if err := runApt("update"); err != nil {
		logf("deps: apt-get update: %v", err)
		return 1
	}
	if err := runApt(append([]string{"install", "-y", "--no-install-recommends"}, missing...)...); err != nil {
		logf("deps: apt-get install: %v", err)
		return 1
	}
	return 0
}

// missingPackages asks dpkg which of pkgs are not fully installed. dpkg-query
// exits non-zero when it knows nothing of a package, so its status is not an
// error here: what it printed is what counts.
func missingPackages(pkgs []string) ([]string, error) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return nil, fmt.Errorf("dpkg-query not found: vm deps needs a Debian-based host")
	}
	cmd := exec.Command("dpkg-query", append([]string{"-W", "-f=${Package} ${Status}\n"}, pkgs...)...)
	out, _ := cmd.Output()
	installed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, status, ok := strings.Cut(sc.Text(), " ")
		if ok && status == "install ok installed" {
			installed[strings.SplitN(name, ":", 2)[0]] = true // strip :arch
		}
	}
	var missing []string
	for _, p := range pkgs {
		if !installed[p] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// runApt runs apt-get with the host's configuration, through sudo when we
// are not root (CI runners usually are not).
func runApt(args ...string) error {
	argv := append([]string{"apt-get"}, args...)
	if os.Geteuid() != 0 {
		argv = append([]string{"sudo", "-E"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout = os.Stderr // keep our stdout clean for scripts
	cmd.Stderr = os.Stderr
	return cmd.Run()
}
