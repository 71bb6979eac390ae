//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// runOptions are the flags shared by vm run and vm shell.
type runOptions struct {
	kernel      string
	arch        string
	rdmago      string
	accel       string
	timeout     time.Duration
	bootTimeout time.Duration
	afterListen bool // vm pair --b-after-listen
	mem         string
	smp         int
	icount      bool
	icprof      string
	noRDMA      bool
	env         []string
	rw          []string
	console     bool
	verbose     bool
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func (o *runOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.kernel, "kernel", envOr("RDMAGO_VM_KERNEL", "bookworm"), "Debian suite (bookworm, trixie, sid) or an exact cached kernel release")
	fs.StringVar(&o.arch, "arch", envOr("RDMAGO_VM_ARCH", "amd64"), "guest architecture: amd64, or arm64 (qemu-system-aarch64 -M virt, TCG; arm64 kernel and rdma-core)")
	fs.StringVar(&o.rdmago, "rdmago", "", "an rdmago binary of the guest's architecture, the rdma tool of a foreign guest (default: bin/linux_ARCH/rdmago of the repository)")
	fs.StringVar(&o.accel, "accel", envOr("RDMAGO_VM_ACCEL", "auto"), "accelerator: auto (KVM when usable), kvm or tcg")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit for the whole run, boot included; exit status 124 when it expires")
	fs.DurationVar(&o.bootTimeout, "boot-timeout", 30*time.Second, "limit for booting until the command starts (retried once)")
	fs.StringVar(&o.mem, "mem", "2G", "guest memory (QEMU -m syntax)")
	fs.IntVar(&o.smp, "smp", 2, "guest CPUs")
	fs.BoolVar(&o.icount, "icount", false, "deterministic instruction-counting clock: TCG, one CPU, -icount shift=0,sleep=off")
	fs.StringVar(&o.icprof, "icprof", "", "with --icount: count the guest's instructions per translated block into `DIR` (a QEMU plugin, built by vm icprof): the guest's \"vm mark\" writes DIR/mark.N")
	fs.BoolVar(&o.noRDMA, "no-rdma", false, "do not create rxe0 (the guest has the RDMA modules but no device)")
	fs.Var((*listFlag)(&o.env), "env", "set NAME=VALUE in the command's environment (repeatable)")
	fs.Var((*listFlag)(&o.rw), "rw", "share this host folder writable at the same path in the guest (repeatable)")
	fs.BoolVar(&o.console, "console", envBool("RDMAGO_VM_CONSOLE"), "copy the guest's serial console to stderr")
	fs.BoolVar(&o.verbose, "v", envBool("RDMAGO_VM_VERBOSE"), "print boot and run timings")
}

func cmdRun(args []string) int {
	fs := flag.NewFlagSet("vm run", flag.ExitOnError)
	var o runOptions
	o.register(fs)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm run [flags] -- CMD [ARGS...]

Boots a VM with the kernel's soft-RoCE device rxe0 on dummy0 (10.0.2.15/24)
and runs CMD as root in the host's working directory, over a throwaway copy of
the host's root file system. Exits with CMD's exit status; 124 on timeout, 125
when the VM fails. As a go test runner: go test -exec "bin/vm run --" ./pkg

`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "timeout" })
	if d, ok := testTimeout(fs.Args()); ok && !explicit {
		// go test -exec: let the test binary's own -test.timeout fire first
		// (it prints every goroutine's stack), with a minute to boot and
		// report; go test -timeout 0 means no limit.
		o.timeout = 0
		if d > 0 {
			o.timeout = d + time.Minute
		}
	}
	return runVM(o, fs.Args(), false)
}

// testTimeout finds a Go test binary's -test.timeout flag in argv.
func testTimeout(argv []string) (time.Duration, bool) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.HasPrefix(a, "--") {
			a = a[1:]
		}
		var v string
		switch {
		case strings.HasPrefix(a, "-test.timeout="):
			v = strings.TrimPrefix(a, "-test.timeout=")
		case a == "-test.timeout" && i+1 < len(argv):
			v = argv[i+1]
		default:
			continue
		}
		if d, err := time.ParseDuration(v); err == nil {
			return d, true
		}
	}
	return 0, false
}

func cmdShell(args []string) int {
	fs := flag.NewFlagSet("vm shell", flag.ExitOnError)
	var o runOptions
	o.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vm shell [flags] [CMD ARGS...]\n\nBoots a VM like vm run and gives you an interactive shell on its serial console.")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 {
		argv = []string{"/bin/bash", "-i"}
		if _, err := os.Stat("/bin/bash"); err != nil {
			argv = []string{"/bin/sh", "-i"}
		}
	}
	o.timeout = 0 // an interactive session ends when the user says so
	return runVM(o, argv, true)
}

// runVM boots a VM, runs argv in it and returns the exit status for vm.
func runVM(o runOptions, argv []string, interactive bool) int {
	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	accel, why, err := chooseAccel(o.accel, o.icount)
	if o.arch == "arm64" && err == nil {
		// An arm64 guest on this x86 host is emulated whatever KVM can do.
		accel, why = "tcg", ""
	}
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	removeStaleIODirs()
	req := guestRequest{argv: argv, rdma: !o.noRDMA, shell: interactive, net: soloNet}
	p, err := planVM(c, o, o.kernel, req, nil)
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	defer os.RemoveAll(p.ioDir)
	p.cfg.accel = accel
	if o.icprof != "" {
		so, err := prepareIcprof(context.Background(), c)
		if err != nil {
			logf("icprof: %v", err)
			return exitVMError
		}
		p.cfg.plugin = so + ",out=" + p.icprofDir
	}

	// Take the signals before QEMU exists, so that none is lost between its
	// start and our handling of it. SIGPIPE too: when our reader goes away
	// (vm run ... | head), stop the VM and clean up instead of dying on the
	// spot.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	runtime.LockOSThread() // for QEMU's Pdeathsig; see startQEMU
	defer runtime.UnlockOSThread()

	var echo io.Writer
	if o.console && !interactive {
		echo = os.Stderr
	}
	logf("kernel %s (%s), accel %s%s, running: %s", p.k.Release, p.k.Suite, accelName(accel, o.icount), whyNote(why), strings.Join(argv, " "))
	bootRetries := 0
	for {
		q, err := startQEMU(p.cfg, echo)
		if err != nil {
			logf("%v", err)
			return exitVMError
		}
		s := newSession(o, p, q, time.Now(), "", os.Stdout, os.Stderr)
		if interactive {
			code := s.waitInteractive(sigs)
			q.Kill()
			return code
		}
		code, kvmFailed := s.wait(sigs)
		q.Kill()
		if s.bootStuck && bootRetries < maxBootRetries {
			// Nothing of the command ran. A guest that hangs or crashes
			// while booting (seen rarely under TCG on a loaded 2-core
			// machine: QEMU itself segfaulting, or the guest oopsing on
			// an int3 in code the kernel was patching on the other vCPU,
			// twice in a row once in CI) gets a fresh start.
			bootRetries++
			logf("retrying the boot (%d of %d)", bootRetries, maxBootRetries)
			if err := resetIODir(p.ioDir); err != nil {
				logf("%v", err)
				return exitVMError
			}
			continue
		}
		if !kvmFailed {
			return code
		}
		// A KVM that passed the probe may still be unable to run the guest
		// (see kvmUsable). Nothing of the command has run yet, so when the
		// choice was ours, run it again under TCG.
		if o.accel != "auto" {
			return s.fail(exitVMError, s.failure())
		}
		logf("KVM failed before the command started, retrying with TCG: %s", s.failure())
		p.cfg.accel = "tcg"
	}
}

// maxBootRetries bounds the fresh starts of a guest that never started
// its command: each costs a boot, about 4 s.
const maxBootRetries = 3

// vmPlan is one VM ready to start: its kernel, its I/O folder with the
// request in it, and its QEMU configuration (less the accelerator, which
// the caller chooses).
type vmPlan struct {
	k     *kernel
	ioDir string // the caller removes it
	cfg   qemuConfig
	argv0 string // the command, for messages
	// icprofDir is --icprof's folder, absolute, or "".
	icprofDir string
}

// planVM prepares the kernel named by spec and its initramfs, and writes req
// for the guest, completed with the working directory and the environment
// (extraEnv after o.env, so it wins).
func planVM(c *vmCache, o runOptions, spec string, req guestRequest, extraEnv []string) (*vmPlan, error) {
	k, err := prepareKernel(context.Background(), c, spec, o.arch, false)
	if err != nil {
		return nil, fmt.Errorf("kernel: %v", err)
	}
	bb, ar, err := guestBusybox(c, k)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %v", k.Release, err)
	}
	initrd, err := ensureInitramfs(c, k, bb)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: initramfs: %v", k.Release, err)
	}
	archRootDir := ""
	if ar != nil {
		archRootDir = ar.root()
		req.archRoot, req.tty = true, "ttyAMA0"
		if req.rdmago, err = foreignRdmago(o, k.arch()); err != nil {
			return nil, err
		}
	}
	if req.dir, err = os.Getwd(); err != nil {
		return nil, err
	}
	rw := o.rw
	icprofDir := ""
	if o.icprof != "" {
		if !o.icount {
			// The plugin's counters assume one vCPU, which only icount
			// guarantees; and only under icount are the counts the time.
			return nil, fmt.Errorf("--icprof needs --icount")
		}
		if k.arch() != "amd64" {
			return nil, fmt.Errorf("--icprof: the marker is an x86 instruction; the guest is %s", k.arch())
		}
		if icprofDir, err = filepath.Abs(o.icprof); err != nil {
			return nil, err
		}
		if strings.Contains(icprofDir, ",") {
			// QEMU's -plugin option separates its arguments by commas.
			return nil, fmt.Errorf("--icprof %s: a folder whose path has no comma, please", icprofDir)
		}
		if err := os.MkdirAll(icprofDir, 0o755); err != nil {
			return nil, err
		}
		// A previous run's counts and symbols would pass for this one's.
		old, _ := filepath.Glob(filepath.Join(icprofDir, "mark.*"))
		for _, f := range append(old, filepath.Join(icprofDir, "kallsyms")) {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
		}
		// The guest's vm mark saves the kernel's symbols there.
		rw = append(rw[:len(rw):len(rw)], icprofDir)
		extraEnv = append(extraEnv[:len(extraEnv):len(extraEnv)], icprofEnv+"="+icprofDir)
	}
	if req.env, err = guestEnv(os.Environ(), append(append([]string(nil), o.env...), extraEnv...), k.Release); err != nil {
		return nil, err
	}
	for i, d := range rw {
		abs, err := filepath.Abs(d)
		if err == nil && !isDir(abs) {
			err = fmt.Errorf("not a folder")
		}
		if err != nil {
			return nil, fmt.Errorf("--rw %s: %v", d, err)
		}
		req.rw = append(req.rw, share{tag: fmt.Sprintf("rw%d", i), path: abs})
	}
	// The I/O share lives in the host's temporary folder; a unique name per
	// VM keeps concurrent ones apart.
	ioDir, err := newIODir()
	if err != nil {
		return nil, err
	}
	if err := writeRequest(ioDir, req); err != nil {
		os.RemoveAll(ioDir)
		return nil, err
	}
	smp := max(o.smp, 1)
	return &vmPlan{k: k, ioDir: ioDir, argv0: req.argv[0], icprofDir: icprofDir, cfg: qemuConfig{
		arch: k.arch(), archRoot: archRootDir,
		vmlinux: k.vmlinux(), initrd: initrd, icount: o.icount,
		smp: smp, mem: o.mem, ioDir: ioDir, rw: req.rw, interactive: req.shell,
		trace: o.console,
	}}, nil
}

// foreignRdmago finds the rdmago binary that serves as a foreign guest's
// rdma tool: iproute2's is the host's architecture, and the guest sets up
// rxe0 with it.
func foreignRdmago(o runOptions, arch string) (string, error) {
	p := o.rdmago
	if p == "" {
		wd, _ := os.Getwd()
		root := findRepoRoot(wd)
		if root == "" {
			return "", fmt.Errorf("--arch %s needs --rdmago: no repository here to find bin/linux_%s/rdmago in", arch, arch)
		}
		p = filepath.Join(root, "bin", "linux_"+arch, "rdmago")
	}
	abs, err := filepath.Abs(p)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		return "", fmt.Errorf("the %s guest's rdma tool: %v (build it: make bin/linux_%s/rdmago)", arch, err, arch)
	}
	return abs, nil
}

// whyNote formats chooseAccel's reason for the log line.
func whyNote(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

func accelName(accel string, icount bool) string {
	if icount {
		return accel + " (icount)"
	}
	return accel
}

// session follows one running VM to its end.
type session struct {
	// bootStuck: the guest never started the command (boot timeout, or
	// QEMU died while booting).
	bootStuck bool
	o         runOptions
	k         *kernel
	accel     string
	q         *qemuProc
	ioDir     string
	start     time.Time
	name      string // "a" or "b" in vm pair, for messages; "" in vm run
	stdout    *tail
	stderr    *tail
	ready     time.Time // when the guest reported it waits for "go" (vm pair)
	started   time.Time // when the guest reported the command's start
	uptime    float64   // the guest's uptime then
	stall     string    // why the guest was given up on, when nothing else says
	failed    string    // why vm failed the run (see fail), or ""
	argv0     string    // the command, for messages
}

// newSession follows q, started at start from plan p, copying the command's
// output to stdout and stderr.
func newSession(o runOptions, p *vmPlan, q *qemuProc, start time.Time, name string, stdout, stderr io.Writer) *session {
	return &session{
		o: o, k: p.k, accel: p.cfg.accel, q: q, ioDir: p.ioDir, start: start, name: name,
		stdout: &tail{path: filepath.Join(p.ioDir, "stdout"), w: stdout},
		stderr: &tail{path: filepath.Join(p.ioDir, "stderr"), w: stderr},
		argv0:  p.argv0,
	}
}

// logf is the package's logf with the session's name, in vm pair.
func (s *session) logf(format string, args ...any) {
	if s.name != "" {
		format = "[" + s.name + "] " + format
	}
	logf(format, args...)
}

// drain copies the command's new output.
func (s *session) drain() {
	s.stdout.Poll()
	s.stderr.Poll()
}

// closeOutput copies the last of the output and closes the files.
func (s *session) closeOutput() {
	s.drain()
	s.stdout.Close()
	s.stderr.Close()
}

// pollInterval bounds the delay of streamed output and of noticing the end.
const pollInterval = 10 * time.Millisecond

// kvmSilenceLimit is how long a KVM guest may stay silent on the console
// before KVM is taken for broken (a normal KVM boot prints within ~1 s).
const kvmSilenceLimit = 15 * time.Second

// wait streams the command's output until it ends and returns the exit
// status for vm. kvmFailed reports a failure of KVM itself before the
// command started, which a TCG run may not have.
func (s *session) wait(sigs <-chan os.Signal) (code int, kvmFailed bool) {
	defer s.closeOutput()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		select {
		case sig := <-sigs:
			s.stop()
			logf("stopped by %v (kernel %s)", sig, s.k.Release)
			return 128 + int(sig.(syscall.Signal)), false
		case <-s.q.done:
		case <-ticker.C:
		}
		if code, done, kvmFailed := s.poll(); done {
			return code, kvmFailed
		}
	}
}

// stop kills QEMU and copies what output there is.
func (s *session) stop() {
	s.drain()
	s.q.Kill()
	s.drain()
}

// poll copies new output and checks once whether the run is over. When it
// is (done), QEMU has been stopped and code is the exit status for vm;
// kvmFailed reports a failure of KVM itself before the command started,
// which a TCG run may not have.
func (s *session) poll() (code int, done, kvmFailed bool) {
	s.drain()
	select {
	case <-s.q.done:
		s.drain()
		if code, ok := readExit(s.ioDir); ok {
			return s.finish(code), true, false
		}
		if s.kvmBroken() {
			return exitVMError, true, true
		}
		if _, started := readStarted(s.ioDir); !started {
			// QEMU died before the command started (TCG has crashed here
			// with a segmentation fault once): nothing ran, so the run
			// may boot again.
			s.bootStuck = true
		}
		return s.fail(exitVMError, s.failure()), true, false
	default:
	}
	if s.started.IsZero() {
		if up, ok := readStarted(s.ioDir); ok {
			s.started, s.uptime = time.Now(), up
		}
	}
	if code, ok := readExit(s.ioDir); ok {
		s.drain()
		s.q.Kill() // the guest would only power off now
		return s.finish(code), true, false
	}
	if s.kvmBroken() {
		s.q.Kill()
		return exitVMError, true, true
	}
	if cause := s.q.console.Cause(); cause != "" {
		// Give the guest's power-off a moment, then report.
		select {
		case <-s.q.done:
		case <-time.After(2 * time.Second):
		}
		if _, started := readStarted(s.ioDir); !started {
			// A panic while booting (an int3 oops in the timer code,
			// seen on sid's kernel under TCG) ran nothing of the
			// command: boot again, as for a hang.
			s.bootStuck = true
		}
		return s.fail(exitVMError, cause), true, false
	}
	elapsed := time.Since(s.start)
	if s.o.timeout > 0 && elapsed > s.o.timeout {
		s.drain()
		return s.fail(exitTimeout, fmt.Sprintf("timed out after %v running %s", s.o.timeout, s.argv0)), true, false
	}
	// A guest held ready by vm pair has booted.
	if s.started.IsZero() && s.ready.IsZero() && elapsed > s.o.bootTimeout {
		s.bootStuck = true
		return s.fail(exitVMError, fmt.Sprintf("guest did not start the command within %v", s.o.bootTimeout)), true, false
	}
	return 0, false, false
}

// kvmBroken reports whether KVM failed to run the guest. That shows in one
// of three ways: QEMU aborts before the guest prints anything (e.g. "failed
// to set MSR"), QEMU reports "KVM internal error" and stops the guest for
// good, or the guest spins silently for a minute first. /init's first
// console line arrives within a second under KVM, so long silence means KVM
// is broken.
func (s *session) kvmBroken() bool {
	if s.accel != "kvm" || !s.started.IsZero() {
		return false
	}
	if strings.Contains(s.q.stderr.String(), "KVM internal error") {
		return true
	}
	if s.q.console.Lines() > 0 {
		return false
	}
	select {
	case <-s.q.done:
		return true
	default:
	}
	if time.Since(s.start) > kvmSilenceLimit {
		s.stall = fmt.Sprintf("the guest printed nothing within %v under KVM", kvmSilenceLimit)
		return true
	}
	return false
}

// failure describes why the VM ended without the command's exit status.
func (s *session) failure() string {
	if cause := s.q.console.Cause(); cause != "" {
		return cause
	}
	if msg := strings.TrimSpace(s.q.stderr.String()); msg != "" {
		return "QEMU failed: " + strings.SplitN(msg, "\n", 2)[0]
	}
	if s.stall != "" {
		return s.stall
	}
	select {
	case <-s.q.done:
		return fmt.Sprintf("QEMU exited (%v) before the command finished", s.q.err)
	default:
		return "the guest stopped responding"
	}
}

// waitInteractive waits for a vm shell session: QEMU owns the terminal.
func (s *session) waitInteractive(sigs <-chan os.Signal) int {
	select {
	case sig := <-sigs:
		s.q.Kill()
		return 128 + int(sig.(syscall.Signal))
	case <-s.q.done:
	}
	if code, ok := readExit(s.ioDir); ok {
		return code
	}
	logf("%s (kernel %s)", s.failure(), s.k.Release)
	return exitVMError
}

// readyAt returns when the guest was first seen waiting for "go", or the
// zero time while it is not.
func (s *session) readyAt() time.Time {
	if s.ready.IsZero() {
		if _, ok := readReady(s.ioDir); ok {
			s.ready = time.Now()
		}
	}
	return s.ready
}

// bootTime is how long the VM took from QEMU's start to the command's.
func (s *session) bootTime() time.Duration { return s.started.Sub(s.start) }

func (s *session) finish(code int) int {
	if s.o.verbose {
		total := time.Since(s.start)
		boot := s.bootTime()
		s.logf("kernel %s, accel %s: boot to command %.2fs (guest uptime %.2fs), command %.2fs, total %.2fs, exit %d",
			s.k.Release, accelName(s.accel, s.o.icount), boot.Seconds(), s.uptime, (total - boot).Seconds(), total.Seconds(), code)
	}
	return code
}

// fail stops QEMU and reports why the run failed, with the console's tail
// and QEMU's own messages.
func (s *session) fail(code int, cause string) int {
	s.q.Kill()
	s.failed = cause
	s.logf("%s (kernel %s, accel %s); console tail:", cause, s.k.Release, accelName(s.accel, s.o.icount))
	bar := "  | "
	if s.name != "" {
		bar = "  [" + s.name + "] | "
	}
	for _, l := range s.q.console.Tail() {
		fmt.Fprintln(os.Stderr, bar+l)
	}
	if msg := strings.TrimSpace(s.q.stderr.String()); msg != "" {
		s.logf("qemu said:\n%s", msg)
	}
	return code
}
