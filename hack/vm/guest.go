//go:build linux

package main

// The host side of the protocol with the guest's /init (see init.sh for the
// file list). All of it goes through a per-run temporary folder that QEMU
// exports as the writable 9p share "rdmagoio". Files rather than the serial
// console carry the command's output: the emulated UART manages ~165 KB/s,
// a 9p file write is as fast as the guest can issue it.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

const ioDirPattern = "rdmago-vm-*"

// newIODir makes the run's I/O folder and records our pid in it, so that a
// later run can tell the folder of a vm that was killed (SIGKILL leaves no
// chance to clean up) from one in use.
func newIODir() (string, error) {
	dir, err := os.MkdirTemp("", ioDirPattern)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// removeStaleIODirs removes the I/O folders of vm processes that are gone.
func removeStaleIODirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), ioDirPattern))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue // not ours, or being created right now
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// guestRequest is what one run asks of the guest.
type guestRequest struct {
	argv  []string
	dir   string   // working directory, a host path (the guest sees the host's tree)
	env   []string // the command's whole environment, K=V
	rdma  bool     // create rxe0 and wait for its GID
	shell bool     // run on the serial console instead of the output files
	rw    []share  // extra writable shares
	net   guestNet // the interface that carries the address and rxe0
	// waitGo holds the command until the host writes "go" (vm pair: the
	// two commands start together).
	waitGo bool
	// listenWatch has /init report the first listener, rdma_cm or TCP (vm pair
	// --b-after-listen, in a).
	listenWatch bool
	// A foreign guest (vm run --arch): its root layer is shared as
	// archroot, rdmago is its rdma tool, tty its console.
	archRoot bool
	rdmago   string
	tty      string
}

// guestNet is where the guest puts its address and rxe0: dummy0 for vm run,
// the virtio-net NIC with the given MAC for each VM of vm pair.
type guestNet struct {
	mac  string       // "" for dummy0
	addr netip.Prefix // the interface's address, e.g. 10.0.2.15/24
}

// soloNet is vm run's network: dummy0 alone, 10.0.2.15/24.
var soloNet = guestNet{addr: netip.MustParsePrefix("10.0.2.15/24")}

// roceGID is the RoCE v2 GID of an IPv4 address (its IPv4-mapped IPv6
// address) as the kernel prints it in sysfs: 0000:...:ffff:0a00:020f.
func roceGID(a netip.Addr) string {
	b := a.As16() // IPv4 comes back IPv4-mapped
	var g []string
	for i := 0; i < 16; i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(g, ":")
}

// share is an extra writable 9p export, mounted at the same path in the guest.
type share struct {
	tag, path string
}

// passedEnv reports whether a host variable is handed to the command. The
// guest starts from an empty environment: host-specific variables (SSH,
// display, CI secrets) have no business there, but the Go runtime's knobs,
// PATH/HOME for tools, and the project's own RDMAGO_* settings do.
func passedEnv(name string) bool {
	switch name {
	case "GOTRACEBACK", "GODEBUG", "GOMAXPROCS", "PATH", "HOME", "TERM":
		return true
	}
	return strings.HasPrefix(name, "RDMAGO_")
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// guestEnv builds the command's environment: the passed host variables, then
// --env settings, then RDMAGO_VM and RDMAGO_KERNEL, later ones winning.
func guestEnv(hostEnv, extra []string, release string) ([]string, error) {
	vals := map[string]string{}
	for _, kv := range hostEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && passedEnv(k) && envNameRE.MatchString(k) {
			vals[k] = v
		}
	}
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envNameRE.MatchString(k) {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE with a shell-compatible NAME", kv)
		}
		vals[k] = v
	}
	vals["RDMAGO_VM"] = "1"
	vals["RDMAGO_KERNEL"] = release
	env := make([]string, 0, len(vals))
	for k, v := range vals {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, nil
}

// shQuote quotes s as one word for a POSIX shell.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeRequest writes config.sh (read by busybox in /init) and cmd.sh (run
// by the host's /bin/sh inside the guest root, with an empty environment).
func writeRequest(ioDir string, req guestRequest) error {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "VM_RDMA=%d\nVM_SHELL=%d\nVM_WAITGO=%d\nVM_LISTENWATCH=%d\n",
		b2i(req.rdma), b2i(req.shell), b2i(req.waitGo), b2i(req.listenWatch))
	var rw []string
	for _, s := range req.rw {
		rw = append(rw, s.tag+" "+s.path)
	}
	fmt.Fprintf(&cfg, "VM_RW=%s\n", shQuote(strings.Join(rw, "\n")))
	fmt.Fprintf(&cfg, "VM_MAC=%s\nVM_ADDR=%s\nVM_GID=%s\n", shQuote(req.net.mac), shQuote(req.net.addr.String()), shQuote(roceGID(req.net.addr.Addr())))
	// Dynamic debug queries, for chasing a kernel-side problem: with
	// "module rdma_rxe +p" rxe logs its QP state changes and timers, which
	// tests print from the kernel log when they fail.
	fmt.Fprintf(&cfg, "VM_DYNDBG=%s\n", shQuote(os.Getenv("RDMAGO_VM_DYNDBG")))
	if req.archRoot {
		fmt.Fprintf(&cfg, "VM_ARCHROOT=1\nVM_RDMAGO=%s\nVM_TTY=%s\n", shQuote(req.rdmago), shQuote(req.tty))
	}

	var cmd strings.Builder
	// Root in the guest may pin any amount of memory; keep that explicit
	// in case the host's shell or limits say otherwise.
	cmd.WriteString("ulimit -l unlimited 2>/dev/null\n")
	for _, kv := range req.env {
		fmt.Fprintf(&cmd, "export %s\n", shQuote(kv))
	}
	fmt.Fprintf(&cmd, "cd %s || { echo \"vm: cannot enter %s in the guest\" >&2; exit 125; }\n",
		shQuote(req.dir), strings.ReplaceAll(req.dir, `"`, `\"`))
	cmd.WriteString("exec")
	for _, a := range req.argv {
		cmd.WriteString(" " + shQuote(a))
	}
	cmd.WriteString("\n")

	if err := os.WriteFile(filepath.Join(ioDir, "config.sh"), []byte(cfg.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(ioDir, "cmd.sh"), []byte(cmd.String()), 0o644)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tail copies what the guest appends to one output file to w.
type tail struct {
	path   string
	w      io.Writer
	f      *os.File
	closed bool
}

// Poll copies everything new. The file does not exist until the guest
// starts the command; that is not an error.
func (t *tail) Poll() {
	if t.closed {
		return
	}
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			return
		}
		t.f = f
	}
	io.Copy(t.w, t.f) // to EOF; the next Poll continues from here
}

// Close closes the file, and flushes w if it holds back an unfinished line
// (a prefixWriter). Later Polls and Closes do nothing.
func (t *tail) Close() {
	if t.closed {
		return
	}
	t.closed = true
	if t.f != nil {
		t.f.Close()
	}
	if f, ok := t.w.(interface{ Flush() error }); ok {
		f.Flush()
	}
}

// guestOutputs are the files the guest writes into the I/O folder.
// "go" is the host's, but belongs to one boot as well.
var guestOutputs = []string{"ready", "go", "listening", "started", "stdout", "stderr", "exit", "exit.tmp"}

// resetIODir removes what a previous boot of the guest wrote, before the
// same request runs again.
func resetIODir(ioDir string) error {
	for _, name := range guestOutputs {
		if err := os.Remove(filepath.Join(ioDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// readExit returns the command's exit status once the guest has reported it.
func readExit(ioDir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(ioDir, "exit"))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return exitVMError, true
	}
	return code, true
}

// readReady reports whether the guest waits for "go", and its uptime then.
func readReady(ioDir string) (float64, bool) { return readUptime(ioDir, "ready") }

// release tells a guest waiting in readReady's state to start its command.
func release(ioDir string) error {
	return os.WriteFile(filepath.Join(ioDir, "go"), nil, 0o644)
}

// readListening reports whether the guest has seen a listener.
func readListening(ioDir string) bool {
	_, ok := readUptime(ioDir, "listening")
	return ok
}

// readStarted reports whether the command has started, and the guest's
// uptime at that moment.
func readStarted(ioDir string) (float64, bool) { return readUptime(ioDir, "started") }

// readUptime reads the guest's uptime from one of its marker files.
func readUptime(ioDir, name string) (float64, bool) {
	data, err := os.ReadFile(filepath.Join(ioDir, name))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, false // created but not yet written
	}
	up, _ := strconv.ParseFloat(f[0], 64)
	return up, true
}
