//go:build linux

package doctor

// The device tests of "rdmago doctor": on the soft-RoCE VM it finds no
// problem on every kernel, and when a condition is broken for a child
// process (a node it may not open, a low memlock limit, its own network
// namespace) it names the problem and the right fix. Where the advice is
// about registration, the child also registers memory, so that the test
// checks the advice against what the kernel does.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

var abiSummary = regexp.MustCompile(`kernel ABI: (\d+) of (\d+) types compared \((\d+) differ[^)]*\), (\d+) not in the kernel's BTF, (\d+) mismatches; (\d+) enum values compared`)

func TestDeviceDoctor(t *testing.T) {
	testenv.RequireDevice(t)
	var stdout, stderr bytes.Buffer
	status := runDoctor([]string{"-v"}, &stdout, &stderr)
	out := stdout.String()
	var summary []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "kernel ABI type:") {
			summary = append(summary, l)
		}
	}
	t.Logf("rdmago doctor (kernel %s):\n%s", testenv.Kernel(), strings.Join(summary, "\n"))
	if status != 0 || stderr.Len() > 0 {
		t.Errorf("status %d, stderr %q; want 0 and nothing", status, stderr.String())
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "[problem]") || strings.HasPrefix(l, "[not checked]") {
			t.Errorf("unexpected: %s", l)
		}
	}
	m := abiSummary.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no ABI summary in the output")
	}
	compared, _ := strconv.Atoi(m[1])
	enums, _ := strconv.Atoi(m[6])
	t.Logf("kernel %s: ABI check compared %s of %s types (%s differ only by extension), %s not in the kernel's BTF, %s mismatches; %d enum values",
		testenv.Kernel(), m[1], m[2], m[3], m[4], m[5], enums)
	// The Debian kernels carry module BTF: ib_uverbs alone holds over a
	// hundred of the generated structs. Far fewer means the lookup broke.
	if compared < 100 || enums < 100 {
		t.Errorf("only %d types and %d enum values compared", compared, enums)
	}
	if !strings.Contains(out, "[ok]          GID table: "+testenv.DeviceName()+" port 1") {
		t.Errorf("no GID table finding for %s port 1", testenv.DeviceName())
	}
}

// TestDoctorChild is the child process of the broken-condition tests: it
// runs the checks of the host with the device directory and the size to
// register the parent chose, then registers that much memory if asked.
func TestDoctorChild(t *testing.T) {
	if os.Getenv("RDMAGO_DOCTOR_CHILD") != "1" {
		t.Skip("the child process of TestDeviceDoctorBroken")
	}
	env := hostDoctorEnv()
	env.memBytes = 64 << 20
	if d := os.Getenv("RDMAGO_DOCTOR_DEVROOT"); d != "" {
		env.devRoot = d
	}
	fs := runChecks(env)
	writeFindings(os.Stdout, fs)
	if os.Getenv("RDMAGO_DOCTOR_REGISTER") == "1" {
		os.Stdout.WriteString("register: " + registerResult(int(env.memBytes)) + "\n")
	}
	status := 0
	for _, f := range fs {
		if f.Status == statusProblem {
			status = 1
		}
	}
	os.Exit(status)
}

// registerResult registers n bytes on the test device: "ok" or the error.
func registerResult(n int) string {
	ctx, err := uverbs.Open(testenv.DeviceName())
	if err != nil {
		return "open: " + err.Error()
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return "alloc pd: " + err.Error()
	}
	defer pd.Close()
	r, err := mr.New(pd, n, wr.LocalWrite)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return "ENOMEM: " + err.Error()
		}
		return err.Error()
	}
	r.Close()
	return "ok"
}

// childBinary copies the test binary where an unprivileged user can run
// it: the go tool's build directory is private to root.
func childBinary(t *testing.T) string {
	t.Helper()
	dir := publicTempDir(t)
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "rdmago.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// publicTempDir is a temporary directory other users may enter, which
// t.TempDir's is not.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmago-doctor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nobody is the unprivileged user the children run as: without root's
// capabilities, file modes and the memlock limit apply to it.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

type doctorChild struct {
	shell   string // run under /bin/sh -c with this prefix, e.g. "ulimit -l 64"
	cred    *syscall.Credential
	devRoot string
	newNet  bool
}

func runDoctorChild(t *testing.T, bin string, c doctorChild) (string, int) {
	t.Helper()
	args := []string{bin, "-test.run=^TestDoctorChild$"}
	var cmd *exec.Cmd
	if c.shell != "" {
		cmd = exec.Command("/bin/sh", append([]string{"-c", c.shell + ` && exec "$0" "$@"`}, args...)...)
	} else {
		cmd = exec.Command(args[0], args[1:]...)
	}
	cmd.Env = append(os.Environ(), "RDMAGO_DOCTOR_CHILD=1", "RDMAGO_DOCTOR_REGISTER=1", "RDMAGO_DOCTOR_DEVROOT="+c.devRoot)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if c.newNet {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
	}
	out, err := cmd.CombinedOutput()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child (status %d):\n%s", status, out)
	return string(out), status
}

func TestDeviceDoctorBroken(t *testing.T) {
	testenv.RequireDevice(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run children as another user")
	}
	bin := childBinary(t)
	uverbsNode := ""
	nodes, err := uverbsNodes(hostDoctorEnv())
	if err != nil {
		t.Fatal(err)
	}
	for n, ib := range nodes {
		if ib == testenv.DeviceName() {
			uverbsNode = n
		}
	}
	if uverbsNode == "" {
		t.Fatalf("no uverbs node for %s in %v", testenv.DeviceName(), nodes)
	}

	type want struct {
		status   int
		contains []string
		register string // prefix of the registration result
	}
	for _, tc := range []struct {
		name  string
		child func(t *testing.T) doctorChild
		want  want
	}{
		{"memlock soft limit", func(*testing.T) doctorChild {
			return doctorChild{shell: "ulimit -S -l 64", cred: nobody}
		}, want{1, []string{
			"[problem]     memlock: RLIMIT_MEMLOCK is 64 KiB (hard limit unlimited)",
			"ulimit -l unlimited (the hard limit allows it)",
		}, "ENOMEM"}},
		{"memlock hard limit", func(*testing.T) doctorChild {
			return doctorChild{shell: "ulimit -l 64", cred: nobody}
		}, want{1, []string{
			"[problem]     memlock: RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB)",
			"--ulimit memlock=-1",
		}, "ENOMEM"}},
		{"memlock as root", func(*testing.T) doctorChild {
			return doctorChild{shell: "ulimit -l 64"}
		}, want{0, []string{
			"[ok]          memlock: RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB), but this process has CAP_IPC_LOCK",
		}, "ok"}},
		{"unprivileged", func(*testing.T) doctorChild {
			return doctorChild{cred: nobody}
		}, want{0, []string{
			"[ok]          device nodes: /dev/infiniband/" + uverbsNode,
			// The read-only checks run without root; the one that
			// cannot says so.
			"[ok]          kernel ABI: 1",
			"[not checked] netns: cannot read pid 1's netns",
		}, "ok"}},
		{"node mode 000", func(t *testing.T) doctorChild {
			dir := publicTempDir(t)
			for _, n := range []string{uverbsNode, "rdma_cm"} {
				var st unix.Stat_t
				if err := unix.Stat("/dev/infiniband/"+n, &st); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, n)
				if err := unix.Mknod(p, unix.S_IFCHR, int(st.Rdev)); err != nil {
					t.Skipf("cannot make a device node in %s: %v", dir, err)
				}
				if err := os.Chmod(p, 0); err != nil {
					t.Fatal(err)
				}
			}
			return doctorChild{cred: nobody, devRoot: dir}
		}, want{1, []string{
			"(" + testenv.DeviceName() + ") exists but this process may not open it read-write (permission denied; mode 0000",
			"fix: run as root, or make the node read-writable for this user",
		}, "ok"}},
		{"node missing", func(t *testing.T) doctorChild {
			return doctorChild{devRoot: t.TempDir()}
		}, want{1, []string{
			uverbsNode + " (" + testenv.DeviceName() + ") is missing",
			"rdma_cm is missing",
			"--device=/dev/infiniband/rdma_cm",
		}, "ok"}},
		{"no device directory", func(t *testing.T) doctorChild {
			return doctorChild{devRoot: filepath.Join(t.TempDir(), "infiniband")}
		}, want{1, []string{
			"the kernel has 1 uverbs device(s), so this process does not see them",
			"fix: pass the devices into the container",
		}, "ok"}},
		{"own netns", func(*testing.T) doctorChild {
			return doctorChild{newNet: true}
		}, want{0, []string{
			"[info]        netns: this process is in a network namespace of its own",
			"[not checked] GID table: " + testenv.DeviceName() + " port 1: its interface (index",
		}, "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, status := runDoctorChild(t, bin, tc.child(t))
			if status != tc.want.status {
				t.Errorf("status %d, want %d", status, tc.want.status)
			}
			for _, s := range tc.want.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q", s)
				}
			}
			if !strings.Contains(out, "register: "+tc.want.register) {
				t.Errorf("registration: want %q", tc.want.register)
			}
		})
	}
}

// TestNoDeviceDoctor runs in a VM booted without RDMA devices (make
// test-nodevice): doctor names the missing device, and the fix.
func TestNoDeviceDoctor(t *testing.T) {
	testenv.RequireNoDevice(t)
	var stdout, stderr bytes.Buffer
	status := runDoctor(nil, &stdout, &stderr)
	out := stdout.String()
	t.Logf("rdmago doctor (kernel %s):\n%s", testenv.Kernel(), out)
	if status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	for _, s := range []string{
		"[problem]     device nodes: the kernel has no uverbs device",
		"[problem]     devices: no RDMA device with a uverbs interface",
		"modprobe rdma_rxe && rdma link add rxe0 type rxe netdev",
		"[not checked] GID table: no RDMA devices",
		"[ok]          kernel ABI: ",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q", s)
		}
	}
	if n := strings.Count(out, "[problem]"); n != 2 {
		t.Errorf("%d problems, want 2 (the device nodes and the devices)", n)
	}
}
