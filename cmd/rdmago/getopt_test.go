package main

import (
	"flag"
	"io"
	"math"
	"slices"
	"testing"
)

func TestCStrtol(t *testing.T) {
	// What glibc's strtol(s, NULL, 0) returns.
	for _, tc := range []struct {
		s    string
		want int64
	}{
		{"1", 1}, {"  \t\n12", 12}, {"+3", 3}, {"-1", -1}, {"0", 0}, {"", 0},
		{"x1", 0}, {"1x", 1}, {"12abc", 12}, {"0x10", 16}, {"0X1f", 31}, {"0x", 0},
		{"0xg", 0}, {"010", 8}, {"08", 0}, {"09", 0}, {"-0x10", -16}, {"1e3", 1},
		{"9223372036854775807", math.MaxInt64}, {"9223372036854775808", math.MaxInt64},
		{"-9223372036854775808", math.MinInt64}, {"-9223372036854775809", math.MinInt64},
		{"99999999999999999999999", math.MaxInt64}, {"0xffffffffffffffffff", math.MaxInt64},
		{"4294967297", 4294967297}, {"- 1", 0}, {"+-1", 0},
	} {
		if got := cStrtol(tc.s); got != tc.want {
			t.Errorf("cStrtol(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

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
		if got := expandShortOptions(fs, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("expandShortOptions(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParsePermuted(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := fs.Bool("v", false, "")
	d := fs.String("d", "", "")
	ops, err := parsePermuted(fs, []string{"a", "-v", "b", "-d", "x", "--", "-c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if !*v || *d != "x" || !slices.Equal(ops, []string{"a", "b", "-c", "d"}) {
		t.Errorf("v=%v d=%q operands=%q", *v, *d, ops)
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
