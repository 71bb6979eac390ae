//go:build linux

package doctor

// Host tests of "rdmago doctor": each check's logic against a fake /sys,
// /dev and /proc in a temporary directory and fake kernel calls, and the
// report's format.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// fakeEnv is a doctorEnv over a temporary directory: a healthy host with
// rxe0 on uverbs0, unless a test changes it.
func fakeEnv(t *testing.T) *doctorEnv {
	t.Helper()
	root := t.TempDir()
	env := &doctorEnv{
		sysRoot:  filepath.Join(root, "sys"),
		devRoot:  filepath.Join(root, "dev", "infiniband"),
		procRoot: filepath.Join(root, "proc"),
		memBytes: 64 << 20,
		openRW:   func(string) error { return nil },
		memlock:  func() (uint64, uint64, error) { return unlimitedRlimit, unlimitedRlimit, nil },
		devices: func() ([]uverbs.Device, error) {
			return []uverbs.Device{{Name: "rxe0", Driver: "rxe", DevPath: "/dev/infiniband/uverbs0"}}, nil
		},
		netnsMode: func() (bool, error) { return true, nil },
		gidTable: func(uverbs.Device) ([]uverbs.GIDEntry, map[uint32]uverbs.LinkLayer, error) {
			return []uverbs.GIDEntry{
				{GID: gid("fe80::1"), Port: 1, Type: uverbs.GIDTypeRoCEv2, NetdevIndex: 2},
				{GID: gid("::ffff:10.0.0.1"), Port: 1, Type: uverbs.GIDTypeRoCEv2, NetdevIndex: 2},
			}, map[uint32]uverbs.LinkLayer{1: uverbs.LinkLayerEthernet}, nil
		},
		ifaceAddrs: func(index int) (string, []string, error) {
			if index != 2 {
				return "", nil, errNoIface
			}
			return "eth0", []string{"10.0.0.1", "fe80::1"}, nil
		},
	}
	write(t, filepath.Join(env.sysRoot, "class/infiniband_verbs/uverbs0/ibdev"), "rxe0\n")
	write(t, filepath.Join(env.devRoot, "uverbs0"), "")
	write(t, filepath.Join(env.devRoot, "rdma_cm"), "")
	for _, m := range []string{"ib_core", "ib_uverbs", "rdma_cm", "rdma_ucm", "rdma_rxe"} {
		mkdir(t, filepath.Join(env.sysRoot, "module", m))
	}
	write(t, filepath.Join(env.procRoot, "self/status"), "Name:\tx\nCapEff:\t0000000000000000\n")
	write(t, filepath.Join(env.procRoot, "2/comm"), "kthreadd\n")
	mkdir(t, filepath.Join(env.procRoot, "self/ns"))
	mkdir(t, filepath.Join(env.procRoot, "1/ns"))
	symlink(t, "net:[4026531840]", filepath.Join(env.procRoot, "self/ns/net"))
	symlink(t, "net:[4026531840]", filepath.Join(env.procRoot, "1/ns/net"))
	return env
}

func gid(s string) qp.GID { return qp.GID(netip.MustParseAddr(s).As16()) }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func write(t *testing.T, path, s string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

func wantFinding(t *testing.T, fs []finding, st status, text, fix string) {
	t.Helper()
	for _, f := range fs {
		if f.Status == st && strings.Contains(f.Text, text) && strings.Contains(f.Fix, fix) {
			return
		}
	}
	t.Errorf("no %s finding with %q and fix %q in:\n%s", st, text, fix, report(fs))
}

func report(fs []finding) string {
	var b bytes.Buffer
	writeFindings(&b, fs)
	return b.String()
}

func TestDoctorHealthyHost(t *testing.T) {
	env := fakeEnv(t)
	// No kernel BTF in the fake /sys: the ABI check says it could not run.
	fs := runChecks(env)
	for _, f := range fs {
		if f.Status == statusProblem {
			t.Errorf("unexpected problem: %+v", f)
		}
	}
	wantFinding(t, fs, statusNotChecked, "the kernel has no BTF", "")
	wantFinding(t, fs, statusOK, "eth0): a RoCE v2 GID for each of its 2 addresses", "")
	wantFinding(t, fs, statusOK, "this process is in the initial network namespace", "")
}

func TestDoctorDeviceNodes(t *testing.T) {
	t.Run("no /dev/infiniband", func(t *testing.T) {
		env := fakeEnv(t)
		os.RemoveAll(env.devRoot)
		fs := checkDeviceNodes(env)
		wantFinding(t, fs, statusProblem, "the kernel has 1 uverbs device(s), so this process does not see them", "--device=/dev/infiniband/rdma_cm")
	})
	t.Run("no device in the kernel", func(t *testing.T) {
		env := fakeEnv(t)
		os.RemoveAll(env.devRoot)
		os.RemoveAll(filepath.Join(env.sysRoot, "class/infiniband_verbs"))
		fs := checkDeviceNodes(env)
		wantFinding(t, fs, statusProblem, "no "+env.devRoot, fixNoKernelDevice)
	})
	t.Run("node missing", func(t *testing.T) {
		env := fakeEnv(t)
		os.Remove(filepath.Join(env.devRoot, "uverbs0"))
		wantFinding(t, checkDeviceNodes(env), statusProblem, "uverbs0 (rxe0) is missing", "--device")
	})
	t.Run("rdma_cm missing, rdma_ucm not loaded", func(t *testing.T) {
		env := fakeEnv(t)
		os.Remove(filepath.Join(env.devRoot, "rdma_cm"))
		wantFinding(t, checkDeviceNodes(env), statusProblem, "the kernel has no rdma_cm device either", "modprobe rdma_ucm")
	})
	for _, tc := range []struct {
		err       error
		text, fix string
	}{
		{unix.EACCES, "may not open it read-write (permission denied", "run as root"},
		{unix.EPERM, "the container's device cgroup denies it", "--device"},
		{unix.ENXIO, "no device is behind it", "stale"},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			env := fakeEnv(t)
			env.openRW = func(p string) error {
				if strings.HasSuffix(p, "uverbs0") {
					return &os.PathError{Op: "open", Path: p, Err: tc.err}
				}
				return nil
			}
			fs := checkDeviceNodes(env)
			wantFinding(t, fs, statusProblem, "uverbs0 (rxe0) exists but", tc.fix)
			wantFinding(t, fs, statusProblem, tc.text, "")
			wantFinding(t, fs, statusOK, "rdma_cm opens read-write", "")
		})
	}
}

func TestDoctorMemlock(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, max  uint64
		capEff    string
		st        status
		text, fix string
	}{
		{"unlimited", unlimitedRlimit, unlimitedRlimit, "0", statusOK, "RLIMIT_MEMLOCK is unlimited", ""},
		{"enough", 1 << 30, 1 << 30, "0", statusOK, "RLIMIT_MEMLOCK is 1 GiB (hard limit 1 GiB); registering 64 MiB", ""},
		{"CAP_IPC_LOCK", 64 << 10, 64 << 10, "4000", statusOK, "but this process has CAP_IPC_LOCK", ""},
		{"soft limit", 64 << 10, unlimitedRlimit, "0", statusProblem, "64 KiB (hard limit unlimited)", "ulimit -l unlimited (the hard limit allows it)"},
		{"hard limit", 8 << 20, 8 << 20, "0", statusProblem, "8 MiB (hard limit 8 MiB)", "--ulimit memlock=-1"},
		{"exactly the size is a page short", 64 << 20, 64 << 20, "0", statusProblem, "64 MiB (hard limit 64 MiB)", "--ulimit memlock=-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fakeEnv(t)
			env.memlock = func() (uint64, uint64, error) { return tc.cur, tc.max, nil }
			write(t, filepath.Join(env.procRoot, "self/status"), "CapEff:\t"+tc.capEff+"\n")
			fs := checkMemlock(env)
			if len(fs) != 1 {
				t.Fatalf("%d findings", len(fs))
			}
			wantFinding(t, fs, tc.st, tc.text, tc.fix)
		})
	}
	env := fakeEnv(t)
	env.memlock = func() (uint64, uint64, error) { return 0, 0, errors.New("boom") }
	wantFinding(t, checkMemlock(env), statusNotChecked, "cannot read RLIMIT_MEMLOCK: boom", "")
}

func TestDoctorModules(t *testing.T) {
	env := fakeEnv(t)
	os.RemoveAll(filepath.Join(env.sysRoot, "module/rdma_ucm"))
	os.RemoveAll(filepath.Join(env.sysRoot, "module/ib_uverbs"))
	mkdir(t, filepath.Join(env.sysRoot, "class/infiniband_verbs"))
	fs := checkModules(env)
	wantFinding(t, fs, statusProblem, "not loaded (/dev/infiniband/rdma_cm)", "modprobe rdma_ucm")
	wantFinding(t, fs, statusOK, "built into the kernel (the verbs", "")
	wantFinding(t, fs, statusOK, "rxe0 (rxe, uverbs0); provider modules loaded: rdma_rxe", "")

	env.devices = func() ([]uverbs.Device, error) { return nil, uverbs.ErrNoDevice }
	wantFinding(t, checkModules(env), statusProblem, "no RDMA device with a uverbs interface (provider modules loaded: rdma_rxe)", "rdma link add rxe0 type rxe")
	env.devices = func() ([]uverbs.Device, error) { return nil, unix.EIO }
	wantFinding(t, checkModules(env), statusNotChecked, "cannot list the RDMA devices", "")
}

func TestDoctorNetns(t *testing.T) {
	env := fakeEnv(t)
	wantFinding(t, checkNetns(env), statusOK, "shared: every network namespace", "")

	os.Remove(filepath.Join(env.procRoot, "self/ns/net"))
	symlink(t, "net:[4026532157]", filepath.Join(env.procRoot, "self/ns/net"))
	env.netnsMode = func() (bool, error) { return false, nil }
	env.devices = func() ([]uverbs.Device, error) { return nil, nil }
	fs := checkNetns(env)
	wantFinding(t, fs, statusInfo, "network namespace of its own (net:[4026532157])", "")
	wantFinding(t, fs, statusProblem, "exclusive mode and no device belongs", "rdma dev set DEVICE netns")

	os.Remove(filepath.Join(env.procRoot, "2/comm"))
	wantFinding(t, checkNetns(env), statusNotChecked, "pid namespace of its own", "")

	env.netnsMode = func() (bool, error) { return false, unix.EOPNOTSUPP }
	wantFinding(t, checkNetns(env), statusNotChecked, "cannot ask RDMA netlink", "")
}

func TestDoctorGIDs(t *testing.T) {
	env := fakeEnv(t)
	env.ifaceAddrs = func(int) (string, []string, error) {
		return "eth0", []string{"10.0.0.1", "10.0.0.2", "fe80::1"}, nil
	}
	wantFinding(t, checkGIDs(env), statusProblem, "rxe0 port 1 (eth0): no RoCE v2 GID for 10.0.0.2", "ip addr del/add")

	env.ifaceAddrs = func(int) (string, []string, error) { return "", nil, errNoIface }
	wantFinding(t, checkGIDs(env), statusNotChecked, "its interface (index 2) is not in this network namespace", "")

	env.gidTable = func(uverbs.Device) ([]uverbs.GIDEntry, map[uint32]uverbs.LinkLayer, error) {
		return nil, map[uint32]uverbs.LinkLayer{1: uverbs.LinkLayerInfiniBand}, nil
	}
	wantFinding(t, checkGIDs(env), statusOK, "not an Ethernet port", "")

	env.devices = func() ([]uverbs.Device, error) { return nil, nil }
	wantFinding(t, checkGIDs(env), statusNotChecked, "no RDMA devices", "")
}

func TestUnusableInet6(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "net/if_inet6"),
		"fe800000000000000000000000000001 02 40 20 80     eth0\n"+
			"fd000000000000000000000000000001 02 40 00 c0     eth0\n"+
			"fd000000000000000000000000000002 02 40 00 80     eth0\n")
	got := unusableInet6(dir)
	if !got[mustAddr("fd00::1")] || got[mustAddr("fe80::1")] || got[mustAddr("fd00::2")] || len(got) != 1 {
		t.Errorf("unusable = %v, want only fd00::1 (tentative)", got)
	}
}

func TestParseSysGetReply(t *testing.T) {
	ne := binary.NativeEndian
	msg := func(typ uint16, payload []byte) []byte {
		b := make([]byte, 16, 16+len(payload))
		ne.PutUint32(b, uint32(16+len(payload)))
		ne.PutUint16(b[4:], typ)
		return append(b, payload...)
	}
	attr := func(typ uint16, v []byte) []byte {
		b := make([]byte, 4, 8)
		ne.PutUint16(b, uint16(4+len(v)))
		ne.PutUint16(b[2:], typ)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	reply := append(attr(1, []byte("x\x00")), attr(abi.RDMA_NLDEV_SYS_ATTR_NETNS_MODE, []byte{1})...)
	b := msg(abi.RDMA_NL_NLDEV<<10+abi.RDMA_NLDEV_CMD_SYS_GET, reply)
	b = append(b, msg(unix.NLMSG_ERROR, make([]byte, 20))...)
	mode, done, err := parseSysGetReply(b)
	if mode != 1 || !done || err != nil {
		t.Errorf("got %d %v %v, want 1 true nil", mode, done, err)
	}
	e := make([]byte, 20)
	ne.PutUint32(e, uint32(0xffffffff-uint32(unix.EOPNOTSUPP)+1))
	if _, _, err := parseSysGetReply(msg(unix.NLMSG_ERROR, e)); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("error reply: %v, want EOPNOTSUPP", err)
	}
}

func TestWriteFindings(t *testing.T) {
	var b bytes.Buffer
	writeFindings(&b, []finding{
		{Check: "memlock", Status: statusOK, Text: "RLIMIT_MEMLOCK is unlimited"},
		{Check: "device nodes", Status: statusProblem, Text: "x is missing", Fix: "line one\nline two"},
		{Check: "netns", Status: statusNotChecked, Text: "why"},
		{Check: "kernel ABI", Status: statusInfo, Text: "ib_uverbs: 3"},
	})
	want := `[ok]          memlock: RLIMIT_MEMLOCK is unlimited
[problem]     device nodes: x is missing
              fix: line one
                   line two
[not checked] netns: why
[info]        kernel ABI: ib_uverbs: 3

4 checks: 1 problems, 1 not checked
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"4096": 4096, "64KiB": 64 << 10, "1GiB": 1 << 30, "2M": 2 << 20, "3 MiB": 3 << 20} {
		if got, err := parseSize(in); got != want || err != nil {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "x", "-1", "99999999999999999999", "20000000000TiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) did not fail", in)
		}
	}
	for n, want := range map[uint64]string{12: "12 bytes", 64 << 10: "64 KiB", 1536: "1.5 KiB", unlimitedRlimit: "unlimited"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDoctorUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := runDoctor([]string{"-h"}, &stdout, &stderr); st != 0 || !strings.Contains(stdout.String(), "usage: rdmago doctor") {
		t.Errorf("-h: status %d, stdout %q", st, stdout.String())
	}
	if st := runDoctor([]string{"-mem", "lots"}, &stdout, &stderr); st != 2 || !strings.Contains(stderr.String(), "bad size") {
		t.Errorf("-mem lots: status %d, stderr %q", st, stderr.String())
	}
}

// A kernel struct built in BTF for the comparison tests: like
// rdmaUcmCmdHdr below, with a reserved member the kernel split.
type cmpGo struct {
	Cmd      uint32
	In       uint16
	Out      uint16
	Flags    uint16
	Reserved [2]uint8
	New      uint32
}

func btfSpec(t *testing.T, types ...btf.Type) *btf.Spec {
	t.Helper()
	b, err := btf.NewBuilder(types, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompareABI(t *testing.T) {
	u8 := &btf.Int{Name: "__u8", Size: 1}
	u16 := &btf.Int{Name: "__u16", Size: 2}
	u32 := &btf.Int{Name: "__u32", Size: 4}
	arr := func(n uint32) btf.Type { return &btf.Array{Index: u32, Type: u8, Nelems: n} }
	// An older kernel: reserved was 6 bytes, "new" not yet there, and
	// "in" and "out" inside an anonymous struct.
	older := &btf.Struct{Name: "cmp_ok", Size: 12, Members: []btf.Member{
		{Name: "cmd", Type: u32, Offset: 0},
		{Name: "", Type: &btf.Struct{Size: 4, Members: []btf.Member{
			{Name: "in", Type: u16, Offset: 0},
			{Name: "out", Type: u16, Offset: 16},
		}}, Offset: 32},
		{Name: "flags", Type: u16, Offset: 64},
		{Name: "reserved", Type: arr(6), Offset: 80},
	}}
	bad := &btf.Struct{Name: "cmp_bad", Size: 16, Members: []btf.Member{
		{Name: "cmd", Type: u32, Offset: 0},
		{Name: "in", Type: u32, Offset: 32},
		{Name: "out", Type: u16, Offset: 80},
	}}
	enum := &btf.Enum{Name: "e", Size: 4, Values: []btf.EnumValue{
		{Name: "E_A", Value: 1}, {Name: "E_B", Value: 3}, {Name: "E_MAX", Value: 9}, {Name: "E_NEG", Value: 0xffffffff},
	}}
	spec := btfSpec(t, older, bad, enum)
	r := compareABI([]namedSource{{"mod", spec}}, []abiType{
		{"cmp_ok", reflect.TypeFor[cmpGo]()},
		{"cmp_bad", reflect.TypeFor[cmpGo]()},
		{"cmp_absent", reflect.TypeFor[cmpGo]()},
	}, []abiConst{{"E_A", 1}, {"E_B", 2}, {"E_MAX", 7}, {"E_NEG", -1}, {"SOME_DEFINE", 5}})

	ok, badR, absent := r.Types[0], r.Types[1], r.Types[2]
	if ok.Where != "mod" || len(ok.Mismatches) != 0 || len(ok.Reserved) != 1 || !reflect.DeepEqual(ok.OnlyGo, []string{"new"}) {
		t.Errorf("cmp_ok: %+v", ok)
	}
	if len(badR.Mismatches) != 2 {
		// in's size and out's offset; members only one side has are no mismatch.
		t.Errorf("cmp_bad: %+v", badR)
	}
	if absent.Where != "" {
		t.Errorf("cmp_absent found in %q", absent.Where)
	}
	if r.EnumCompared != 3 || r.EnumSentinels != 1 || len(r.EnumMismatch) != 1 || !strings.Contains(r.EnumMismatch[0], "E_B is 3 in the kernel (mod), 2 in rdmago") {
		t.Errorf("enums: compared %d, sentinels %d, mismatches %q", r.EnumCompared, r.EnumSentinels, r.EnumMismatch)
	}
	if r.PerSource["mod"] != 2 {
		t.Errorf("per source: %v", r.PerSource)
	}

	fs := abiFindings(r, []string{"mlx5_ib"})
	wantFinding(t, fs, statusInfo, "mod: 2 of the generated types found in its BTF and compared", "")
	wantFinding(t, fs, statusInfo, "no module BTF for mlx5_ib", "")
	wantFinding(t, fs, statusProblem, "struct cmp_bad (mod) differs from the kernel's: in is 4 bytes in the kernel, 2 in rdmago; out at offset 10 in the kernel, 6 in rdmago", "report it")
	wantFinding(t, fs, statusProblem, "enum value E_B is 3", "report it")
	wantFinding(t, fs, statusProblem, "2 of 3 types compared (1 differ only where the ABI was extended), 1 not in the kernel's BTF, 1 mismatches; 3 enum values compared (and 1 ..._MAX counts left out), 1 mismatches", "")

	details := strings.Join(abiDetails(r), "\n")
	for _, s := range []string{
		"struct cmp_absent: not in the kernel's BTF",
		"struct cmp_ok: compared (mod), size 12 bytes in the kernel, 16 in rdmago, extended into reserved space: reserved is 6 bytes in the kernel, 2 in rdmago, only in rdmago: new",
		"struct cmp_bad: compared (mod), MISMATCH:",
	} {
		if !strings.Contains(details, s) {
			t.Errorf("details lack %q:\n%s", s, details)
		}
	}
}

func TestCNameOfField(t *testing.T) {
	for in, want := range map[string]string{"Event_type": "event_type", "X__pad": "__pad", "Pad_cgo_0": "", "Anon0": "", "_": ""} {
		if got := cNameOfField(in); got != want {
			t.Errorf("cNameOfField(%q) = %q, want %q", in, got, want)
		}
	}
}

// The ABI table holds every generated struct with a C name and the
// constants with their values.
func TestABITableSane(t *testing.T) {
	if len(abiTypes) < 200 || len(abiConsts) < 500 {
		t.Fatalf("%d types, %d constants", len(abiTypes), len(abiConsts))
	}
	seen := map[string]bool{}
	for _, a := range abiTypes {
		if a.C == "" || seen[a.C] || a.Go.Kind() != reflect.Struct {
			t.Errorf("bad entry %+v", a)
		}
		seen[a.C] = true
	}
	if !seen["ib_uverbs_cmd_hdr"] || !seen["rdma_ucm_cmd_hdr"] || !seen["rxe_send_wqe"] {
		t.Errorf("table lacks a common struct")
	}
}
