// Package doctor is "rdmago doctor": why RDMA does or does not work here.
package doctor

// "rdmago doctor": tells a user, typically in a container, why RDMA does not
// work and what to do about it. Every check reads what an unprivileged
// process may read (sysfs, procfs, /sys/kernel/btf, RDMA netlink) and opens
// the device nodes it checks; none needs root. A check that cannot run says
// so and why, instead of passing or failing silently.

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/uverbs"
)

// Commands are "rdmago doctor".
func Commands() []*command.Command {
	return []*command.Command{
		{Name: "doctor", Summary: "check why RDMA does or does not work here, and say what to fix", Run: runDoctor},
	}
}

// status is the outcome of one finding.
type status int

const (
	statusOK         status = iota
	statusProblem           // something is wrong; Fix says what to do
	statusNotChecked        // the check could not run; Text says why
	statusInfo              // a fact worth knowing, neither good nor bad
)

func (s status) String() string {
	switch s {
	case statusOK:
		return "ok"
	case statusProblem:
		return "problem"
	case statusNotChecked:
		return "not checked"
	}
	return "info"
}

// finding is one line of the report.
type finding struct {
	Check  string // which check: "device nodes", "memlock", ...
	Status status
	Text   string // what was found, or why it could not be checked
	Fix    string // what to do; only for problems
}

// doctorEnv is where the checks look. Tests point the roots at temporary
// directories and replace the functions with fakes.
type doctorEnv struct {
	sysRoot  string // "/sys"
	devRoot  string // "/dev/infiniband"
	procRoot string // "/proc"

	memBytes uint64 // how much the user means to register
	verbose  bool   // list every ABI type and how it compared

	// openRW opens a device node read-write and closes it again.
	openRW func(path string) error
	// memlock returns RLIMIT_MEMLOCK (cur, max); unlimitedRlimit for no limit.
	memlock func() (cur, max uint64, err error)
	// devices lists the RDMA devices (uverbs.Devices).
	devices func() ([]uverbs.Device, error)
	// netnsMode asks RDMA netlink for the subsystem's netns mode: true
	// for shared, false for exclusive.
	netnsMode func() (shared bool, err error)
	// gidTable opens a device and returns its GID table and, per port,
	// its link layer.
	gidTable func(dev uverbs.Device) ([]uverbs.GIDEntry, map[uint32]uverbs.LinkLayer, error)
	// ifaceAddrs returns the addresses of the interface with the given
	// index, or errNoIface when this netns has no such interface.
	ifaceAddrs func(index int) (name string, addrs []string, err error)
}

const unlimitedRlimit = ^uint64(0)

func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "list every generated ABI type and whether the kernel's BTF has it")
	mem := fs.String("mem", "64MiB", "the `size` of memory the application registers, for the memlock check (e.g. 4096, 512KiB, 1GiB)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rdmago doctor [-v] [-mem size]\n\n"+
			"Checks the device nodes, the memlock limit, the kernel modules, the\n"+
			"network namespace, the GID tables and the kernel's ABI against the\n"+
			"one rdmago was built for. Each check prints ok, or the problem and\n"+
			"its fix, or why it could not run. Exit status 1 when a problem was found.\n\n")
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
			fs.Usage()
			fs.SetOutput(stderr)
			return 0
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	n, err := parseSize(*mem)
	if err != nil {
		fmt.Fprintf(stderr, "rdmago doctor: -mem: %v\n", err)
		return 2
	}
	env := hostDoctorEnv()
	env.memBytes = n
	env.verbose = *verbose
	fs2 := runChecks(env)
	writeFindings(stdout, fs2)
	for _, f := range fs2 {
		if f.Status == statusProblem {
			return 1
		}
	}
	return 0
}

// runChecks runs every check in the order the report shows them: the
// device nodes first, since nothing works without them.
func runChecks(env *doctorEnv) []finding {
	var out []finding
	out = append(out, checkDeviceNodes(env)...)
	out = append(out, checkMemlock(env)...)
	out = append(out, checkModules(env)...)
	out = append(out, checkNetns(env)...)
	out = append(out, checkGIDs(env)...)
	out = append(out, checkABI(env)...)
	return out
}

// writeFindings prints the report: one line per finding, its fix indented
// under it, and a summary.
func writeFindings(w io.Writer, fs []finding) {
	var b strings.Builder
	var problems, notChecked int
	for _, f := range fs {
		fmt.Fprintf(&b, "%-13s %s: %s\n", "["+f.Status.String()+"]", f.Check, f.Text)
		if f.Fix != "" {
			for i, l := range strings.Split(f.Fix, "\n") {
				lead := "fix:"
				if i > 0 {
					lead = ""
				}
				fmt.Fprintf(&b, "%-13s %-4s %s\n", "", lead, l)
			}
		}
		switch f.Status {
		case statusProblem:
			problems++
		case statusNotChecked:
			notChecked++
		}
	}
	fmt.Fprintf(&b, "\n%d checks: %d problems, %d not checked\n", len(fs), problems, notChecked)
	io.WriteString(w, b.String())
}

// parseSize reads 4096, 64KiB, 1MiB, 2GiB (also K, M, G, KB, MB, GB as
// powers of two, which is what memory is counted in).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 64KiB, 1GiB)", s)
	}
	if v > ^uint64(0)/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return v * mult, nil
}

// formatBytes prints a byte count in the largest binary unit that divides
// it, or with one decimal.
func formatBytes(n uint64) string {
	if n == unlimitedRlimit {
		return "unlimited"
	}
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	v := float64(n)
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
