package getopt

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestExpandShortOptions(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("d", "", "")
	fs.String("ib-dev", "", "")
	fs.Bool("l", false, "")
	fs.Bool("v", false, "")
	fs.Bool("verbose", false, "")
	fs.Int("i", 0, "")
	for _, tc := range []struct{ in, want []string }{
		{nil, []string{}},
		{[]string{"-lv"}, []string{"-l", "-v"}},
		{[]string{"-drxe0"}, []string{"-d", "rxe0"}},
		{[]string{"-vi1"}, []string{"-v", "-i", "1"}},
		{[]string{"-vd", "rxe0"}, []string{"-v", "-d", "rxe0"}},
		{[]string{"-d", "-lv"}, []string{"-d", "-lv"}},
		{[]string{"--ib-dev", "-lv"}, []string{"--ib-dev", "-lv"}},
		{[]string{"-ib-dev=x", "--verbose", "-verbose"}, []string{"-ib-dev=x", "--verbose", "-verbose"}},
		{[]string{"-lx"}, []string{"-l", "-x"}},
		{[]string{"--bogus", "-x"}, []string{"--bogus", "-x"}},
		{[]string{"op", "-lv", "--", "-lv"}, []string{"op", "-l", "-v", "--", "-lv"}},
		{[]string{"-", "-v"}, []string{"-", "-v"}},
		{[]string{"-d"}, []string{"-d"}},
		{[]string{"-vd"}, []string{"-v", "-d"}},
	} {
		if got := ExpandShortOptions(fs, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("expandShortOptions(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParsePermuted(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := fs.Bool("v", false, "")
	d := fs.String("d", "", "")
	ops, err := ParsePermuted(fs, []string{"a", "-v", "b", "-d", "x", "--", "-c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if !*v || *d != "x" || !slices.Equal(ops, []string{"a", "b", "-c", "d"}) {
		t.Errorf("v=%v d=%q operands=%q", *v, *d, ops)
	}
}

func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := fs.Bool("v", false, "")
	d := fs.String("d", "", "")
	ops, err := Parse(fs, []string{"a", "-vdx", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !*v || *d != "x" || !slices.Equal(ops, []string{"a", "b"}) {
		t.Errorf("v=%v d=%q operands=%q", *v, *d, ops)
	}
}

// Short as glibc's getopt: bundles, a glued argument, an argument that
// looks like an option, operands skipped, "-" an operand, "--" the end.
func TestShort(t *testing.T) {
	var got []string
	msg, ok := Short("p", []string{"op", "-ab", "-cv", "-a", "-", "-c", "-a", "--", "-b"}, "abc:", func(c byte, a string) {
		got = append(got, string(c)+"="+a)
	})
	if !ok || msg != "" || strings.Join(got, " ") != "a= b= c=v a= c=-a" {
		t.Errorf("Short: %v %q %q", ok, msg, got)
	}
}

func TestShortErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
		seen string
	}{
		{[]string{"-a", "-x", "-b"}, "p: invalid option -- 'x'\n", "a"},
		{[]string{"--long"}, "p: invalid option -- '-'\n", ""},
		{[]string{"-ba:"}, "p: invalid option -- ':'\n", "b a"},
		{[]string{"-a", "-c"}, "p: option requires an argument -- 'c'\n", "a"},
	} {
		var seen []string
		msg, ok := Short("p", c.args, "abc:", func(o byte, a string) { seen = append(seen, string(o)+a) })
		if ok || msg != c.msg || strings.Join(seen, " ") != c.seen {
			t.Errorf("Short(%q): %v %q, handled %q; want %q, %q", c.args, ok, msg, seen, c.msg, c.seen)
		}
	}
}
