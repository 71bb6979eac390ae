//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSplitPairArgs(t *testing.T) {
	tests := []struct {
		args    []string
		a, b    []string
		wantErr string
	}{
		{args: []string{"rping", "-s", ":::", "sh", "-c", "sleep 2; rping -c"},
			a: []string{"rping", "-s"}, b: []string{"sh", "-c", "sleep 2; rping -c"}},
		{args: []string{"x", ":::", "y", ":::", "z"}, a: []string{"x"}, b: []string{"y", ":::", "z"}},
		{args: []string{"sh", "-c", "echo :::", ":::", "true"}, a: []string{"sh", "-c", "echo :::"}, b: []string{"true"}},
		{args: nil, wantErr: "no commands"},
		{args: []string{"rping", "-s"}, wantErr: `no ":::"`},
		{args: []string{":::", "true"}, wantErr: "no command for VM a"},
		{args: []string{"true", ":::"}, wantErr: "no command for VM b"},
	}
	for _, tt := range tests {
		got, err := splitPairArgs(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("splitPairArgs(%q): error %v, want one containing %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got[0], tt.a) || !slices.Equal(got[1], tt.b) {
			t.Errorf("splitPairArgs(%q) = %q, %v; want %q, %q", tt.args, got, err, tt.a, tt.b)
		}
	}
}

func TestPrefixWriter(t *testing.T) {
	var out strings.Builder
	p := &prefixWriter{w: &out, prefix: "[a] "}
	for _, chunk := range []string{"one\ntw", "o\n", "", "\n", "three", " and more\nfour"} {
		if n, err := p.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if want := "[a] one\n[a] two\n[a] \n[a] three and more\n"; out.String() != want {
		t.Errorf("before Flush: %q, want %q", out.String(), want)
	}
	p.Flush()
	p.Flush() // nothing left: writes nothing
	if want := "[a] one\n[a] two\n[a] \n[a] three and more\n[a] four\n"; out.String() != want {
		t.Errorf("after Flush: %q, want %q", out.String(), want)
	}
}

func TestPrefixWriterLongLine(t *testing.T) {
	var out strings.Builder
	p := &prefixWriter{w: &out, prefix: "[b] "}
	long := strings.Repeat("x", maxPartialLine)
	p.Write([]byte(long + "y"))
	if want := "[b] " + long + "y\n"; out.String() != want {
		t.Errorf("a line of %d bytes without its end was not written out whole (got %d bytes)", len(long)+1, out.Len())
	}
	p.Write([]byte("z\n"))
	if !strings.HasSuffix(out.String(), "\n[b] z\n") {
		t.Errorf("after the long line: %q", out.String()[len(long):])
	}
}

func TestPairSummary(t *testing.T) {
	rs := [2]pairResult{
		{stopped: true, argv0: "/usr/bin/rping"},
		{code: 3, argv0: "/bin/sh"},
	}
	if got, want := pairSummary(1, rs), "[b] exit status 3 (/bin/sh); [a] stopped 3s after [b] failed"; got != want {
		t.Errorf("pairSummary = %q, want %q", got, want)
	}
	rs = [2]pairResult{
		{code: exitTimeout, cause: "timed out after 8s running /usr/bin/rping"},
		{code: 0, argv0: "/bin/true"},
	}
	if got, want := pairSummary(0, rs), "[a] timed out after 8s running /usr/bin/rping; [b] exit status 0 (/bin/true)"; got != want {
		t.Errorf("pairSummary = %q, want %q", got, want)
	}
}

func TestPairEnv(t *testing.T) {
	if got, want := pairEnv(0), []string{"RDMAGO_PAIR=a", "RDMAGO_LOCAL_IP=10.0.5.1", "RDMAGO_PEER_IP=10.0.5.2"}; !slices.Equal(got, want) {
		t.Errorf("pairEnv(0) = %q, want %q", got, want)
	}
	if got, want := pairEnv(1), []string{"RDMAGO_PAIR=b", "RDMAGO_LOCAL_IP=10.0.5.2", "RDMAGO_PEER_IP=10.0.5.1"}; !slices.Equal(got, want) {
		t.Errorf("pairEnv(1) = %q, want %q", got, want)
	}
	// The pair's variables win over --env and the host's.
	env, err := guestEnv([]string{"RDMAGO_PAIR=host"}, append([]string{"RDMAGO_PEER_IP=1.2.3.4"}, pairEnv(1)...), "6.1.0-57-amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"RDMAGO_PAIR=b", "RDMAGO_PEER_IP=10.0.5.1", "RDMAGO_VM=1", "RDMAGO_KERNEL=6.1.0-57-amd64"} {
		if !slices.Contains(env, kv) {
			t.Errorf("guestEnv: %q missing from %q", kv, env)
		}
	}
}

func TestRoceGID(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.2.15": "0000:0000:0000:0000:0000:ffff:0a00:020f",
		"10.0.5.1":  "0000:0000:0000:0000:0000:ffff:0a00:0501",
		"10.0.5.2":  "0000:0000:0000:0000:0000:ffff:0a00:0502",
	} {
		if got := roceGID(netip.MustParseAddr(addr)); got != want {
			t.Errorf("roceGID(%s) = %s, want %s", addr, got, want)
		}
	}
}

func TestWriteRequestNet(t *testing.T) {
	for _, tt := range []struct {
		net  guestNet
		want []string
	}{
		{soloNet, []string{"VM_MAC=''", "VM_ADDR='10.0.2.15/24'", "VM_GID='0000:0000:0000:0000:0000:ffff:0a00:020f'"}},
		{guestNet{mac: pairMACs[1], addr: pairAddrs[1]},
			[]string{"VM_MAC='52:54:00:00:00:0b'", "VM_ADDR='10.0.5.2/24'", "VM_GID='0000:0000:0000:0000:0000:ffff:0a00:0502'"}},
	} {
		dir := t.TempDir()
		req := guestRequest{argv: []string{"true"}, dir: "/", rdma: true, net: tt.net}
		if err := writeRequest(dir, req); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "config.sh"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for _, w := range tt.want {
			if !slices.Contains(lines, w) {
				t.Errorf("config.sh lacks the line %s:\n%s", w, data)
			}
		}
	}
}

func TestResetIODir(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"cmd.sh", "config.sh", "owner", "ready", "go", "listening", "started", "stdout", "exit"} {
		os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644)
	}
	if err := resetIODir(dir); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"cmd.sh", "config.sh", "owner"}; !reflect.DeepEqual(left, want) {
		t.Errorf("after resetIODir: %q, want %q", left, want)
	}
}

// TestPairStart: neither command starts until both guests are ready, and
// then both do; with afterListen, b waits for a's listener, a's end, or the
// limit.
func TestPairStart(t *testing.T) {
	newPair := func() [2]*session {
		var ss [2]*session
		for i := range ss {
			ss[i] = &session{ioDir: t.TempDir(), name: pairNames[i]}
		}
		return ss
	}
	put := func(s *session, name, data string) {
		if err := os.WriteFile(filepath.Join(s.ioDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goes := func(ss [2]*session) (got [2]bool) {
		for i, s := range ss {
			_, err := os.Stat(filepath.Join(s.ioDir, "go"))
			got[i] = err == nil
		}
		return got
	}
	none, aOnly, both := [2]bool{}, [2]bool{true, false}, [2]bool{true, true}

	ss := newPair()
	p := &pairStart{listenLimit: time.Hour}
	check := func(step string, aDone, wantDone bool, want [2]bool) {
		t.Helper()
		if done := p.step(ss, aDone); done != wantDone || goes(ss) != want {
			t.Fatalf("%s: step = %v with go files %v, want %v with %v", step, done, goes(ss), wantDone, want)
		}
	}
	check("no guest ready", false, false, none)
	// "ready" exists but is empty while the guest writes it: not yet.
	put(ss[1], "ready", "")
	check("b's ready file empty", false, false, none)
	put(ss[1], "ready", "3.10 2.90\n")
	check("only b ready", false, false, none)
	put(ss[0], "ready", "4.20 4.00\n")
	check("both ready", false, true, both)

	// afterListen: a starts with both ready, then b on a's listener, on
	// a's end, or at the limit.
	readyPair := func() {
		t.Helper()
		ss = newPair()
		p = &pairStart{afterListen: true, listenLimit: time.Hour}
		put(ss[0], "ready", "1 1\n")
		put(ss[1], "ready", "1 1\n")
		check("both ready", false, false, aOnly)
	}
	readyPair()
	check("listen: a has no listener yet", false, false, aOnly)
	put(ss[0], "listening", "2 2\n")
	check("listen: a listens", false, true, both)
	readyPair()
	check("end: a ended", true, true, both)
	// The limit's case moves a's start back rather than waiting out a
	// short limit: with a 1 ms limit, a step slowed past it (in a CI run's
	// VM) released b together with a.
	readyPair()
	p.aStart = p.aStart.Add(-2 * p.listenLimit)
	check("limit: past it", false, true, both)
}

func TestWriteRequestWaitGo(t *testing.T) {
	for _, waitGo := range []bool{false, true} {
		dir := t.TempDir()
		if err := writeRequest(dir, guestRequest{argv: []string{"true"}, dir: "/", waitGo: waitGo}); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "config.sh"))
		want := fmt.Sprintf("VM_WAITGO=%d", b2i(waitGo))
		if !slices.Contains(strings.Split(string(data), "\n"), want) {
			t.Errorf("waitGo %v: config.sh lacks %s:\n%s", waitGo, want, data)
		}
	}
}

func TestQEMUArgsNIC(t *testing.T) {
	c := qemuConfig{vmlinux: "/k", initrd: "/i", accel: "tcg", smp: 1, mem: "2G", ioDir: "/io"}
	if a := strings.Join(c.args(), " "); strings.Contains(a, "-netdev") {
		t.Errorf("a VM without a NIC got one: %s", a)
	}
	c.nic = &nic{mac: pairMACs[0]}
	a := c.args()
	i := slices.Index(a, "-netdev")
	if i < 0 || i+3 >= len(a) {
		t.Fatalf("no -netdev in %q", a)
	}
	if got, want := a[i:i+4], []string{"-netdev", "socket,id=n0,fd=3", "-device", "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:00:00:0a"}; !slices.Equal(got, want) {
		t.Errorf("NIC arguments %q, want %q", got, want)
	}
}
