package devices

// Device tests: rdmago's devices and asyncwatch against rdma-core's
// ibv_devices and ibv_asyncwatch in the soft-RoCE VM, byte for byte but for
// what differs between any two processes (the async event descriptor's
// number).

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

func TestDeviceDevices(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, "/usr/bin/ibv_devices")
	out, err := exec.Command("/usr/bin/ibv_devices").Output()
	if err != nil {
		t.Fatal(err)
	}
	o, e, st := tooltest.Run(Commands(), "ibv_devices")
	if st != 0 || e != "" || o != string(out) {
		t.Errorf("rdmago ibv_devices: status %d, stderr %q, stdout:\n%s\nibv_devices:\n%s", st, e, o, out)
	}
	if !strings.Contains(o, testenv.DeviceName()) {
		t.Errorf("the list lacks %s:\n%s", testenv.DeviceName(), o)
	}
}

// portState reads the device's port 1 state from sysfs ("4: ACTIVE").
func portState(t *testing.T) string {
	b, err := os.ReadFile("/sys/class/infiniband/" + testenv.DeviceName() + "/ports/1/state")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// netdev is the network device under the RDMA device (rxe0 on dummy0).
func netdev(t *testing.T) string {
	ents, err := os.ReadDir("/sys/class/infiniband/" + testenv.DeviceName() + "/device/net")
	if err == nil && len(ents) == 1 {
		return ents[0].Name()
	}
	b, err := os.ReadFile("/sys/class/infiniband/" + testenv.DeviceName() + "/parent")
	if err != nil {
		t.Fatalf("no netdev under %s: %v", testenv.DeviceName(), err)
	}
	return strings.TrimSpace(string(b))
}

var asyncFDRE = regexp.MustCompile(`async event FD \d+`)

// TestDeviceAsyncwatch runs ibv_asyncwatch and rdmago's side by side while
// the link under the device goes down and up: both print the header and
// the same PORT_ERR and PORT_ACTIVE events. Errors (an unknown device,
// bad options) are printed and exited as the C program does.
func TestDeviceAsyncwatch(t *testing.T) {
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, "/usr/bin/ibv_asyncwatch")
	dev, link := testenv.DeviceName(), netdev(t)
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.RunTimeout)
	defer cancel()
	procs := []*tooltest.Proc{
		tooltest.Start(t, ctx, "C", []string{"/usr/bin/ibv_asyncwatch", "-d", dev}),
		tooltest.Start(t, ctx, "rdmago", []string{"rdmago", "ibv_asyncwatch", "-d", dev}),
	}
	waitOutput := func(what string, ok func(p *tooltest.Proc) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			all := true
			for _, p := range procs {
				all = all && ok(p)
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				for _, p := range procs {
					t.Logf("%s: %q %q", p.Label, p.Stdout.String(), p.Stderr.String())
				}
				t.Fatalf("no %s after 30 s", what)
			}
		}
	}
	waitOutput("header", func(p *tooltest.Proc) bool { return strings.Contains(p.Stdout.String(), "async event FD") })
	ip := func(state string) {
		if out, err := exec.Command("ip", "link", "set", link, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v %s", link, state, err, out)
		}
	}
	ip("down")
	waitOutput("PORT_ERR", func(p *tooltest.Proc) bool { return strings.Contains(p.Stdout.String(), "PORT_ERR") })
	ip("up")
	waitOutput("PORT_ACTIVE", func(p *tooltest.Proc) bool { return strings.Contains(p.Stdout.String(), "PORT_ACTIVE") })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(portState(t), "ACTIVE"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("port 1 of %s is %q 30 s after %s came up", dev, portState(t), link)
		}
	}
	for _, p := range procs {
		p.Signal(syscall.SIGINT)
	}
	var outs [2]string
	for i, p := range procs {
		p.Wait()
		outs[i] = asyncFDRE.ReplaceAllString(p.Stdout.String(), "async event FD N")
	}
	if outs[0] != outs[1] {
		t.Errorf("outputs differ:\nibv_asyncwatch:\n%s\nrdmago:\n%s", outs[0], outs[1])
	}
	want := dev + ": async event FD N\n  event_type IBV_EVENT_PORT_ERR (10), port 1\n  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n"
	if outs[1] != want {
		t.Errorf("rdmago printed:\n%s\nwant:\n%s", outs[1], want)
	}

	// Errors, with the C program's words and statuses.
	for _, args := range [][]string{{"-d", "rdmago_no_such_device"}, {"-x"}, {"--ib-dev"}} {
		compareC(t, append([]string{"ibv_asyncwatch"}, args...))
	}
}

// TestNoDeviceDevices runs in a VM booted without RDMA devices (make
// test-nodevice): both tools fail, or list nothing, as the C programs do.
func TestNoDeviceDevices(t *testing.T) {
	testenv.RequireNoDevice(t)
	for _, argv := range [][]string{{"ibv_devices"}, {"ibv_asyncwatch"}, {"ibv_asyncwatch", "-d", "rxe0"}} {
		tooltest.RequireCTool(t, "/usr/bin/"+argv[0])
		compareC(t, argv)
	}
}

// compareC runs the C tool argv[0] from /usr/bin and rdmago's command of
// that name with the same arguments, and compares what they print (the C
// program's path in its messages read as its name) and their statuses.
func compareC(t *testing.T, argv []string) {
	t.Helper()
	path := "/usr/bin/" + argv[0]
	c := exec.Command(path, argv[1:]...)
	var co, ce strings.Builder
	c.Stdout, c.Stderr = &co, &ce
	cst := 0
	if err := c.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s: %v", path, err)
		}
		cst = ee.ExitCode()
	}
	o, e, st := tooltest.Run(Commands(), argv...)
	norm := func(s string) string { return strings.ReplaceAll(s, path, argv[0]) }
	if st != cst || o != norm(co.String()) || e != norm(ce.String()) {
		t.Errorf("%q: C status %d %q %q; rdmago %d %q %q", argv, cst, co.String(), ce.String(), st, o, e)
	}
}
