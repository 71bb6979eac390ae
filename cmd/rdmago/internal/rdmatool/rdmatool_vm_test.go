//go:build linux

package rdmatool

// Device tests: rdmago rdma against iproute2's rdma in the soft-RoCE VM,
// on the same state, output compared field by field.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

var caps = qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}

// objects creates what res show lists: RC and UD QP pairs with their CQs,
// MRs and PDs, an rdma_cm connection and two listeners, and a QP left in
// RESET (no port yet).
func objects(t *testing.T) {
	rdmatest.NewPair(t, qp.RC, caps)
	u := rdmatest.NewPair(t, qp.UD, caps)
	cq, err := u.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8})
	rdmatest.Must(t, err)
	t.Cleanup(func() { rdmatest.Check(t, "close CQ", cq.Close()) })
	q, err := u.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps})
	rdmatest.Must(t, err)
	t.Cleanup(func() { rdmatest.Check(t, "close QP", q.Close()) })
	rdmatest.ConnectCM(t, cm.PSTCP, caps, nil)
	rdmatest.Listen(t, cm.PSUDP)
}

func requireTool(t *testing.T) {
	t.Helper()
	testenv.RequireDevice(t)
	tooltest.RequireCTool(t, cRdma)
}

// TestDeviceRdmaShow compares every show command, in every output mode,
// with objects of each kind in place.
func TestDeviceRdmaShow(t *testing.T) {
	requireTool(t)
	objects(t)
	dev := testenv.DeviceName()
	cmds := [][]string{
		{}, {"help"}, {"-V"}, {"-Version"}, {"--version"}, {"-h"},
		{"dev"}, {"dev", "show"}, {"dev", "list"}, {"dev", "show", dev}, {"dev", "help"},
		{"link"}, {"link", "show"}, {"link", "show", dev + "/1"}, {"link", "list"}, {"link", "help"},
		{"res"}, {"resource", "show"}, {"res", "show", dev}, {"res", "help"},
		{"res", "show", "qp"}, {"res", "show", "cm_id"}, {"res", "show", "cq"}, {"res", "show", "mr"},
		{"res", "show", "pd"}, {"res", "show", "ctx"}, {"res", "s", "q"},
		{"res", "show", "qp", "link", dev}, {"res", "show", "qp", "link", dev + "/1"}, {"res", "show", "qp", "link", dev + "/-"},
		{"res", "show", "qp", "type", "UD"}, {"res", "show", "qp", "type", "RC,UD"}, {"res", "show", "qp", "state", "RESET"},
		{"res", "show", "qp", "lqpn", "1"}, {"res", "show", "qp", "lqpn", "1-18,20"}, {"res", "show", "qp", "rqpn", "17-30"},
		{"res", "show", "qp", "pid", strconvItoa(os.Getpid())}, {"res", "show", "qp", "link", dev + "/1", "type", "GSI"},
		{"res", "show", "cm_id", "ps", "UDP"}, {"res", "show", "cm_id", "state", "LISTEN"}, {"res", "show", "cm_id", "src-addr", tooltest.VMAddr},
		{"res", "show", "cm_id", "lqpn", "1-100"}, {"res", "show", "cm_id", "cm-idn", "0,2"},
		{"res", "show", "cq", "dev", dev}, {"res", "show", "cq", "poll-ctx", "WORKQUEUE"}, {"res", "show", "cq", "cqn", "1-3"}, {"res", "show", "cq", "users", "1"},
		{"res", "show", "mr", "dev", dev}, {"res", "show", "mr", "mrlen", "65536"}, {"res", "show", "mr", "pdn", "2"},
		{"res", "show", "pd", "users", "1"}, {"res", "show", "pd", "ctxn", "0"}, {"res", "show", "ctx", "ctxn", "1-9"},
		{"statistic"}, {"statistic", "show"}, {"stat", "show", "link", dev + "/1"}, {"statistic", "show", "link", dev}, {"statistic", "list"},
		{"system"}, {"system", "show"}, {"system", "show", "netns"}, {"system", "help"}, {"system", "set"},
	}
	for _, args := range cmds {
		for _, opts := range [][]string{nil, {"-j"}} {
			compare(t, append(append([]string(nil), opts...), args...)...)
		}
	}
	// The other output modes, on a command of each kind.
	for _, args := range [][]string{{"dev"}, {"link"}, {"res"}, {"res", "show", "qp"}, {"res", "show", "cm_id"},
		{"res", "show", "cq"}, {"res", "show", "mr"}, {"res", "show", "pd"}, {"res", "show", "ctx"}, {"statistic"}, {"system"},
		{"res", "show", "mr", "pid", "1"}} {
		for _, opts := range [][]string{{"-d"}, {"-j", "-p"}, {"-p"}, {"-jd"}, {"-d", "-d"}} {
			compare(t, append(append([]string(nil), opts...), args...)...)
		}
	}
	writeCaptures(t)
	// Options after the command, as GNU getopt permutes them.
	compare(t, "link", "show", "-j")
	compare(t, "res", "show", "qp", "-d", "-j")
	// The lines list what was made: rdmago's output is not empty.
	if out := runGo("res", "show", "qp").stdout; strings.Count(out, "\n") < 7 || !strings.Contains(out, "state RESET") {
		t.Errorf("res show qp lacks the test's QPs:\n%s", out)
	}
}

func strconvItoa(i int) string { return itoa(i) }

// captured are the commands whose messages writeCaptures keeps for the
// host's unit tests (TestCaptures).
var captured = [][]string{
	{"dev"}, {"-d", "dev"}, {"-j", "-p", "-d", "dev"}, {"link"}, {"-d", "-j", "link"}, {"res"}, {"-j", "res"},
	{"res", "show", "qp"}, {"-j", "-p", "res", "show", "qp"}, {"res", "show", "qp", "type", "RC", "state", "RTS"},
	{"res", "show", "cm_id"}, {"-j", "res", "show", "cm_id"}, {"res", "show", "cq"}, {"-j", "res", "show", "cq"},
	{"res", "show", "mr"}, {"-j", "res", "show", "mr"}, {"res", "show", "pd"}, {"-j", "res", "show", "pd"}, {"res", "show", "ctx"},
	{"statistic"}, {"-p", "statistic"}, {"-j", "statistic"}, {"system"},
	{"foo"}, {"-x"}, {"dev", "show", "nosuch"}, {"-j", "link", "show", "rxe0/9"}, {"res", "show", "qp", "lqpn"},
	{"link", "add", "rxe0", "type", "rxe", "netdev", "lo"}, {"system", "set", "netns", "foo"},
}

// writeCaptures writes, when $RDMAGO_RDMA_CAPTURE names a folder (shared
// writable with the VM), a capture of each of the captured commands:
// rdmago's netlink exchanges and the C tool's output on the same state.
func writeCaptures(t *testing.T) {
	dir := os.Getenv("RDMAGO_RDMA_CAPTURE")
	if dir == "" {
		return
	}
	kernel := strings.SplitN(testenv.Kernel(), ".", 3)
	for i, args := range captured {
		var c capture
		ok := false
		for try := 0; try < 5 && !ok; try++ {
			var g result
			g, c = runRecorded(args)
			cr := runC(t, args...)
			ok = g == cr
			c.Args, c.Stdout, c.Stderr, c.Status = args, cr.stdout, cr.stderr, cr.status
		}
		if !ok {
			t.Errorf("capture of rdma %q: the tools disagree", args)
			continue
		}
		c.Kernel = testenv.Kernel()
		b, err := json.MarshalIndent(c, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s.%s-%02d.json", kernel[0], kernel[1], i)
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeviceRdmaErrors compares bad commands and arguments: messages,
// where they go, and exit statuses.
func TestDeviceRdmaErrors(t *testing.T) {
	requireTool(t)
	dev := testenv.DeviceName()
	for _, args := range [][]string{
		{"foo"}, {"-x", "dev"}, {"-json", "dev"}, {"--nosuch"}, {"--j", "dev"}, {"-b"},
		{"dev", "foo"}, {"dev", "show", "nosuch"}, {"-j", "dev", "show", "nosuch"}, {"dev", "show", dev, "extra"}, {"dev", "show", dev + "/1"},
		{"link", "foo"}, {"link", "show", "nosuch"}, {"link", "show", dev}, {"link", "show", dev + "/9"}, {"link", "show", dev + "/x"},
		{"link", "show", dev + "/1", "extra"}, {"-j", "link", "show", "nosuch/1"},
		{"link", "add"}, {"link", "add", "x"}, {"link", "add", "x", "type"}, {"link", "add", "x", "type", "rxe"},
		{"link", "add", "x", "type", "rxe", "netdev"}, {"link", "add", "x", "foo", "rxe"}, {"link", "add", "0123456789abcdef", "type", "rxe", "netdev", "lo"},
		{"link", "add", "x", "type", "rxe", "netdev", "nosuch0"}, {"link", "add", "x", "type", "nosuch", "netdev", "lo"},
		{"link", "delete"}, {"link", "delete", "nosuch"}, {"-j", "link", "delete", "nosuch"},
		{"res", "foo"}, {"res", "show", "nosuch"}, {"res", "show", "qp", "foo", "1"}, {"res", "show", "qp", "lqpn"},
		{"res", "show", "qp", "lqpn", "1", "rqpn"}, {"res", "show", "qp", "link", "nosuch/1"}, {"res", "show", "qp", "link", dev + "/9"},
		{"res", "show", "cq", "link", dev + "/1"}, {"res", "show", "mr", "dev", "nosuch"}, {"-j", "res", "show", "pd", "dev", "nosuch"},
		{"statistic", "foo"}, {"statistic", "show", "foo"}, {"statistic", "show", "link", "nosuch/1"}, {"statistic", "show", "link", dev + "/2"},
		{"system", "foo"}, {"system", "show", "foo"}, {"system", "set", "foo"}, {"system", "set", "netns"}, {"system", "set", "netns", "foo"},
	} {
		compare(t, args...)
	}
}

// TestDeviceRdmaSystem sets the netns mode with rdmago and reads it with
// both tools, then sets it back.
func TestDeviceRdmaSystem(t *testing.T) {
	requireTool(t)
	t.Cleanup(func() {
		if out, err := exec.Command(cRdma, "system", "set", "netns", "shared").CombinedOutput(); err != nil {
			t.Errorf("restoring the shared netns mode: %v: %s", err, out)
		}
	})
	for _, mode := range []string{"exclusive", "shared"} {
		if r := runGo("system", "set", "netns", mode); r != (result{}) {
			t.Fatalf("rdmago rdma system set netns %s: %+v", mode, r)
		}
		if c := runC(t, "system", "show"); !strings.HasPrefix(c.stdout, "netns "+mode+" ") {
			t.Errorf("after rdmago set %s, rdma system show: %+v", mode, c)
		}
		compare(t, "system", "show")
		compare(t, "-j", "system", "show")
	}
}

// ip runs ip(8), failing the test if it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestDeviceRdmaLink adds and deletes soft-RoCE (and, where the kernel has
// it, siw) links on a dummy netdev, with each tool in turn, and compares
// link show, dev show and the errors of a second add and delete.
func TestDeviceRdmaLink(t *testing.T) {
	requireTool(t)
	ip(t, "link", "add", "rdmatool0", "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "del", "rdmatool0").Run() })
	ip(t, "link", "set", "rdmatool0", "up")
	types := []string{"rxe"}
	if err := exec.Command("modprobe", "siw").Run(); err == nil {
		types = append(types, "siw")
	} else {
		t.Logf("no siw module in kernel %s (modprobe: %v): rxe only", testenv.Kernel(), err)
	}
	for _, typ := range types {
		name := typ + "tool0"
		t.Cleanup(func() { exec.Command(cRdma, "link", "delete", name).Run() })
		for _, adder := range []string{"C", "rdmago"} {
			add := []string{"link", "add", name, "type", typ, "netdev", "rdmatool0"}
			if adder == "C" {
				if r := runC(t, add...); r.status != 0 {
					t.Fatalf("rdma %s: %+v", strings.Join(add, " "), r)
				}
			} else if r := runGo(add...); r != (result{}) {
				t.Fatalf("rdmago rdma %s: %+v", strings.Join(add, " "), r)
			}
			if _, err := os.Stat("/sys/class/infiniband/" + name); err != nil {
				t.Fatalf("%s added %s: %v", adder, name, err)
			}
			for _, args := range [][]string{{"link"}, {"-d", "link"}, {"-j", "link"}, {"link", "show", name + "/1"},
				{"dev"}, {"-d", "dev", "show", name}, {"-j", "-d", "dev"}, {"res", "show", name}, {"statistic", "show", "link", name + "/1"}} {
				compare(t, args...)
			}
			compare(t, add...) // it exists: EEXIST
			del := []string{"link", "delete", name}
			if adder == "C" {
				if r := runGo(del...); r != (result{}) {
					t.Fatalf("rdmago rdma %s: %+v", strings.Join(del, " "), r)
				}
			} else if r := runC(t, del...); r.status != 0 {
				t.Fatalf("rdma %s: %+v", strings.Join(del, " "), r)
			}
			if _, err := os.Stat("/sys/class/infiniband/" + name); err == nil {
				t.Fatalf("%s still there after the delete", name)
			}
			compare(t, "link")
			compare(t, del...) // it is gone
		}
	}
}
