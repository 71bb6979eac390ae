package clib

import (
	"encoding/hex"
	"math"
	"net/netip"
	"testing"
)

// inet6Cases pair addresses with what glibc's inet_ntop(AF_INET6) makes of
// them. The expectations were produced with glibc 2.36 (Debian 12) through
// Python's socket.inet_ntop, which calls it: hand-picked edge cases first,
// then addresses with random groups biased toward 0, 1 and ffff.
var inet6Cases = []struct{ hex, want string }{
	{"00000000000000000000000000000000", "::"},
	{"00000000000000000000000000000001", "::1"},
	{"00000000000000000000000000000002", "::2"},
	{"00000000000000000000000000010000", "::0.1.0.0"},
	{"00000000000000000000ffff00000000", "::ffff:0.0.0.0"},
	{"00000000000000000000ffff01020304", "::ffff:1.2.3.4"},
	{"0000000000000000ffff000001020304", "::ffff:0:102:304"},
	{"00000000000000000000000001020304", "::1.2.3.4"},
	{"00000000000000000000000000000100", "::100"},
	{"00010000000000000000000000000000", "1::"},
	{"00010000000000010000000000000000", "1:0:0:1::"},
	{"00000001000000000000000000000000", "0:1::"},
	{"00000000000000000000000100000000", "::1:0:0"},
	{"00010002000300040005000600070008", "1:2:3:4:5:6:7:8"},
	{"00010000000300040005000600070008", "1:0:3:4:5:6:7:8"},
	{"00010000000000040000000000070008", "1::4:0:0:7:8"},
	{"00010000000000040005000000000000", "1:0:0:4:5::"},
	{"00000000000100000000000000010000", "0:0:1::1:0"},
	{"fe80000000000000505400fffe123456", "fe80::5054:ff:fe12:3456"},
	{"20010db8000000000000000000000001", "2001:db8::1"},
	{"00000000000000000000ffffffffffff", "::ffff:255.255.255.255"},
	{"00000000000000000000fffe01020304", "::fffe:102:304"},
	{"00000000000000000001ffff01020304", "::1:ffff:102:304"},
	{"0064ff9b000000000000000001020304", "64:ff9b::102:304"},
	{"00000000000000000000ffff00010002", "::ffff:0.1.0.2"},
	{"00010000000000000000ffff01020304", "1::ffff:102:304"},
	{"00000000000000000000ffff0a00020f", "::ffff:10.0.2.15"},
	{"fe800000000000000001000000000000", "fe80::1:0:0:0"},
	{"ffffffffffffffffffffffffffffffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	{"00010000000200000003000000040000", "1:0:2:0:3:0:4:0"},
	{"0000ca2600000000ffff000000010000", "0:ca26::ffff:0:1:0"},
	{"000000000000ffff0000000000000000", "0:0:0:ffff::"},
	{"ffffffff00000000ffffffffffff0001", "ffff:ffff::ffff:ffff:ffff:1"},
	{"0000ffff000000005c0a0000ffff0000", "0:ffff::5c0a:0:ffff:0"},
	{"000000000000000000011412ffff0000", "::1:1412:ffff:0"},
	{"ffffffff00000000f2bd00009e840000", "ffff:ffff::f2bd:0:9e84:0"},
	{"c58600000000ffff0001000000000001", "c586::ffff:1:0:0:1"},
	{"0001000000010000ffff8e8d00000000", "1:0:1:0:ffff:8e8d::"},
	{"0000000076c30000ffff000000000001", "::76c3:0:ffff:0:0:1"},
	{"ffff0000000100010001000100000000", "ffff:0:1:1:1:1::"},
	{"00010000ffff0000ffffffff00000000", "1:0:ffff:0:ffff:ffff::"},
	{"ffff0000000000010000000100010000", "ffff::1:0:1:1:0"},
	{"0000af6d0001ffff00000000ffff989f", "0:af6d:1:ffff::ffff:989f"},
	{"2e98ffff00000000a8c9ffff0000cd26", "2e98:ffff::a8c9:ffff:0:cd26"},
	{"00000000000000010000000100000000", "::1:0:1:0:0"},
	{"000000000000ffff0001b0212b680001", "::ffff:1:b021:2b68:1"},
	{"0001000100000001cd822b7a00000000", "1:1:0:1:cd82:2b7a::"},
	{"ffffee42fffff2de00000000074affff", "ffff:ee42:ffff:f2de::74a:ffff"},
	{"0001000000000000ffff000000001f2e", "1::ffff:0:0:1f2e"},
	{"0001ffffffffffff0001ffff00000000", "1:ffff:ffff:ffff:1:ffff::"},
	{"ffffffff00000000000000000000ffff", "ffff:ffff::ffff"},
	{"0000000066180001ffff7eccffff0001", "::6618:1:ffff:7ecc:ffff:1"},
	{"00010001000025240001000000004f13", "1:1:0:2524:1::4f13"},
	{"000000000000000100000000ffff0000", "::1:0:0:ffff:0"},
	{"000000002f340000ffff00010001ffff", "::2f34:0:ffff:1:1:ffff"},
	{"ffff0000000000000000000000010001", "ffff::1:1"},
	{"fffffd3d0000000000010000089e0000", "ffff:fd3d::1:0:89e:0"},
	{"ffff000000000000ffff000000000000", "ffff::ffff:0:0:0"},
	{"000000000000ffff0000ffff00000000", "::ffff:0:ffff:0:0"},
	{"00000000ffff00000000dd46ffffffff", "::ffff:0:0:dd46:ffff:ffff"},
	{"9d950000000000010000000024350001", "9d95::1:0:0:2435:1"},
	{"00002b41ffffffff7c03000000000000", "0:2b41:ffff:ffff:7c03::"},
	{"00000000ffff00000000000000000001", "0:0:ffff::1"},
	{"0001ffff000000000000000100010000", "1:ffff::1:1:0"},
	{"9bc500004f7d00000000917f0000dbc5", "9bc5:0:4f7d::917f:0:dbc5"},
	{"ffff083b0000000044240000000119ff", "ffff:83b::4424:0:1:19ff"},
	{"09a50001000000002f1321d100000000", "9a5:1::2f13:21d1:0:0"},
	{"7835000000010000f540000000000000", "7835:0:1:0:f540::"},
	{"8204ffff00000000000032f46f750000", "8204:ffff::32f4:6f75:0"},
	{"00010001ffff00000001000000000000", "1:1:ffff:0:1::"},
	{"0000000000000000ffff000000000001", "::ffff:0:0:1"},
	{"00000000fbbf00019a99000100010000", "::fbbf:1:9a99:1:1:0"},
	{"00000000000064380600000000000001", "::6438:600:0:0:1"},
	{"0000000000000000923d000000010000", "::923d:0:1:0"},
	{"00010edaffff68280000000146f20001", "1:eda:ffff:6828:0:1:46f2:1"},
	{"ffff000000010000000000010000ffff", "ffff:0:1::1:0:ffff"},
	{"000055ac0000ffffffff000100010000", "0:55ac:0:ffff:ffff:1:1:0"},
	{"00000000ffff00000000ffff00000001", "::ffff:0:0:ffff:0:1"},
	{"d3e8000100000001ffff000000000000", "d3e8:1:0:1:ffff::"},
	{"0001000100000000d9b3ffff00000001", "1:1::d9b3:ffff:0:1"},
	{"000100000000ffff37c0000000000000", "1:0:0:ffff:37c0::"},
	{"133f0000ffffdff60000000000010000", "133f:0:ffff:dff6::1:0"},
	{"0000000100000001ffff0000d2d80000", "0:1:0:1:ffff:0:d2d8:0"},
	{"0000ff2200000000000000011175ad15", "0:ff22::1:1175:ad15"},
	{"0000ffff00000001ffff00010000ffff", "0:ffff:0:1:ffff:1:0:ffff"},
	{"00011a8a00000001a0de000000000000", "1:1a8a:0:1:a0de::"},
	{"00009fa7000000010000000000000001", "0:9fa7:0:1::1"},
	{"ffff00010000000019380000ffff0000", "ffff:1::1938:0:ffff:0"},
	{"000000000000000000000000000063cf", "::63cf"},
}

func TestInet6String(t *testing.T) {
	for _, tc := range inet6Cases {
		b, err := hex.DecodeString(tc.hex)
		if err != nil || len(b) != 16 {
			t.Fatalf("bad case %q", tc.hex)
		}
		a := [16]byte(b)
		if got := Inet6String(a); got != tc.want {
			t.Errorf("inet6String(%s) = %q, want %q (glibc)", tc.hex, got, tc.want)
		}
	}
}

// TestInet6StringVsNetip checks the one documented difference from
// net/netip: glibc's IPv4-compatible form. Everywhere else they agree.
func TestInet6StringVsNetip(t *testing.T) {
	for _, tc := range inet6Cases {
		b, _ := hex.DecodeString(tc.hex)
		a := [16]byte(b)
		np := netip.AddrFrom16(a).String()
		compat := [12]byte(a[:12]) == [12]byte{} && (a[12] != 0 || a[13] != 0)
		if compat {
			if np == tc.want {
				t.Errorf("%s: netip gives glibc's %q; expected it to differ", tc.hex, np)
			}
			continue
		}
		if np != tc.want {
			t.Errorf("%s: netip %q, glibc %q", tc.hex, np, tc.want)
		}
	}
}

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
		if got := Strtol(tc.s); got != tc.want {
			t.Errorf("cStrtol(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

type closeCounter struct{ n int }

func (c *closeCounter) Close() error { c.n++; return nil }

func TestCloseIf(t *testing.T) {
	var none *closeCounter
	CloseIf(none) // must not call Close on nil
	c := &closeCounter{}
	CloseIf(c)
	if c.n != 1 {
		t.Fatalf("CloseIf closed a non-nil value %d times, want 1", c.n)
	}
}
