package cmtime

import (
	"bytes"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// cUsage is what cmtime (v44.0) prints to stdout after a bad option, run
// as "cmtime".
const cUsage = "usage: cmtime\n" +
	"\t[-s server_address]\n" +
	"\t[-b bind_address]\n" +
	"\t[-c connections]\n" +
	"\t[-p port_number]\n" +
	"\t[-r retries]\n" +
	"\t[-t timeout_ms]\n"

// The bad options, as cmtime's getopt() refuses them: its message on
// stderr, the usage on stdout, status 1.
func TestCmtimeBadOptions(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-x"}, "cmtime: invalid option -- 'x'\n"},
		{[]string{"--foo"}, "cmtime: invalid option -- '-'\n"},
		{[]string{"-s"}, "cmtime: option requires an argument -- 's'\n"},
		{[]string{"-c", "2", "-t"}, "cmtime: option requires an argument -- 't'\n"},
		{[]string{"-f", "ip"}, "cmtime: invalid option -- 'f'\n"},
		{[]string{"operand", "-q"}, "cmtime: invalid option -- 'q'\n"},
	} {
		o, e, st := tooltest.Run(Commands(), append([]string{"cmtime"}, c.args...)...)
		if st != 1 || o != cUsage || e != c.stderr {
			t.Errorf("cmtime %q: status %d, stdout %q, stderr %q; want 1, the usage, %q", c.args, st, o, e, c.stderr)
		}
	}
	var b bytes.Buffer
	usage(&b, "cmtime")
	if b.String() != cUsage {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), cUsage)
	}
	// -h, which cmtime lacks, is an invalid option, as there.
	if o, e, st := tooltest.Run(Commands(), "cmtime", "-h"); st != 1 || o != cUsage || e != "cmtime: invalid option -- 'h'\n" {
		t.Errorf("cmtime -h: status %d, stdout %q, stderr %q", st, o, e)
	}
}

// The options as cmtime's loop reads them: atoi conversions, the last one
// winning, operands ignored.
func TestCmtimeOptions(t *testing.T) {
	def := options{port: "7471", connections: 100, retries: 2, timeoutMS: 2000}
	for _, c := range []struct {
		args []string
		want func(o *options)
	}{
		{nil, func(o *options) {}},
		{[]string{"-s", "10.0.2.15", "-b10.0.2.16", "-p", "x9"}, func(o *options) { o.dst, o.src, o.port = "10.0.2.15", "10.0.2.16", "x9" }},
		{[]string{"-c2x", "-r", " 3", "-t", "-5"}, func(o *options) { o.connections, o.retries, o.timeoutMS = 2, 3, -5 }},
		{[]string{"-c", "abc", "-t", "99999999999"}, func(o *options) { o.connections, o.timeoutMS = 0, 1215752191 }},
		{[]string{"-c", "1", "-c", "7"}, func(o *options) { o.connections = 7 }},
		{[]string{"x", "-s", "a", "--", "-c", "5"}, func(o *options) { o.dst = "a" }},
	} {
		want := def
		c.want(&want)
		var o, e bytes.Buffer
		got, st, run := parse("cmtime", c.args, &o, &e)
		if !run || st != 0 || !reflect.DeepEqual(got, want) || o.Len() != 0 || e.Len() != 0 {
			t.Errorf("cmtime %q: run %v status %d options %+v, stdout %q, stderr %q; want %+v",
				c.args, run, st, got, o.String(), e.String(), want)
		}
	}
}

// The table as show_perf prints it: every step but bind without -b, and
// a client of no connections dividing by 0 as C does. 0/0 is the
// processor's default NaN, whose sign glibc prints: x86's has the sign bit
// set ("-nan"), arm64's and most others' do not ("nan"), so cmtime itself
// prints each on its own machine.
func TestCmtimeShowPerf(t *testing.T) {
	var b bytes.Buffer
	tt := &test{o: options{connections: 0}, stdout: &b}
	tt.showPerf()
	nan := "nan"
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "386" {
		nan = "-nan"
	}
	want := "step              total ms     max ms     min us  us / conn\n"
	for _, step := range []string{"create id    ", "resolve addr ", "resolve route", "create qp    ", "connect      ", "disconnect   ", "destroy      "} {
		want += fmt.Sprintf("%s:        0.00       0.001000000000.00 %10s\n", step, nan)
	}
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestNormFigures: the device tests' comparison reads every figure of the
// table as N, "inf" and "-nan" of a client with no connections among them,
// and leaves words alone.
func TestNormFigures(t *testing.T) {
	for _, line := range []string{
		"create qp    :        0.00       0.001000000000.00       -nan",
		"create qp    :        0.02       0.001000000000.00        inf",
		"create qp    :        0.02       0.001000000000.00     -54.00",
	} {
		if got := norm(line); got != "create qp    : N N N N" {
			t.Errorf("norm(%q) = %q", line, got)
		}
	}
	if s := "resolving address\ninfo nano\n"; norm(s) != s {
		t.Errorf("norm(%q) = %q", s, norm(s))
	}
}
