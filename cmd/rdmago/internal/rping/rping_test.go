package rping

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func TestRpInfo(t *testing.T) {
	m := rpInfo{Addr: 0x00007f1234567000, RKey: 0x1a2b3c, Size: 64}
	var b [rpInfoSize]byte
	m.encode(b[:])
	// struct rping_rdma_info: __be64 buf, __be32 rkey, __be32 size.
	want := []byte{0, 0, 0x7f, 0x12, 0x34, 0x56, 0x70, 0, 0, 0x1a, 0x2b, 0x3c, 0, 0, 0, 64}
	if !bytes.Equal(b[:], want) {
		t.Errorf("encode = % x, want % x", b, want)
	}
	if got, err := decodeRpInfo(want); err != nil || got != m {
		t.Errorf("decode = %+v, %v; want %+v", got, err, m)
	}
}

func TestRpFill(t *testing.T) {
	for _, tc := range []struct {
		ping  int32
		start int
		size  int
		want  string
	}{
		// What rping -c -S 40 -v prints for its first pings.
		{0, 'A', 40, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
		{1, 'B', 40, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ["},
		{2, 'C', 40, "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\"},
		// The default size, 64.
		{0, 'A', 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		// The smallest size rping accepts: 13 header bytes, 9 letters, NUL.
		{0, 'A', rpMinSize, "rdma-ping-0: ABCDEFGHI"},
		// Wrapping from 'z' to 'A' within a ping.
		{7, 'x', 20, "rdma-ping-7: xyzABC"},
		// A header longer than the buffer: snprintf truncates it and no
		// pattern follows (sizes rping reaches only when a later -a
		// overwrites its -S error).
		{12345, 'A', 10, "rdma-ping"},
		{0, 'A', 1, ""},
	} {
		buf := bytes.Repeat([]byte{0xee}, tc.size)
		rpFill(buf, tc.ping, tc.start)
		if got := cStr(buf); got != tc.want {
			t.Errorf("rpFill(ping %d, start %q, size %d) = %q, want %q", tc.ping, rune(tc.start), tc.size, got, tc.want)
		}
		if buf[tc.size-1] != 0 {
			t.Errorf("rpFill(ping %d, size %d): last byte %#x, want NUL", tc.ping, tc.size, buf[tc.size-1])
		}
	}
	// The client's sequence of starts wraps from 'z' to 'A' too, and
	// rpPingText knows it.
	start := rpFirstChar
	for ping := int32(0); ping < 200; ping++ {
		buf := make([]byte, 100)
		rpFill(buf, ping, start)
		if got := rpPingText(ping, 100); got != cStr(buf) {
			t.Fatalf("rpPingText(%d) = %q, want %q", ping, got, cStr(buf))
		}
		if ping == 57 && start != 'z' || ping == 58 && start != 'A' {
			t.Errorf("ping %d starts with %q", ping, rune(start))
		}
		start = rpNextStart(start)
	}
}

func TestCStrHelpers(t *testing.T) {
	if cStr([]byte("ab\x00cd")) != "ab" || cStr([]byte("abc")) != "abc" || cStr(nil) != "" {
		t.Error("cStr")
	}
	if cStrlen([]byte("ab\x00cd")) != 2 || cStrlen([]byte("abc")) != 3 {
		t.Error("cStrlen")
	}
}

func TestCAtoi(t *testing.T) {
	for in, want := range map[string]int32{
		"0": 0, "64": 64, " 42": 42, "+7": 7, "-1": -1, "010": 10, "0x10": 0, "12abc": 12, "": 0, "abc": 0,
		"2147483647": 2147483647, "2147483648": -2147483648, "4294967296": 0,
		"99999999999999999999":  -1, // strtol saturates at LONG_MAX; atoi keeps its low bits
		"-99999999999999999999": 0,
	} {
		if got := clib.Atoi(in); got != want {
			t.Errorf("cAtoi(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestRpSem(t *testing.T) {
	s := newRpSem()
	s.post()
	s.post()
	ctx := context.Background()
	for i := range 2 {
		if !s.wait(ctx) {
			t.Fatalf("wait %d after two posts failed", i)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if s.wait(cctx) {
		t.Fatal("wait without a post returned true")
	}
	done := make(chan bool)
	go func() { done <- s.wait(ctx) }()
	time.Sleep(10 * time.Millisecond)
	s.post()
	if !<-done {
		t.Fatal("a post did not wake the waiter")
	}
}

func TestRpStateString(t *testing.T) {
	if rpDisconnected != 10 || rpReadAdv != 6 || rpError != 11 || rpIdle != 1 {
		t.Fatal("states do not have rping's numbers")
	}
	if rpWriteComplete.String() != "RDMA_WRITE_COMPLETE" || rpState(99).String() != "rpState(99)" {
		t.Error("String")
	}
}

// withLookup makes rping's -a and -I resolve only numeric addresses and
// "peer", and fail "nosuch" and "flaky" as getaddrinfo does.
func withLookup(t *testing.T) {
	old := rpLookup
	t.Cleanup(func() { rpLookup = old })
	rpLookup = func(_ context.Context, host string) (netip.Addr, error) {
		switch host {
		case "peer":
			return netip.MustParseAddr("10.0.5.2"), nil
		case "nosuch":
			return netip.Addr{}, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		case "flaky":
			return netip.Addr{}, &net.DNSError{Err: "timeout", Name: host, IsTimeout: true, IsTemporary: true}
		}
		return netip.ParseAddr(host)
	}
}

func TestRpingOptions(t *testing.T) {
	withLookup(t)
	var usage bytes.Buffer
	rpUsage(&usage)
	for _, tc := range []struct {
		args           []string
		run            bool
		status         int
		stdout, stderr string
		check          func(o rpOptions) bool
	}{
		{args: nil, status: 22, stdout: usage.String()},
		{args: []string{"-h"}, status: 22, stdout: usage.String()}, // rping has no -h
		{args: []string{"-s"}, run: true, check: func(o rpOptions) bool {
			return o.server == 1 && o.addr == netip.IPv4Unspecified() && o.port == 7174 && o.size == 64 && o.count == 0
		}},
		{args: []string{"-c", "-a", "10.0.2.15", "-p", "7000", "-C", "5", "-S", "100", "-vVV"}, run: true, check: func(o rpOptions) bool {
			return o.server == 0 && o.addr.String() == "10.0.2.15" && o.port == 7000 && o.count == 5 && o.size == 100 &&
				o.verbose == 1 && o.validate == 2 && o.debug == 0
		}},
		// Bundled, glued and permuted as getopt takes them; operands ignored.
		{args: []string{"extra", "-ca::1", "-p7001", "-qP", "-I", "peer"}, run: true, check: func(o rpOptions) bool {
			return o.server == 0 && o.addr.String() == "::1" && o.port == 7001 && o.selfQP && o.persistent && o.src.String() == "10.0.5.2"
		}},
		// -d prints the options that follow it, as rping does.
		{args: []string{"-s", "-d", "-c", "-p", "9", "-S", "30", "-C", "3", "-v", "-V"}, run: true,
			stdout: "client\nport 9\nsize 30\ncount 3\nverbose\nvalidate data\n"},
		// The port is atoi's value in 16 bits.
		{args: []string{"-s", "-p", "70000"}, run: true, check: func(o rpOptions) bool { return o.port == 70000&0xffff }},
		{args: []string{"-s", "-S", "22"}, status: 22, stderr: "Invalid size 22 (valid range is 23 to 65536)\n"},
		{args: []string{"-s", "-S", "65536"}, status: 22, stderr: "Invalid size 65536 (valid range is 23 to 65536)\n"},
		{args: []string{"-s", "-S", "65535"}, run: true},
		{args: []string{"-s", "-C", "-1"}, status: 22, stderr: "Invalid count -1\n"},
		{args: []string{"-s", "-x"}, status: 22, stdout: usage.String()},
		{args: []string{"-s", "-t", "1"}, status: 22, stdout: usage.String()},
		{args: []string{"-s", "-a"}, status: 22, stdout: usage.String()},
		// An unknown option ends parsing at once, whatever came before.
		{args: []string{"-S", "1", "-x", "-S", "2"}, status: 22, stderr: "Invalid size 1 (valid range is 23 to 65536)\n", stdout: usage.String()},
		{args: []string{"-c"}, run: true},
		{args: []string{"-s", "-a", "nosuch"}, status: 254, stdout: "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n"},
		{args: []string{"-s", "-a", "flaky"}, status: 253, stdout: "getaddrinfo failed (Temporary failure in name resolution) - invalid hostname or IP address\n"},
		// Each -a or -I sets the status anew, so a later good one clears an
		// earlier failure, even a bad -S (rping then runs with that size).
		{args: []string{"-s", "-a", "nosuch", "-a", "peer"}, run: true,
			stdout: "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n"},
		{args: []string{"-s", "-S", "10", "-a", "10.0.2.15"}, run: true, stderr: "Invalid size 10 (valid range is 23 to 65536)\n",
			check: func(o rpOptions) bool { return o.size == 10 }},
		{args: []string{"-c", "-C", "-1", "-I", "peer"}, run: true, stderr: "Invalid count -1\n"},
		// -K, rdmago's own: the keepalive's bound in milliseconds.
		{args: []string{"-s", "-K", "2000"}, run: true, check: func(o rpOptions) bool { return o.keepAlive == 2000 }},
		{args: []string{"-s", "-K", "3"}, status: 22, stderr: "Invalid keepalive 3 ms (at least 4)\n"},
	} {
		var o, e bytes.Buffer
		opts, status, run := rpParse(context.Background(), tc.args, &o, &e)
		if run != tc.run || (!run && int(uint8(status)) != tc.status) || o.String() != tc.stdout || e.String() != tc.stderr {
			t.Errorf("rping %q: run %v status %d\nstdout %q\nstderr %q\nwant run %v status %d\nstdout %q\nstderr %q",
				tc.args, run, status, o.String(), e.String(), tc.run, tc.status, tc.stdout, tc.stderr)
			continue
		}
		if tc.check != nil && !tc.check(opts) {
			t.Errorf("rping %q: options %+v", tc.args, opts)
		}
	}
}

// The whole command, in-process, for what fails before a device is used.
func TestRpingCommandStatuses(t *testing.T) {
	withLookup(t)
	for _, tc := range []struct {
		args   []string
		status int
		stdout string // a substring
	}{
		{[]string{"rping"}, 22, "rdmago rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"},
		{[]string{"rping", "-h"}, 22, "\t-P\t\tpersistent server mode allowing multiple connections\n"},
		{[]string{"rping", "-c", "-a", "nosuch"}, 254, "getaddrinfo failed"},
		{[]string{"help", "rping"}, 0, "\t-q\t\tuse self-created, self-modified QP\n"},
	} {
		o, _, st := tooltest.Run(Commands(), tc.args...)
		if st != tc.status || !strings.Contains(o, tc.stdout) {
			t.Errorf("rdmago %q: status %d, stdout %q", tc.args, st, o)
		}
	}
}

func TestRpOutputExit(t *testing.T) {
	var o, e bytes.Buffer
	out := &rpOutput{stdout: &o, stderr: &e}
	out.write(false, "a\n")
	out.write(true, "b\n")
	if !out.exit() || out.exit() {
		t.Error("exit: first call must report true, later ones false")
	}
	out.write(false, "c\n")
	fmtW := syncWriter{out, true}
	fmtW.Write([]byte("d\n"))
	if o.String() != "a\n" || e.String() != "b\n" {
		t.Errorf("after exit: stdout %q, stderr %q", o.String(), e.String())
	}
}
