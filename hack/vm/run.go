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
	accel       string
	timeout     time.Duration
	bootTimeout time.Duration
	mem         string
	smp         int
	icount      bool
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
	fs.StringVar(&o.accel, "accel", envOr("RDMAGO_VM_ACCEL", "auto"), "accelerator: auto (KVM when usable), kvm or tcg")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit for the whole run, boot included; exit status 124 when it expires")
	fs.DurationVar(&o.bootTimeout, "boot-timeout", 60*time.Second, "limit for booting until the command starts")
	fs.StringVar(&o.mem, "mem", "2G", "guest memory (QEMU -m syntax)")
	fs.IntVar(&o.smp, "smp", 2, "guest CPUs")
	fs.BoolVar(&o.icount, "icount", false, "deterministic instruction-counting clock: TCG, one CPU, -icount shift=0,sleep=off")
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
	k, err := prepareKernel(context.Background(), c, o.kernel, false)
	if err != nil {
		logf("kernel: %v", err)
		return exitVMError
	}
	initrd, err := ensureInitramfs(c, k)
	if err != nil {
		logf("kernel %s: initramfs: %v", k.Release, err)
		return exitVMError
	}
	accel, why, err := chooseAccel(o.accel, o.icount)
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	if o.smp < 1 {
		o.smp = 1
	}
	cwd, err := os.Getwd()
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	env, err := guestEnv(os.Environ(), o.env, k.Release)
	if err != nil {
		logf("%v", err)
		return exitVMError
	}

	// The I/O share lives in the host's temporary folder; a unique name per
	// run keeps concurrent runs apart (nothing else is shared: no ports).
	removeStaleIODirs()
	ioDir, err := newIODir()
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	defer os.RemoveAll(ioDir)

	req := guestRequest{argv: argv, dir: cwd, env: env, rdma: !o.noRDMA, shell: interactive}
	for i, d := range o.rw {
		abs, err := filepath.Abs(d)
		if err == nil && !isDir(abs) {
			err = fmt.Errorf("not a folder")
		}
		if err != nil {
			logf("--rw %s: %v", d, err)
			return exitVMError
		}
		req.rw = append(req.rw, share{tag: fmt.Sprintf("rw%d", i), path: abs})
	}
	if err := writeRequest(ioDir, req); err != nil {
		logf("%v", err)
		return exitVMError
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
	cfg := qemuConfig{
		vmlinux: k.vmlinux(), initrd: initrd, accel: accel, icount: o.icount,
		smp: o.smp, mem: o.mem, ioDir: ioDir, rw: req.rw, interactive: interactive,
		trace: o.console,
	}
	if why != "" {
		why = " (" + why + ")"
	}
	logf("kernel %s (%s), accel %s%s, running: %s", k.Release, k.Suite, accelName(accel, o.icount), why, strings.Join(argv, " "))
	for {
		q, err := startQEMU(cfg, echo)
		if err != nil {
			logf("%v", err)
			return exitVMError
		}
		s := &session{o: o, k: k, accel: cfg.accel, q: q, ioDir: ioDir, start: time.Now(), sigs: sigs, argv0: argv[0]}
		if interactive {
			code := s.waitInteractive()
			q.Kill()
			return code
		}
		code, kvmFailed := s.wait()
		q.Kill()
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
		cfg.accel = "tcg"
	}
}

func accelName(accel string, icount bool) string {
	if icount {
		return accel + " (icount)"
	}
	return accel
}

// session follows one running VM to its end.
type session struct {
	o       runOptions
	k       *kernel
	accel   string
	q       *qemuProc
	ioDir   string
	start   time.Time
	sigs    chan os.Signal
	started time.Time // when the guest reported the command's start
	uptime  float64   // the guest's uptime then
	stall   string    // why the guest was given up on, when nothing else says
	argv0   string    // the command, for messages
}

// pollInterval bounds the delay of streamed output and of noticing the end.
const pollInterval = 10 * time.Millisecond

// kvmSilenceLimit is how long a KVM guest may stay silent on the console
// before KVM is taken for broken (a normal KVM boot prints within ~1 s).
const kvmSilenceLimit = 15 * time.Second

// wait streams the command's output until it ends and returns the exit
// status for vm. kvmFailed reports a failure of KVM itself before the
// command started, which a TCG run may not have.
func (s *session) wait() (code int, kvmFailed bool) {
	stdout := &tail{path: filepath.Join(s.ioDir, "stdout"), w: os.Stdout}
	stderr := &tail{path: filepath.Join(s.ioDir, "stderr"), w: os.Stderr}
	defer stdout.Close()
	defer stderr.Close()
	drain := func() {
		stdout.Poll()
		stderr.Poll()
	}
	// A KVM that cannot run the guest shows in one of three ways: QEMU
	// aborts before the guest prints anything (e.g. "failed to set MSR"),
	// QEMU reports "KVM internal error" and stops the guest for good, or the
	// guest spins silently for a minute first. /init's first console line
	// arrives within a second under KVM, so long silence means KVM is broken.
	kvmBroken := func() bool {
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

	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		select {
		case sig := <-s.sigs:
			drain()
			s.q.Kill()
			logf("stopped by %v (kernel %s)", sig, s.k.Release)
			return 128 + int(sig.(syscall.Signal)), false

		case <-s.q.done:
			drain()
			if code, ok := readExit(s.ioDir); ok {
				return s.finish(code), false
			}
			if kvmBroken() {
				return exitVMError, true
			}
			return s.fail(exitVMError, s.failure()), false

		case <-ticker.C:
			drain()
			if s.started.IsZero() {
				if up, ok := readStarted(s.ioDir); ok {
					s.started, s.uptime = time.Now(), up
				}
			}
			if code, ok := readExit(s.ioDir); ok {
				drain()
				s.q.Kill() // the guest would only power off now
				return s.finish(code), false
			}
			if kvmBroken() {
				return exitVMError, true
			}
			if cause := s.q.console.Cause(); cause != "" {
				// Give the guest's power-off a moment, then report.
				select {
				case <-s.q.done:
				case <-time.After(2 * time.Second):
				}
				return s.fail(exitVMError, cause), false
			}
			elapsed := time.Since(s.start)
			if s.o.timeout > 0 && elapsed > s.o.timeout {
				drain()
				return s.fail(exitTimeout, fmt.Sprintf("timed out after %v running %s", s.o.timeout, s.argv0)), false
			}
			if s.started.IsZero() && elapsed > s.o.bootTimeout {
				return s.fail(exitVMError, fmt.Sprintf("guest did not start the command within %v", s.o.bootTimeout)), false
			}
		}
	}
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
func (s *session) waitInteractive() int {
	select {
	case sig := <-s.sigs:
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

func (s *session) finish(code int) int {
	if s.o.verbose {
		total := time.Since(s.start)
		boot := s.started.Sub(s.start)
		logf("kernel %s, accel %s: boot to command %.2fs (guest uptime %.2fs), command %.2fs, total %.2fs, exit %d",
			s.k.Release, accelName(s.accel, s.o.icount), boot.Seconds(), s.uptime, (total - boot).Seconds(), total.Seconds(), code)
	}
	return code
}

// fail stops QEMU and reports why the run failed, with the console's tail
// and QEMU's own messages.
func (s *session) fail(code int, cause string) int {
	s.q.Kill()
	logf("%s (kernel %s, accel %s); console tail:", cause, s.k.Release, accelName(s.accel, s.o.icount))
	for _, l := range s.q.console.Tail() {
		fmt.Fprintln(os.Stderr, "  | "+l)
	}
	if msg := strings.TrimSpace(s.q.stderr.String()); msg != "" {
		logf("qemu said:\n%s", msg)
	}
	return code
}
