package devinfo

// The device test of "rdmago devinfo": on a host with an RDMA device (the
// soft-RoCE VM of hack/vm), rdma-core's own ibv_devinfo and rdmago's, run
// in-process with the same arguments, must print the same bytes and exit
// with the same status.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
)

const ibvDevinfo = "/usr/bin/ibv_devinfo"

func TestDeviceDevinfoMatchesIbvDevinfo(t *testing.T) {
	vm := os.Getenv("RDMAGO_VM") == "1"
	if _, err := os.Stat("/dev/infiniband"); err != nil {
		if vm {
			t.Fatalf("RDMAGO_VM=1 but there is no RDMA device: %v", err)
		}
		t.Skip("no RDMA device; run under the VM runner")
	}
	if _, err := os.Stat(ibvDevinfo); err != nil {
		if vm {
			t.Fatalf("RDMAGO_VM=1 but rdma-core's ibv_devinfo is missing (install ibverbs-utils): %v", err)
		}
		t.Skipf("no %s to compare with: %v", ibvDevinfo, err)
	}

	// The first device ibv_devinfo lists.
	list := runIbvDevinfo(t, "-l")
	m := regexp.MustCompile(`(?m)^\t(\S+)$`).FindStringSubmatch(list.stdout)
	if list.status != 0 || m == nil {
		if vm {
			t.Fatalf("ibv_devinfo -l finds no device (status %d):\n%s%s", list.status, list.stdout, list.stderr)
		}
		t.Skipf("ibv_devinfo -l finds no device:\n%s%s", list.stdout, list.stderr)
	}
	dev := m[1]
	t.Logf("comparing on device %s", dev)

	for _, args := range [][]string{
		nil,
		{"-v"},
		{"-d", dev},
		{"-d", dev, "-v"},
		{"-i", "1"},
		{"-v", "-i", "1"},
		{"-l"},
		{"--ib-dev=" + dev, "--ib-port=1", "--verbose"},
		{"-d", "rdmago_no_such_device"},
		{"-d", dev, "-i", "200"},
	} {
		want := runIbvDevinfo(t, args...)
		var stdout, stderr bytes.Buffer
		status := runDevinfo(args, &stdout, &stderr)
		got := devinfoResult{stdout.String(), stderr.String(), status}

		if d := diffLines(want.stdout, got.stdout); d != "" {
			t.Errorf("devinfo %q: stdout differs from ibv_devinfo's:\n%s", args, d)
		}
		if got.status != want.status {
			t.Errorf("devinfo %q: exit status %d, ibv_devinfo's is %d", args, got.status, want.status)
		}
		if got.stderr != want.stderr {
			t.Errorf("devinfo %q: stderr %q, ibv_devinfo's is %q", args, got.stderr, want.stderr)
		}
	}
}

// runIbvDevinfo runs rdma-core's ibv_devinfo. Warnings libibverbs itself
// prints on stderr (about its configuration, not the devices) are logged
// and left out of the result.
func runIbvDevinfo(t *testing.T, args ...string) devinfoResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(ibvDevinfo, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	status := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s %q: %v", ibvDevinfo, args, err)
		}
		status = ee.ExitCode()
	}
	var kept strings.Builder
	for _, line := range strings.SplitAfter(stderr.String(), "\n") {
		if strings.HasPrefix(line, "libibverbs: ") {
			t.Logf("%s %q: %s", ibvDevinfo, args, strings.TrimSpace(line))
			continue
		}
		kept.WriteString(line)
	}
	return devinfoResult{stdout.String(), kept.String(), status}
}

// TestNoDeviceDevinfo runs in a VM booted without RDMA devices (make
// test-nodevice): rdmago devinfo must fail exactly as ibv_devinfo does.
func TestNoDeviceDevinfo(t *testing.T) {
	testenv.RequireNoDevice(t)
	for _, args := range [][]string{nil, {"-v"}, {"-l"}, {"-d", "rxe0"}} {
		want := runIbvDevinfo(t, args...)
		var stdout, stderr bytes.Buffer
		status := runDevinfo(args, &stdout, &stderr)
		if d := diffLines(want.stdout, stdout.String()); d != "" {
			t.Errorf("devinfo %q: stdout differs from ibv_devinfo's:\n%s", args, d)
		}
		if status != want.status || stderr.String() != want.stderr {
			t.Errorf("devinfo %q: status %d stderr %q; ibv_devinfo: %d %q", args, status, stderr.String(), want.status, want.stderr)
		}
		t.Logf("devinfo %q: status %d, %q", args, status, stderr.String())
	}
}
