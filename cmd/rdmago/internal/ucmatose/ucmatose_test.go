package ucmatose

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/cmacommon"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// cUsage is what ucmatose (v44.0) prints to stdout after a bad option,
// run as "ucmatose".
const cUsage = "usage: ucmatose\n" +
	"\t[-s server_address]\n" +
	"\t[-b bind_address]\n" +
	"\t[-f address_format]\n" +
	"\t    name, ip, ipv6, or gid\n" +
	"\t[-P port_space]\n" +
	"\t    tcp or ib\n" +
	"\t[-c connections]\n" +
	"\t[-C message_count]\n" +
	"\t[-S message_size]\n" +
	"\t[-t type_of_service]\n" +
	"\t[-p port_number]\n" +
	"\t[-m(igrate)]\n" +
	"\t[-a ack_timeout]\n"

// The bad options, as cmatose's getopt() refuses them: its message on
// stderr, the usage on stdout, status 1. A long option is a bundle of
// letters to getopt, the first of them '-'.
func TestUcmatoseBadOptions(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-x"}, "ucmatose: invalid option -- 'x'\n"},
		{[]string{"--foo"}, "ucmatose: invalid option -- '-'\n"},
		{[]string{"-s"}, "ucmatose: option requires an argument -- 's'\n"},
		{[]string{"-m", "-a"}, "ucmatose: option requires an argument -- 'a'\n"},
		{[]string{"-r", "1"}, "ucmatose: invalid option -- 'r'\n"},
		{[]string{"-f", "bogus", "-:"}, "Warning: unknown address format\nucmatose: invalid option -- ':'\n"},
		{[]string{"operand", "-P", "udp", "-q"}, "Warning: unknown port space format\nucmatose: invalid option -- 'q'\n"},
	} {
		o, e, st := tooltest.Run(Commands(), append([]string{"ucmatose"}, c.args...)...)
		if st != 1 || o != cUsage || e != c.stderr {
			t.Errorf("ucmatose %q: status %d, stdout %q, stderr %q; want 1, the usage, %q", c.args, st, o, e, c.stderr)
		}
	}
	var b bytes.Buffer
	usage(&b, "ucmatose")
	if b.String() != cUsage {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), cUsage)
	}
	// -h, which cmatose lacks, is an invalid option, as there.
	if o, e, st := tooltest.Run(Commands(), "ucmatose", "-h"); st != 1 || o != cUsage || e != "ucmatose: invalid option -- 'h'\n" {
		t.Errorf("ucmatose -h: status %d, stdout %q, stderr %q", st, o, e)
	}
}

// The options as cmatose's loop reads them: atoi and strtoul
// conversions, case-insensitive prefixes for -f and -P, the last one
// winning, and its warnings.
func TestUcmatoseOptions(t *testing.T) {
	def := options{port: "7471", connections: 1, count: 10, size: 100, hints: cm.AddrInfo{PortSpace: cm.PSTCP}}
	for _, c := range []struct {
		args   []string
		want   func(o *options)
		stderr string
	}{
		{nil, func(o *options) {}, ""},
		{[]string{"-s", "10.0.2.15", "-b10.0.2.16", "-p", "x9"}, func(o *options) { o.dst, o.src, o.port = "10.0.2.15", "10.0.2.16", "x9" }, ""},
		{[]string{"-c2x", "-C", " 3", "-S", "-5"}, func(o *options) { o.connections, o.count, o.size = 2, 3, -5 }, ""},
		{[]string{"-C", "abc", "-S", "99999999999"}, func(o *options) { o.count, o.size = 0, 1215752191 }, ""},
		{[]string{"-t", "0x20", "-a", "014"}, func(o *options) { o.setTOS, o.tos, o.setTimeout, o.timeout = true, 0x20, true, 12 }, ""},
		{[]string{"-t", "300", "-a", "-1"}, func(o *options) { o.setTOS, o.tos, o.setTimeout, o.timeout = true, 300-256, true, 255 }, ""},
		{[]string{"-m", "-mc3"}, func(o *options) { o.migrate, o.connections = true, 3 }, ""},
		{[]string{"-P", "IB"}, func(o *options) { o.hints.PortSpace = cm.PSIB }, ""},
		{[]string{"-P", "ibx", "-P", "tcpx"}, func(o *options) { o.hints.PortSpace = cm.PSIB }, ""},
		{[]string{"-P", "udp"}, func(o *options) {}, "Warning: unknown port space format\n"},
		{[]string{"-f", "ipv6"}, func(o *options) { o.hints.Flags = cm.AINumericHost }, ""},
		{[]string{"-f", "gid"}, func(o *options) { o.hints.Flags, o.hints.Family = cm.AINumericHost|cm.AIFamily, cmacommon.AFIB }, ""},
		{[]string{"-f", "i", "-f", "nam"}, func(o *options) {}, "Warning: unknown address format\nWarning: unknown address format\n"},
		{[]string{"x", "-s", "a", "--", "-c", "5"}, func(o *options) { o.dst = "a" }, ""},
	} {
		want := def
		c.want(&want)
		var o, e bytes.Buffer
		got, st, run := parse("ucmatose", c.args, &o, &e)
		if !run || st != 0 || !reflect.DeepEqual(got, want) || o.Len() != 0 || e.String() != c.stderr {
			t.Errorf("ucmatose %q: run %v status %d options %+v, stdout %q, stderr %q; want %+v, stderr %q",
				c.args, run, st, got, o.String(), e.String(), want, c.stderr)
		}
	}
}
