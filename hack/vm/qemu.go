//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// kvmUsable checks that this process can run a KVM guest: the device node
// may exist but be inaccessible (no kvm group), or KVM may refuse to create
// VMs (nested virtualisation off); creating and closing a VM tests both.
// A KVM without kvm_intel or kvm_amd behind it is no use either: kvm_pvm
// (found on cloud machines without nested virtualisation) creates VMs but
// runs only paravirtualised guest kernels, and Debian's fail in it with "KVM
// internal error". runVM still falls back to TCG if KVM fails at run time.
func kvmUsable() error {
	const kvmCreateVM = 0xAE01 // _IO(KVMIO, 0x01)
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	defer unix.Close(fd)
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM) // machine type 0
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	unix.Close(vm)
	if !isDir("/sys/module/kvm_intel") && !isDir("/sys/module/kvm_amd") {
		return fmt.Errorf("/dev/kvm is not hardware KVM (neither kvm_intel nor kvm_amd is loaded)")
	}
	return nil
}

// chooseAccel picks kvm or tcg, and says why when auto could not use KVM.
// mode is auto, kvm or tcg; icount always means tcg, the instruction-counting
// clock exists only there.
func chooseAccel(mode string, icount bool) (accel, why string, err error) {
	switch mode {
	case "", "auto":
		if icount {
			return "tcg", "", nil
		}
		if err := kvmUsable(); err != nil {
			return "tcg", "KVM unusable: " + err.Error(), nil
		}
		return "kvm", "", nil
	case "kvm":
		if icount {
			return "", "", fmt.Errorf("--icount needs --accel tcg")
		}
		if err := kvmUsable(); err != nil {
			return "", "", fmt.Errorf("--accel kvm: %v", err)
		}
		return "kvm", "", nil
	case "tcg":
		return "tcg", "", nil
	}
	return "", "", fmt.Errorf("unknown accelerator %q: want auto, kvm or tcg", mode)
}

// qemuConfig is everything that shapes the QEMU command line.
type qemuConfig struct {
	arch            string // amd64 or arm64
	archRoot        string // a foreign guest's root layer, shared as archroot
	vmlinux, initrd string
	accel           string // kvm or tcg
	icount          bool
	plugin          string // a TCG plugin and its arguments (-plugin), or ""
	smp             int
	mem             string
	ioDir           string
	rw              []share
	interactive     bool // serial console on our terminal (vm shell)
	trace           bool // /init prints the time of each setup stage
	nic             *nic // a virtio-net NIC (vm pair), or nil
}

// nic is a virtio-net NIC whose frames travel over a connected stream
// socket, QEMU's "socket" netdev: each frame is sent as a 4-byte big-endian
// length and the frame. vm pair gives each VM one end of a socketpair(2), so
// the link between them exists before either starts and has no address on
// the host that anything else could connect to.
type nic struct {
	mac  string
	sock *os.File // passed to QEMU as its fd 3
}

// nicFD is the descriptor QEMU sees the NIC's socket as: exec's ExtraFiles
// start at 3.
const nicFD = 3

// kernelCmdline: tsc=reliable keeps the guest on the TSC clocksource (else it
// falls back to HPET, and rxe runs at less than half speed under TCG);
// panic=-1 with QEMU's -no-reboot turns a panic into QEMU exiting; nokaslr
// and mitigations=off cost nothing here and save boot and run time.
const kernelCmdline = "console=ttyS0 quiet panic=-1 tsc=reliable mitigations=off nokaslr random.trust_cpu=on"

// arm64KernelCmdline is kernelCmdline for -M virt: its console is a PL011.
const arm64KernelCmdline = "console=ttyAMA0 quiet panic=-1 mitigations=off nokaslr random.trust_cpu=on"

// qemuBinary is the system emulator of the guest's architecture.
func (c qemuConfig) qemuBinary() string {
	if c.arch == "arm64" {
		return "qemu-system-aarch64"
	}
	return "qemu-system-x86_64"
}

func (c qemuConfig) args() []string {
	if c.arch == "arm64" {
		return c.arm64Args()
	}
	cmdline := kernelCmdline
	if c.trace {
		cmdline += " rdmago.trace"
	}
	a := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "q35",
		"-m", c.mem,
		"-kernel", c.vmlinux,
		"-initrd", c.initrd,
		"-append", cmdline,
	}
	switch {
	case c.accel == "kvm":
		// -arch-capabilities: a KVM inside another hypervisor may refuse the
		// IA32_ARCH_CAPABILITIES value QEMU copies from the host, and QEMU
		// then aborts ("failed to set MSR 0x10a", seen on this project's
		// development machines). The MSR only tells the guest which CPU bugs
		// it need not mitigate; with mitigations=off that is moot.
		a = append(a, "-accel", "kvm", "-cpu", "host,-arch-capabilities", "-smp", fmt.Sprint(c.smp))
	case c.icount:
		// One vCPU: with two, the guest hangs bringing up the second one.
		a = append(a, "-accel", "tcg", "-cpu", "max,-erms", "-smp", "1", "-icount", "shift=0,sleep=off")
	default:
		// -erms: with ERMS the guest copies with rep movsb, which TCG
		// emulates slowly (64 KiB RDMA writes: 49 vs 75 MB/s).
		a = append(a, "-accel", "tcg", "-cpu", "max,-erms", "-smp", fmt.Sprint(c.smp))
	}
	if c.plugin != "" && c.accel == "tcg" {
		a = append(a, "-plugin", c.plugin)
	}
	return append(a, c.devices()...)
}

// devices are the guest's console, 9p shares and NIC, the same on both
// machines: virtio over PCI(e).
func (c qemuConfig) devices() []string {
	// signal=off: Ctrl-C on an interactive console goes to the guest; for
	// vm run we own the signals and stop QEMU ourselves.
	a := []string{"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"}
	a = append(a, fsShare("hostroot", "/", true)...)
	if c.archRoot != "" {
		a = append(a, fsShare("archroot", c.archRoot, true)...)
	}
	a = append(a, fsShare("rdmagoio", c.ioDir, false)...)
	for _, s := range c.rw {
		a = append(a, fsShare(s.tag, s.path, false)...)
	}
	if c.nic != nil {
		// romfile=: the PXE option ROM is of no use with -kernel, and
		// Debian ships it in a separate package (ipxe-qemu).
		a = append(a, "-netdev", fmt.Sprintf("socket,id=n0,fd=%d", nicFD),
			"-device", "virtio-net-pci,netdev=n0,romfile=,mac="+c.nic.mac)
	}
	return a
}

// arm64Args is the command line of an arm64 guest: the virt machine under
// TCG (no KVM on an x86 host), its PCIe bus carrying the same virtio
// devices as q35's.
func (c qemuConfig) arm64Args() []string {
	cmdline := arm64KernelCmdline
	if c.trace {
		cmdline += " rdmago.trace"
	}
	smp := c.smp
	if c.icount {
		smp = 1
	}
	// pauth-impdef: QEMU's pointer authentication by the architected
	// algorithm (QARMA) costs TCG a lot per function call; the
	// implementation-defined one is cheap and the guest cannot tell.
	a := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "virt", "-accel", "tcg", "-cpu", "max,pauth-impdef=on", "-smp", fmt.Sprint(smp),
		"-m", c.mem,
		"-kernel", c.vmlinux,
		"-initrd", c.initrd,
		"-append", cmdline,
	}
	if c.icount {
		a = append(a, "-icount", "shift=0,sleep=off")
	}
	return append(a, c.devices()...)
}

// fsShare exports a host folder over virtio-9p. multidevs=remap gives files
// from different host file systems distinct inode numbers in the guest
// (the root share spans several mounts).
func fsShare(tag, path string, readonly bool) []string {
	opts := fmt.Sprintf("local,id=%s,path=%s,security_model=none,multidevs=remap", tag, qemuEscape(path))
	if readonly {
		opts += ",readonly=on"
	}
	return []string{"-fsdev", opts, "-device", "virtio-9p-pci,fsdev=" + tag + ",mount_tag=" + tag}
}

// qemuEscape escapes commas, QEMU's option separator, by doubling them.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// qemuProc is a running QEMU whose serial console we read.
type qemuProc struct {
	cmd     *exec.Cmd
	console *consoleLog
	stderr  lockedBuffer  // QEMU's own complaints
	done    chan struct{} // closed when QEMU has exited
	err     error         // Wait's result, valid after done
}

// startQEMU starts QEMU with its console copied into a consoleLog (and to
// echo, if not nil). QEMU gets its own process group, so that a Ctrl-C meant
// for go test reaches us, and we stop QEMU in order; Pdeathsig takes it down
// if we die without that chance (SIGKILL from go test's timeout). The caller
// must hold its OS thread locked: Pdeathsig fires when the creating thread
// exits, not the process.
func startQEMU(c qemuConfig, echo io.Writer) (*qemuProc, error) {
	q := &qemuProc{console: newConsoleLog(60, echo), done: make(chan struct{})}
	q.cmd = exec.Command(c.qemuBinary(), c.args()...)
	q.cmd.Stderr = &q.stderr
	q.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if c.nic != nil {
		q.cmd.ExtraFiles = []*os.File{c.nic.sock}
	}
	var stdout io.ReadCloser
	if c.interactive {
		q.cmd.Stdin, q.cmd.Stdout, q.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	} else {
		q.cmd.SysProcAttr.Setpgid = true
		var err error
		if stdout, err = q.cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	if err := q.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w (install it: vm deps)", c.qemuBinary(), err)
	}
	copied := make(chan struct{})
	if stdout != nil {
		go func() {
			q.console.readFrom(stdout)
			close(copied)
		}()
	} else {
		close(copied)
	}
	go func() {
		<-copied // Wait closes the pipe; read everything first
		q.err = q.cmd.Wait()
		close(q.done)
	}()
	return q, nil
}

// Kill stops QEMU, if it still runs, and waits for it.
func (q *qemuProc) Kill() {
	select {
	case <-q.done:
		return
	default:
	}
	q.cmd.Process.Kill()
	<-q.done
}

// consoleLog keeps the last lines of the guest's serial console and notes
// the lines that explain a failure.
type consoleLog struct {
	mu    sync.Mutex
	lines []string
	max   int
	echo  io.Writer
	count int    // lines seen
	cause string // first "vm-init: error:" message or kernel panic line
}

func newConsoleLog(max int, echo io.Writer) *consoleLog {
	return &consoleLog{max: max, echo: echo}
}

func (l *consoleLog) readFrom(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			l.add(strings.TrimRight(line, "\r\n"))
		}
		if err != nil {
			return
		}
	}
}

func (l *consoleLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.echo != nil {
		fmt.Fprintln(l.echo, "console: "+line)
	}
	if len(l.lines) == l.max {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, line)
	l.count++
	if l.cause == "" {
		if _, msg, ok := strings.Cut(line, "vm-init: error: "); ok {
			l.cause = "guest setup failed: " + msg
		} else if i := strings.Index(line, "Kernel panic"); i >= 0 {
			l.cause = "guest " + line[i:]
		}
	}
}

// Lines returns how many lines the console has shown.
func (l *consoleLog) Lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// Cause returns the failure the console explains, or "".
func (l *consoleLog) Cause() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Tail returns the kept lines.
func (l *consoleLog) Tail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// lockedBuffer is a bytes.Buffer safe for exec's copying goroutine and ours.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
