// Package rdmatest holds the fixtures of the device tests (the tests named
// TestDevice*): the test device opened with a protection domain, pairs of
// queue pairs connected to each other through the device's RoCE v2 GID,
// polling for completions, pairs of rdma_cm IDs connected through a
// listener, and the checks that the kernel is new enough for a behaviour
// or that a test left no kernel object behind.
//
// The fixtures take the test's testing.TB and close what they made when
// the test ends. Those that use the device require it as
// internal/testenv.RequireDevice does: they skip the test on a host
// without one and fail it under the VM runner.
//
// Tests inside package uverbs or cm cannot use it (it imports both).
package rdmatest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/uverbs"
)

// Open opens the test device, closing it when the test ends.
func Open(t testing.TB) *uverbs.Context {
	t.Helper()
	ctx, err := uverbs.Open(testenv.RequireDevice(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Check(t, "close context", ctx.Close()) })
	return ctx
}

// OpenPD opens the test device and allocates a protection domain on it,
// closing both when the test ends.
func OpenPD(t testing.TB) (*uverbs.Context, *uverbs.PD) {
	t.Helper()
	ctx := Open(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Check(t, "close PD", pd.Close()) })
	return ctx, pd
}

// Must fails the test if err is not nil.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Check reports err as a failure of what, and lets the test go on.
func Check(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// KernelRelease returns the running kernel's release, e.g. "6.1.0-57-amd64".
func KernelRelease(t testing.TB) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// KernelAtLeast reports whether the running kernel is major.minor or newer.
// Tests use it only for behaviour measured to differ between kernels.
func KernelAtLeast(t testing.TB, major, minor int) bool {
	t.Helper()
	var ma, mi int
	if _, err := fmt.Sscanf(KernelRelease(t), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", KernelRelease(t), err)
	}
	return ma > major || (ma == major && mi >= minor)
}

// ResLines returns the lines of `rdma res show kind` (pd, cq, qp, mr, srq,
// cm_id) that name this program. The kernel records the thread that created
// each object, whose id is not the process id for a Go program, so the
// match is on the command name (which the kernel truncates to 15 bytes).
func ResLines(kind string) ([]string, error) {
	comm := filepath.Base(os.Args[0])
	if len(comm) > 15 {
		comm = comm[:15]
	}
	pat := " comm " + comm + " "
	b, err := exec.Command("/usr/bin/rdma", "res", "show", kind).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("rdma res show %s: %v: %s", kind, err, b)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line+" ", pat) {
			out = append(out, line)
		}
	}
	return out, nil
}

// hwCounterDir is where device dev's port 1 hw_counters are.
func hwCounterDir(dev string) string {
	return filepath.Join("/sys/class/infiniband", dev, "ports/1/hw_counters")
}

// HWCounter reads one of port 1's hw_counters of device dev (rxe's
// sent_pkts, completer_retry_err, ...).
func HWCounter(dev, name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(hwCounterDir(dev), name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// HWCounters reads all of port 1's hw_counters of device dev, by name; one
// that cannot be read or parsed is left out.
func HWCounters(dev string) (map[string]uint64, error) {
	ents, err := os.ReadDir(hwCounterDir(dev))
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, e := range ents {
		if v, err := HWCounter(dev, e.Name()); err == nil {
			m[e.Name()] = v
		}
	}
	return m, nil
}

// ResCount counts the kernel's objects of a kind (pd, cq, qp, mr) that
// this program made, as rdma res lists them (ResLines).
func ResCount(t testing.TB, kind string) int {
	t.Helper()
	lines, err := ResLines(kind)
	if err != nil {
		t.Fatal(err)
	}
	return len(lines)
}

// LeftBehind returns, one a line, the kernel objects of the kinds that
// this program still holds (see ResLines); a TestMain calls it once the
// tests have run. A kind rdma res cannot list is reported on stderr.
func LeftBehind(kinds ...string) string {
	var out strings.Builder
	for _, kind := range kinds {
		lines, err := ResLines(kind)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			continue
		}
		for _, l := range lines {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// Stdout runs f with os.Stdout going to a pipe, and returns what it wrote
// there: what an example prints, for the tests that run device examples.
func Stdout(t testing.TB, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		got <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	os.Stdout = old
	w.Close()
	return <-got
}
