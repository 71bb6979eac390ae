package mckey

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

// cUsage is what mckey (v44.0) prints to stdout after a bad option, run
// as "mckey".
const cUsage = "usage: mckey\n" +
	"\t-m multicast_address\n" +
	"\t[-M unmapped_multicast_address]\n" +
	"\t replaces -m and requires -b\n" +
	"\t[-s(ender)]\n" +
	"\t[-b bind_address]\n" +
	"\t[-c connections]\n" +
	"\t[-C message_count]\n" +
	"\t[-S message_size]\n" +
	"\t[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]\n" +
	"\t[-o join as a send-only full-member]\n" +
	"\t[-l join without multicast loopback]\n"

// The bad options, as mckey's getopt() refuses them: its message on
// stderr, the usage on stdout, status 1; and -M without -b.
func TestMckeyBadOptions(t *testing.T) {
	for _, c := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"-x"}, cUsage, "mckey: invalid option -- 'x'\n"},
		{[]string{"--foo"}, cUsage, "mckey: invalid option -- '-'\n"},
		{[]string{"-m"}, cUsage, "mckey: option requires an argument -- 'm'\n"},
		{[]string{"-s", "-c", "2", "-C"}, cUsage, "mckey: option requires an argument -- 'C'\n"},
		{[]string{"-M", "ff0e::1"}, "unmapped multicast address requires binding to source address\n", ""},
		{[]string{"-b", "10.0.2.15", "-M", "ff0e::1", "-m", "239.1.2.3", "-q"}, cUsage, "mckey: invalid option -- 'q'\n"},
	} {
		o, e, st := tooltest.Run(Commands(), append([]string{"mckey"}, c.args...)...)
		if st != 1 || o != c.stdout || e != c.stderr {
			t.Errorf("mckey %q: status %d, stdout %q, stderr %q; want 1, %q, %q", c.args, st, o, e, c.stdout, c.stderr)
		}
	}
	var b bytes.Buffer
	usage(&b, "mckey")
	if b.String() != cUsage {
		t.Errorf("usage:\n%s\nwant:\n%s", b.String(), cUsage)
	}
	// -h, which mckey lacks, is an invalid option, as there.
	if o, e, st := tooltest.Run(Commands(), "mckey", "-h"); st != 1 || o != cUsage || e != "mckey: invalid option -- 'h'\n" {
		t.Errorf("mckey -h: status %d, stdout %q, stderr %q", st, o, e)
	}
}

// The options as mckey's loop reads them: atoi and strtol conversions,
// the last of -m and -M winning (and -M's mark staying).
func TestMckeyOptions(t *testing.T) {
	def := options{connections: 1, count: 10, size: 100, ps: cm.PSUDP, loopback: true}
	for _, c := range []struct {
		args []string
		want func(o *options)
	}{
		{nil, func(o *options) {}},
		{[]string{"-m", "239.1.2.3", "-b10.0.2.15", "-s"}, func(o *options) { o.dst, o.dstSet, o.src, o.sender = "239.1.2.3", true, "10.0.2.15", true }},
		{[]string{"-m", ""}, func(o *options) { o.dstSet = true }},
		{[]string{"-b", "a", "-M", "ff0e::1", "-m", "g"}, func(o *options) { o.src, o.dst, o.dstSet, o.unmapped = "a", "g", true, true }},
		{[]string{"-c2x", "-C", " 3", "-S", "-5"}, func(o *options) { o.connections, o.count, o.size = 2, 3, -5 }},
		{[]string{"-C", "abc", "-S", "99999999999"}, func(o *options) { o.count, o.size = 0, 1215752191 }},
		{[]string{"-p", "0x2"}, func(o *options) { o.ps = cm.PSIPoIB }},
		{[]string{"-p", "5"}, func(o *options) { o.ps = 5 }},
		{[]string{"-ol"}, func(o *options) { o.sendOnly, o.loopback = true, false }},
		{[]string{"x", "-s", "--", "-c", "5"}, func(o *options) { o.sender = true }},
	} {
		want := def
		c.want(&want)
		var o, e bytes.Buffer
		got, st, run := parse("mckey", c.args, &o, &e)
		if !run || st != 0 || !reflect.DeepEqual(got, want) || o.Len() != 0 || e.Len() != 0 {
			t.Errorf("mckey %q: run %v status %d options %+v, stdout %q, stderr %q; want %+v",
				c.args, run, st, got, o.String(), e.String(), want)
		}
	}
}

// cStatus: librdmacm's -1 for a join it could not complete, the kernel's
// status for the kernel's own failures.
func TestMckeyCStatus(t *testing.T) {
	for _, c := range []struct {
		ev   *cm.Event
		want int
	}{
		{&cm.Event{Type: cm.EventMulticastError, Status: -22, UD: cm.UDParam{QPNum: 0xffffff}}, -1},
		{&cm.Event{Type: cm.EventMulticastError, Status: -110}, -110},
		{&cm.Event{Type: cm.EventAddrError, Status: -101, UD: cm.UDParam{QPNum: 0xffffff}}, -101},
		{&cm.Event{Type: cm.EventMulticastJoin, UD: cm.UDParam{QPNum: 0xffffff}}, 0},
	} {
		if got := cStatus(c.ev); got != c.want {
			t.Errorf("%v status %d QPN %#x: %d, want %d", c.ev.Type, c.ev.Status, c.ev.UD.QPNum, got, c.want)
		}
	}
}
