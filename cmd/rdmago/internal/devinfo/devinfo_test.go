package devinfo

// Golden tests of "rdmago devinfo" over the fake devices of
// devinfo_fixtures_test.go.
//
// The expected outputs in testdata/ are what rdma-core v44.0's
// ibv_devinfo prints for the same devices: during development the C tool's
// output for these fixtures was captured and read line by line against
// libibverbs/examples/devinfo.c. They are data; there is no generator. The
// proof on a real device is devinfo_vm_test.go, which compares with the
// installed ibv_devinfo inside the VM on every kernel.
//
// Each case's stdout is <case>.golden; its exit status and stderr are in
// status.txt, one line per case: name, status, Go-quoted stderr.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// devinfoCase is one command line run over one fixture.
type devinfoCase struct {
	name    string
	fixture string
	args    []string
	// getoptErr marks cases where stderr holds getopt's message, which
	// rdmago words differently: stderr is not compared.
	getoptErr bool
}

var devinfoCases = []devinfoCase{
	{name: "rxe", fixture: "rxe"},
	{name: "rxe-v", fixture: "rxe", args: []string{"-v"}},
	{name: "rxe-d-v", fixture: "rxe", args: []string{"-d", "rxe0", "--verbose"}},
	{name: "rxe-i1", fixture: "rxe", args: []string{"-i", "1"}},
	{name: "rxe-long", fixture: "rxe", args: []string{"--ib-dev=rxe0", "--ib-port", "1", "--verbose"}},
	{name: "rxe-l", fixture: "rxe", args: []string{"-l"}},
	{name: "rxe-l-bad-after", fixture: "rxe", args: []string{"-l", "-i", "0", "-x"}},
	{name: "rxe-bad-dev", fixture: "rxe", args: []string{"-d", "rxe1"}},
	{name: "rxe-empty-dev", fixture: "rxe", args: []string{"-d", ""}},
	{name: "rxe-bad-port", fixture: "rxe", args: []string{"-i", "2"}},
	{name: "rxe-i0", fixture: "rxe", args: []string{"-i", "0", "-l"}},
	{name: "rxe-i-junk", fixture: "rxe", args: []string{"-i", "x1"}},
	{name: "rxe-i-neg", fixture: "rxe", args: []string{"-i", "-1"}},
	{name: "rxe-bad-opt", fixture: "rxe", args: []string{"-x"}, getoptErr: true},
	{name: "rxe-no-arg", fixture: "rxe", args: []string{"-d"}, getoptErr: true},
	{name: "rxe-operand", fixture: "rxe", args: []string{"foo", "-v"}},
	{name: "rxe-bundle", fixture: "rxe", args: []string{"-vi1", "-drxe0"}},
	{name: "rxe-abbrev", fixture: "rxe", args: []string{"--verb", "--ib-d=rxe0", "--ib-p", "1"}},
	{name: "rxe-ambiguous", fixture: "rxe", args: []string{"--ib", "1"}, getoptErr: true},
	{name: "rxe-list-arg", fixture: "rxe", args: []string{"--list=x"}, getoptErr: true},
	{name: "mlx5", fixture: "mlx5"},
	{name: "mlx5-v", fixture: "mlx5", args: []string{"-v"}},
	{name: "mlx5-i2-v", fixture: "mlx5", args: []string{"-v", "-i", "2"}},
	{name: "mlx5-d1-v", fixture: "mlx5", args: []string{"-d", "mlx5_1", "-v"}},
	{name: "mlx5-i257", fixture: "mlx5", args: []string{"-i", "257", "-d", "mlx5_0"}},
	{name: "mlx5-i0x100", fixture: "mlx5", args: []string{"-i", "0x100", "-d", "mlx5_0"}},
	{name: "mlx5-i02", fixture: "mlx5", args: []string{"-i", "02", "-d", "mlx5_0"}},
	{name: "mlx5-l", fixture: "mlx5", args: []string{"-l"}},
	{name: "odd", fixture: "odd"},
	{name: "odd-v", fixture: "odd", args: []string{"-v"}},
	{name: "fail", fixture: "fail"},
	{name: "fail-v", fixture: "fail", args: []string{"-v"}},
	{name: "fail-gid3-v", fixture: "fail", args: []string{"-v", "-d", "f6_gid3"}},
	{name: "fail-port-i3", fixture: "fail", args: []string{"-d", "f3_port", "-i", "3"}},
	{name: "order", fixture: "order"},
	{name: "order-l", fixture: "order", args: []string{"-l"}},
	{name: "none", fixture: "none"},
	{name: "none-l", fixture: "none", args: []string{"-l"}},
	{name: "none-d", fixture: "none", args: []string{"-d", "rxe0"}},
	{name: "listfail", fixture: "listfail"},
	{name: "listfail-l", fixture: "listfail", args: []string{"-l"}},
}

const devinfoGoldenDir = "testdata"

// devinfoResult is what one run produced.
type devinfoResult struct {
	stdout, stderr string
	status         int
}

func TestDevinfoGolden(t *testing.T) {
	fx := fixtures()
	statuses := readDevinfoStatus(t)
	for _, tc := range devinfoCases {
		t.Run(tc.name, func(t *testing.T) {
			f := fx[tc.fixture]
			if f == nil {
				t.Fatalf("no fixture %q", tc.fixture)
			}
			var stdout, stderr bytes.Buffer
			status := devinfoMain(fakeBackend{f}, tc.args, &stdout, &stderr)
			got := devinfoResult{stdout.String(), stderr.String(), status}

			golden := filepath.Join(devinfoGoldenDir, tc.name+".golden")
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			st, ok := statuses[tc.name]
			if !ok {
				t.Fatalf("%s has no line in status.txt", tc.name)
			}
			compareDevinfo(t, tc, got, devinfoResult{string(b), st.stderr, st.status})
		})
	}
}

func compareDevinfo(t *testing.T, tc devinfoCase, got, want devinfoResult) {
	t.Helper()
	if d := diffLines(want.stdout, got.stdout); d != "" {
		t.Errorf("devinfo %q: stdout differs from ibv_devinfo's:\n%s", tc.args, d)
	}
	if got.status != want.status {
		t.Errorf("devinfo %q: exit status %d, ibv_devinfo's is %d", tc.args, got.status, want.status)
	}
	if !tc.getoptErr && got.stderr != want.stderr {
		t.Errorf("devinfo %q: stderr %q, ibv_devinfo's is %q", tc.args, got.stderr, want.stderr)
	}
}

// diffLines compares two outputs line by line; "" if they are equal. It
// names the first line that differs by its field, with both values.
func diffLines(want, got string) string {
	if want == got {
		return ""
	}
	wl, gl := strings.SplitAfter(want, "\n"), strings.SplitAfter(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			field, wv := splitField(w)
			_, gv := splitField(g)
			if field == "" {
				field, _ = splitField(g)
			}
			fmt.Fprintf(&b, "first difference at line %d, field %q: want %q, got %q\n", i+1, field, wv, gv)
			break
		}
	}
	b.WriteString("diff (-want +got):\n")
	b.WriteString(cmp.Diff(wl, gl))
	return b.String()
}

// splitField splits an ibv_devinfo line into its field name and value:
// "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" is "state", "PORT_ACTIVE (4)";
// "\t\t\tGID[  1]:\t\tfe80::1, RoCE v2" is "GID[  1]", "fe80::1, RoCE v2".
// A line that is not "name:<tab>value" or "name:" (a flag name, "Unknown
// flags: 0x20", a blank line) has no name and is its own value.
func splitField(line string) (string, string) {
	s := strings.TrimSpace(line)
	if i := strings.Index(s, ":\t"); i > 0 {
		return s[:i], strings.TrimSpace(s[i+1:])
	}
	if name, ok := strings.CutSuffix(s, ":"); ok && name != "" {
		return name, ""
	}
	return "", s
}

// devinfoStatus is a case's line of status.txt.
type devinfoStatus struct {
	status int
	stderr string
}

func readDevinfoStatus(t *testing.T) map[string]devinfoStatus {
	t.Helper()
	f, err := os.Open(filepath.Join(devinfoGoldenDir, "status.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]devinfoStatus{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, " ", 3)
		if len(parts) != 3 {
			t.Fatalf("status.txt: bad line %q", line)
		}
		st, err1 := strconv.Atoi(parts[1])
		stderr, err2 := strconv.Unquote(parts[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("status.txt: bad line %q", line)
		}
		m[parts[0]] = devinfoStatus{st, stderr}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSplitField(t *testing.T) {
	for _, tc := range []struct{ line, field, value string }{
		{"hca_id:\trxe0\n", "hca_id", "rxe0"},
		{"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "state", "PORT_ACTIVE (4)"},
		{"\t\t\tGID[  1]:\t\tfe80::1, RoCE v2\n", "GID[  1]", "fe80::1, RoCE v2"},
		{"\tcompletion timestamp_mask:\t\t\t0x0fff\n", "completion timestamp_mask", "0x0fff"},
		{"\trc_odp_caps:\n", "rc_odp_caps", ""},
		{"\t\t\t\t\tUnknown flags: 0x20\n", "", "Unknown flags: 0x20"},
		{"\t\t\t\t\tSRQ_RESIZE\n", "", "SRQ_RESIZE"},
		{"\n", "", ""},
	} {
		f, v := splitField(tc.line)
		if f != tc.field || v != tc.value {
			t.Errorf("splitField(%q) = %q, %q; want %q, %q", tc.line, f, v, tc.field, tc.value)
		}
	}
}

func TestDiffLinesNamesField(t *testing.T) {
	want := "hca_id:\trxe0\n\t\tport:\t1\n\t\t\tGID[  1]:\t\tfe80::1, RoCE v2\n\n"
	got := "hca_id:\trxe0\n\t\tport:\t1\n\t\t\tGID[  1]:\t\tfe80::2, RoCE v2\n\n"
	d := diffLines(want, got)
	if !strings.Contains(d, `line 3, field "GID[  1]": want "fe80::1, RoCE v2", got "fe80::2, RoCE v2"`) {
		t.Errorf("diffLines:\n%s", d)
	}
	if diffLines(want, want) != "" {
		t.Error("diffLines of equal outputs is not empty")
	}
}

func TestSysfsValue(t *testing.T) {
	// What printf("%s") shows of a buffer ibv_read_sysfs_file filled.
	full := make([]byte, 256)
	for i := range full {
		full[i] = 'a'
	}
	fullNL := slices.Clone(full)
	fullNL[255] = '\n'
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{nil, ""},
		{[]byte("\n"), ""},
		{[]byte("MT_0000000012\n"), "MT_0000000012"},
		{[]byte("  spaced \n\n"), "  spaced \n"},
		{[]byte("no newline"), "no newline"},
		{[]byte("nul\x00after\n"), "nul"},
		{full, ""},
		{fullNL, string(full[:255])},
	} {
		if got := sysfsValue(tc.in, 256); got != tc.want {
			t.Errorf("sysfsValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
