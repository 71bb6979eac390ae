package udaddy

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/cmacommon"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// cUsage is what udaddy (v44.0) prints to stdout after a bad option, run
// as "udaddy".
const cUsage = "usage: udaddy\n" +
	"\t[-s server_address]\n" +
	"\t[-b bind_address]\n" +
	"\t[-f address_format]\n" +
	"\t    name, ip, ipv6, or gid\n" +
	"\t[-P port_space]\n" +
	"\t    udp or ipoib\n" +
	"\t[-c connections]\n" +
	"\t[-C message_count]\n" +
	"\t[-S message_size]\n" +
	"\t[-t type_of_service]\n" +
	"\t[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]\n"

// The bad options, as udaddy's getopt() refuses them: its message on
// stderr, the usage on stdout, status 1. A long option is a bundle of
// letters to getopt, the first of them '-'.
func TestUdaddyBadOptions(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-x"}, "udaddy: invalid option -- 'x'\n"},
		{[]string{"--foo"}, "udaddy: invalid option -- '-'\n"},
		{[]string{"-s"}, "udaddy: option requires an argument -- 's'\n"},
		{[]string{"-c", "2", "-C"}, "udaddy: option requires an argument -- 'C'\n"},
		{[]string{"-c2x"}, ""}, // -c's argument is "2x": no error (checked below)
		{[]string{"-f", "bogus", "-:"}, "Warning: unknown address format\nudaddy: invalid option -- ':'\n"},
		{[]string{"operand", "-P", "tcp", "-q"}, "Warning: unknown port space format\nudaddy: invalid option -- 'q'\n"},
	} {
		if c.stderr == "" {
			continue
		}
		o, e, st := tooltest.Run(Commands(), append([]string{"udaddy"}, c.args...)...)
		if st != 1 || o != cUsage || e != c.stderr {
			t.Errorf("udaddy %q: status %d, stdout %q, stderr %q; want 1, the usage, %q", c.args, st, o, e, c.stderr)
		}
	}
	var b bytes.Buffer
	usage(&b, "udaddy")
	if b.String() != cUsage {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), cUsage)
	}
	// -h, which udaddy lacks, is an invalid option, as there.
	if o, e, st := tooltest.Run(Commands(), "udaddy", "-h"); st != 1 || o != cUsage || e != "udaddy: invalid option -- 'h'\n" {
		t.Errorf("udaddy -h: status %d, stdout %q, stderr %q", st, o, e)
	}
}

// The options as udaddy's loop reads them: atoi, strtoul and strtol
// conversions, case-insensitive prefixes for -f and -P, the last one
// winning, and its warnings.
func TestUdaddyOptions(t *testing.T) {
	def := options{port: "7174", connections: 1, count: 10, size: 100, hints: cm.AddrInfo{PortSpace: cm.PSUDP}}
	for _, c := range []struct {
		args   []string
		want   func(o *options)
		stderr string
	}{
		{nil, func(o *options) {}, ""},
		{[]string{"-s", "10.0.2.15", "-b10.0.2.16"}, func(o *options) { o.dst, o.src = "10.0.2.15", "10.0.2.16" }, ""},
		{[]string{"-c2x", "-C", " 3", "-S", "-5"}, func(o *options) { o.connections, o.count, o.size = 2, 3, -5 }, ""},
		{[]string{"-C", "abc", "-S", "99999999999"}, func(o *options) { o.count, o.size = 0, 1215752191 }, ""},
		{[]string{"-t", "0x20"}, func(o *options) { o.setTOS, o.tos = true, 0x20 }, ""},
		{[]string{"-t", "300"}, func(o *options) { o.setTOS, o.tos = true, 300-256 }, ""},
		{[]string{"-p", "0x2"}, func(o *options) { o.hints.PortSpace = cm.PSIPoIB }, ""},
		{[]string{"-p", "273"}, func(o *options) {}, ""},
		{[]string{"-p", "5"}, func(o *options) { o.hints.PortSpace = 5 }, ""},
		{[]string{"-P", "IPoIB"}, func(o *options) { o.hints.PortSpace = cm.PSIPoIB }, ""},
		{[]string{"-P", "ipoib", "-P", "udpx"}, func(o *options) { o.hints.PortSpace = cm.PSIPoIB }, ""},
		{[]string{"-P", "tcp"}, func(o *options) {}, "Warning: unknown port space format\n"},
		{[]string{"-f", "ipv6"}, func(o *options) { o.hints.Flags = cm.AINumericHost }, ""},
		{[]string{"-f", "IP"}, func(o *options) { o.hints.Flags = cm.AINumericHost }, ""},
		{[]string{"-f", "gid"}, func(o *options) { o.hints.Flags, o.hints.Family = cm.AINumericHost|cm.AIFamily, cmacommon.AFIB }, ""},
		{[]string{"-f", "ip", "-f", "names"}, func(o *options) { o.hints.Flags = cm.AINumericHost }, ""},
		{[]string{"-f", "i", "-f", "nam"}, func(o *options) {}, "Warning: unknown address format\nWarning: unknown address format\n"},
		{[]string{"x", "-s", "a", "--", "-c", "5"}, func(o *options) { o.dst = "a" }, ""},
	} {
		want := def
		c.want(&want)
		var o, e bytes.Buffer
		got, st, run := parse("udaddy", c.args, &o, &e)
		if !run || st != 0 || !reflect.DeepEqual(got, want) || o.Len() != 0 || e.String() != c.stderr {
			t.Errorf("udaddy %q: run %v status %d options %+v, stdout %q, stderr %q; want %+v, stderr %q",
				c.args, run, st, got, o.String(), e.String(), want, c.stderr)
		}
	}
}
