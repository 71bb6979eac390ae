//go:build linux

package main

// vm pair: two VMs joined by one emulated Ethernet link, each with its own
// rxe0 on its NIC, running one command each. rxe cannot be moved into a
// network namespace, so a test between two RDMA hosts needs two kernels.
//
// The link is QEMU's "socket" netdev on both sides, over the two ends of one
// socketpair(2) that vm makes and hands to the QEMUs as an inherited file
// descriptor: no TCP port to pick or to race for, no ordering between the
// two starts, and nothing else on the host can connect into the link.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pairSep separates VM a's command from VM b's on the command line.
const pairSep = ":::"

// pairGrace is how long the other VM may go on after one command failed,
// to end by itself (a server whose client failed usually waits forever).
const pairGrace = 3 * time.Second

// The two VMs: names (for output prefixes and RDMAGO_PAIR), NIC MACs (QEMU's
// locally administered 52:54:00 prefix) and addresses.
var (
	pairNames = [2]string{"a", "b"}
	pairMACs  = [2]string{"52:54:00:00:00:0a", "52:54:00:00:00:0b"}
	pairAddrs = [2]netip.Prefix{netip.MustParsePrefix("10.0.5.1/24"), netip.MustParsePrefix("10.0.5.2/24")}
)

func cmdPair(args []string) int {
	fs := flag.NewFlagSet("vm pair", flag.ExitOnError)
	var o runOptions
	o.register(fs)
	kernelB := fs.String("kernel-b", "", "kernel for VM b (default: the same as --kernel)")
	archB := fs.String("arch-b", "", "architecture of VM b (default: the same as --arch): two architectures on one link")
	fs.BoolVar(&o.afterListen, "b-after-listen", false, "start b's command once a has a listener, rdma_cm or TCP (or has ended, or after 30s), not with a's")
	// One vCPU each: two VMs of two under TCG on a 2-core host boot in
	// 3.5 s instead of 2.4 s, and move RDMA writes across more slowly.
	o.smp = 1
	fs.Lookup("smp").DefValue = "1"
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vm pair [flags] -- CMD_A [ARGS...] ::: CMD_B [ARGS...]

Boots two VMs, a and b, joined by one emulated Ethernet link (virtio-net), with
10.0.5.1/24 and 10.0.5.2/24 and a soft-RoCE device rxe0 on that NIC in each,
and runs CMD_A in a and CMD_B in b at the same time, like vm run. Their output
is streamed with "[a] " and "[b] " before each line. Exits 0 when both commands
succeed; otherwise with the status of the first to fail, saying which (the
other VM gets 3s to end by itself, then is stopped). 124 on timeout, 125 when
a VM fails.

Each command's environment has RDMAGO_PAIR=a or b, RDMAGO_LOCAL_IP,
RDMAGO_PEER_IP, RDMAGO_GID_INDEX (the local IPv4 address's RoCE v2 GID,
normally 1) and RDMAGO_VM=1. Both start together, once both VMs are ready;
a client must still retry until its server listens, or wait first:
  vm pair -- rping -s -a 10.0.5.1 ::: sh -c 'sleep 2; exec rping -c -a 10.0.5.1'
With --b-after-listen, b's command starts only once a has a listener (an
rdma_cm ID or a TCP socket in LISTEN), so the client needs no wait:
  vm pair --b-after-listen -- rping -s -a 10.0.5.1 ::: rping -c -a 10.0.5.1

`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	argvs, err := splitPairArgs(fs.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm pair: %v\n\n", err)
		fs.Usage()
		return 2
	}
	if o.icount {
		// Each guest's clock would count its own instructions: the two
		// would drift apart without bound, and timeouts across the link
		// would mean nothing.
		fmt.Fprintln(os.Stderr, "vm pair: --icount is not supported: the two guests' clocks would not agree")
		return 2
	}
	if o.icprof != "" {
		fmt.Fprintln(os.Stderr, "vm pair: --icprof is not supported: the counts are one guest's")
		return 2
	}
	kernels := [2]string{o.kernel, o.kernel}
	if *kernelB != "" {
		kernels[1] = *kernelB
	}
	archs := [2]string{o.arch, o.arch}
	if *archB != "" {
		archs[1] = *archB
	}
	return runPair(o, kernels, archs, argvs)
}

// splitPairArgs splits "CMD_A... ::: CMD_B..." at the first separator; a
// later ":::" belongs to CMD_B.
func splitPairArgs(args []string) ([2][]string, error) {
	for i, a := range args {
		if a != pairSep {
			continue
		}
		argvs := [2][]string{args[:i], args[i+1:]}
		for j, argv := range argvs {
			if len(argv) == 0 {
				return argvs, fmt.Errorf("no command for VM %s", pairNames[j])
			}
		}
		return argvs, nil
	}
	if len(args) == 0 {
		return [2][]string{}, errors.New("no commands")
	}
	return [2][]string{}, fmt.Errorf("no %q between the commands of VM a and VM b", pairSep)
}

// pairEnv is what tells a command of the pair its role and its peer.
func pairEnv(i int) []string {
	return []string{
		"RDMAGO_PAIR=" + pairNames[i],
		"RDMAGO_LOCAL_IP=" + pairAddrs[i].Addr().String(),
		"RDMAGO_PEER_IP=" + pairAddrs[1-i].Addr().String(),
	}
}

// runPair boots the two VMs, runs argvs[0] in a and argvs[1] in b, and
// returns the exit status for vm.
func runPair(o runOptions, kernels, archs [2]string, argvs [2][]string) int {
	c, err := openCache()
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	accel, why, err := chooseAccel(o.accel, false)
	if err != nil {
		logf("%v", err)
		return exitVMError
	}
	removeStaleIODirs()
	var plans [2]*vmPlan
	for i := range plans {
		req := guestRequest{argv: argvs[i], rdma: !o.noRDMA, net: guestNet{mac: pairMACs[i], addr: pairAddrs[i]},
			waitGo: true, listenWatch: i == 0 && o.afterListen}
		oi := o
		oi.arch = archs[i]
		p, err := planVM(c, oi, kernels[i], req, pairEnv(i))
		if err != nil {
			logf("[%s] %v", pairNames[i], err)
			return exitVMError
		}
		defer os.RemoveAll(p.ioDir)
		p.cfg.accel = accel
		if oi.arch == "arm64" {
			p.cfg.accel = "tcg" // emulated on this x86 host, whatever KVM can do
		}
		plans[i] = p
	}

	// As in runVM: signals first, and one OS thread for Pdeathsig.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	logf("pair: accel %s%s, one link between 10.0.5.1 (a) and 10.0.5.2 (b)", accel, whyNote(why))
	for i, p := range plans {
		logf("[%s] kernel %s (%s), %s, running: %s", pairNames[i], p.k.Release, p.k.Suite, pairAddrs[i], strings.Join(argvs[i], " "))
	}
	for {
		code, kvmFailed := runPairOnce(o, plans, sigs)
		if !kvmFailed {
			return code
		}
		// As in runVM, but the other VM's command may have run already:
		// both run again from the start.
		logf("pair: KVM failed before a command started, running both again with TCG")
		for _, p := range plans {
			p.cfg.accel = "tcg"
			if err := resetIODir(p.ioDir); err != nil {
				logf("%v", err)
				return exitVMError
			}
		}
	}
}

// runPairOnce starts both VMs on a fresh link and follows them to their end
// (see waitPair).
func runPairOnce(o runOptions, plans [2]*vmPlan, sigs <-chan os.Signal) (code int, kvmFailed bool) {
	link, err := socketPair()
	if err != nil {
		logf("pair: link: %v", err)
		return exitVMError, false
	}
	start := time.Now()
	var ss [2]*session
	for i, p := range plans {
		name := pairNames[i]
		prefix := "[" + name + "] "
		p.cfg.nic = &nic{mac: pairMACs[i], sock: link[i]}
		var echo io.Writer
		if o.console {
			echo = &prefixWriter{w: os.Stderr, prefix: prefix}
		}
		q, err := startQEMU(p.cfg, echo)
		if err != nil {
			if i > 0 {
				ss[0].q.Kill()
			}
			link[0].Close()
			link[1].Close()
			logf("[%s] %v", name, err)
			return exitVMError, false
		}
		ss[i] = newSession(o, p, q, start, name, &prefixWriter{w: os.Stdout, prefix: prefix}, &prefixWriter{w: os.Stderr, prefix: prefix})
	}
	// Each QEMU has its own end now; with ours closed, a VM that goes away
	// takes the link down for the other.
	link[0].Close()
	link[1].Close()
	return waitPair(ss, sigs)
}

// socketPair makes the link: a connected pair of stream sockets.
func socketPair() ([2]*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]*os.File{}, fmt.Errorf("socketpair: %w", err)
	}
	return [2]*os.File{os.NewFile(uintptr(fds[0]), "link-a"), os.NewFile(uintptr(fds[1]), "link-b")}, nil
}

// pairEnd is one VM of the pair, followed to its end.
type pairEnd struct {
	s       *session
	done    bool
	code    int
	stopped bool // stopped by us after the other command failed
}

// waitPair follows both VMs to their end and returns the exit status for vm,
// or kvmFailed when KVM failed in one of them before its command started and
// the choice of KVM was ours (as for runVM).
func waitPair(ss [2]*session, sigs <-chan os.Signal) (code int, kvmFailed bool) {
	ends := [2]*pairEnd{{s: ss[0]}, {s: ss[1]}}
	defer func() {
		for _, e := range ends {
			e.s.q.Kill()
			e.s.closeOutput()
		}
	}()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	first := -1 // the end that failed first
	var failedAt time.Time
	held := &pairStart{afterListen: ss[0].o.afterListen, listenLimit: defaultListenLimit}
	for !ends[0].done || !ends[1].done {
		select {
		case sig := <-sigs:
			for _, e := range ends {
				if !e.done {
					e.s.stop()
				}
			}
			logf("pair stopped by %v", sig)
			return 128 + int(sig.(syscall.Signal)), false
		case <-ticker.C:
		}
		held.step(ss, ends[0].done) // nothing once both have started
		for i, e := range ends {
			if e.done {
				continue
			}
			code, done, kvm := e.s.poll()
			if !done {
				continue
			}
			if kvm {
				other := ends[1-i].s
				other.stop()
				if e.s.o.accel == "auto" {
					logf("[%s] %s", e.s.name, e.s.failure())
					return exitVMError, true
				}
				return e.s.fail(exitVMError, e.s.failure()), false
			}
			e.done, e.code = true, code
			e.s.closeOutput()
			if code != 0 && first < 0 {
				first, failedAt = i, time.Now()
			}
		}
		if first >= 0 {
			if other := ends[1-first]; !other.done && time.Since(failedAt) > pairGrace {
				other.s.stop()
				other.s.closeOutput()
				other.done, other.stopped = true, true
			}
		}
	}
	if first < 0 {
		if ss[0].o.verbose {
			logf("pair: boot to command a %.2fs, b %.2fs; total %.2fs",
				ss[0].bootTime().Seconds(), ss[1].bootTime().Seconds(), time.Since(ss[0].start).Seconds())
		}
		return 0, false
	}
	logf("pair failed: %s", pairSummary(first, [2]pairResult{ends[0].result(), ends[1].result()}))
	return ends[first].code, false
}

// pairStart holds back the two commands until they should start. Each VM
// boots at its own pace, so a client that waits before it connects must
// count from its server's start, not its own boot's end: both start when
// both guests are ready. With afterListen, b starts only once a has a
// listener, rdma_cm or TCP (the guest's /init watches and says so), since a
// server's start to its listen has itself taken 1.9 s in a VM with a cold
// page cache (faultrun and rdmago's rping server, 9p).
type pairStart struct {
	afterListen bool
	listenLimit time.Duration // b starts anyway this long after a did
	started     [2]bool
	aStart      time.Time
}

// pairSkewNote is the boot skew worth a line in the output, to read beside
// a failure that timing could explain.
const pairSkewNote = time.Second

// defaultListenLimit bounds --b-after-listen's wait: a server whose listen
// takes longer has a problem of its own, which b's failure to connect then
// shows.
const defaultListenLimit = 30 * time.Second

// step releases what should start now; aDone reports that a's command has
// ended. It reports whether both have been released.
func (p *pairStart) step(ss [2]*session, aDone bool) bool {
	if !p.started[0] {
		at := [2]time.Time{ss[0].readyAt(), ss[1].readyAt()}
		if at[0].IsZero() || at[1].IsZero() {
			return false
		}
		if skew := at[0].Sub(at[1]).Abs(); skew >= pairSkewNote {
			late := 0
			if at[1].After(at[0]) {
				late = 1
			}
			logf("pair: [%s] was ready %.1fs after [%s]; the commands start now", pairNames[late], skew.Seconds(), pairNames[1-late])
		}
		p.releaseOne(ss, 0)
		p.aStart = time.Now()
		if !p.afterListen {
			p.releaseOne(ss, 1)
		}
	}
	if p.started[1] {
		return true
	}
	switch {
	case readListening(ss[0].ioDir):
		if ss[0].o.verbose {
			logf("pair: [a] listens %.2fs after its start; [b] starts", time.Since(p.aStart).Seconds())
		}
	case aDone:
		logf("pair: [a] ended without a listener; [b] starts anyway")
	case time.Since(p.aStart) > p.listenLimit:
		logf("pair: [a] has no listener %v after its start; [b] starts anyway", p.listenLimit)
	default:
		return false
	}
	p.releaseOne(ss, 1)
	return true
}

func (p *pairStart) releaseOne(ss [2]*session, i int) {
	p.started[i] = true
	if err := release(ss[i].ioDir); err != nil {
		// The guest never starts, and the pair's timeout ends it.
		ss[i].logf("cannot start the command: %v", err)
	}
}

// pairResult is how one VM of the pair ended, for the summary line.
type pairResult struct {
	code    int
	cause   string // why vm failed the VM (timeout, boot failure), or ""
	argv0   string
	stopped bool
}

func (e *pairEnd) result() pairResult {
	return pairResult{code: e.code, cause: e.s.failed, argv0: e.s.argv0, stopped: e.stopped}
}

// pairSummary says how both ended, the one that failed first first:
// "[b] exit status 1 (/bin/sh); [a] stopped 3s after [b] failed".
func pairSummary(first int, rs [2]pairResult) string {
	var parts []string
	for _, i := range []int{first, 1 - first} {
		r := rs[i]
		var what string
		switch {
		case r.stopped:
			what = fmt.Sprintf("stopped %v after [%s] failed", pairGrace, pairNames[first])
		case r.cause != "":
			what = r.cause
		default:
			what = fmt.Sprintf("exit status %d (%s)", r.code, r.argv0)
		}
		parts = append(parts, "["+pairNames[i]+"] "+what)
	}
	return strings.Join(parts, "; ")
}

// prefixWriter writes whole lines, each with a prefix, so that the output of
// the two VMs interleaves by lines without mixing within one. An unfinished
// line waits for its end, for Flush, or for maxPartialLine bytes.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte // an unfinished line
}

const maxPartialLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	var out []byte
	for rest := b; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			p.buf = append(p.buf, rest...)
			if len(p.buf) >= maxPartialLine {
				out = p.appendLine(out, nil)
			}
			break
		}
		out = p.appendLine(out, rest[:i])
		rest = rest[i+1:]
	}
	if len(out) > 0 {
		if _, err := p.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// appendLine appends the prefix, the unfinished line, more and a newline to
// out, and empties the unfinished line.
func (p *prefixWriter) appendLine(out, more []byte) []byte {
	out = append(out, p.prefix...)
	out = append(out, p.buf...)
	out = append(out, more...)
	p.buf = p.buf[:0]
	return append(out, '\n')
}

// Flush writes an unfinished line, ended with a newline.
func (p *prefixWriter) Flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.w.Write(p.appendLine(nil, nil))
	return err
}
