package pingpong

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/qp"
)

func msgOf(s string) [ppMsgSize]byte {
	var m [ppMsgSize]byte
	copy(m[:], s)
	return m
}

func TestWireGID(t *testing.T) {
	// gid_to_wire_gid's output for ::ffff:10.0.2.15 and fe80::5054:ff:fe12:3456,
	// as ibv_rc_pingpong sends them on x86-64.
	for _, tc := range []struct {
		gid  [16]byte
		wire string
	}{
		{tooltest.RoCEGID, "00000000000000000000ffff0a00020f"},
		{[16]byte{0xfe, 0x80, 8: 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}, "fe80000000000000505400fffe123456"},
		{[16]byte{}, "00000000000000000000000000000000"},
	} {
		if got := wireGID(tc.gid); got != tc.wire {
			t.Errorf("wireGID(%x) = %q, want %q", tc.gid, got, tc.wire)
		}
		g, err := parseWireGID(tc.wire)
		if err != nil || g != tc.gid {
			t.Errorf("parseWireGID(%q) = %x, %v; want %x", tc.wire, g, err, tc.gid)
		}
		if g, err := parseWireGID(strings.ToUpper(tc.wire)); err != nil || g != tc.gid {
			t.Errorf("parseWireGID(upper %q) = %x, %v", tc.wire, g, err)
		}
	}
	for _, bad := range []string{"", "00", strings.Repeat("0", 31), strings.Repeat("0", 33), strings.Repeat("0", 31) + "g", "0x" + strings.Repeat("0", 30)} {
		if _, err := parseWireGID(bad); err == nil {
			t.Errorf("parseWireGID(%q): no error", bad)
		}
	}
}

func TestDestEncode(t *testing.T) {
	d := ppDest{LID: 0, QPN: 0x11, PSN: 0x0d6a2f, GID: tooltest.RoCEGID}
	m, err := d.encode()
	if err != nil {
		t.Fatal(err)
	}
	want := "0000:000011:0d6a2f:00000000000000000000ffff0a00020f\x00"
	if string(m[:]) != want || len(want) != ppMsgSize {
		t.Errorf("encode = %q, want %q", m[:], want)
	}
	d = ppDest{LID: 0xbeef, QPN: 0xabcdef, PSN: 0xffffff}
	m, _ = d.encode()
	if want := "beef:abcdef:ffffff:" + strings.Repeat("0", 32) + "\x00"; string(m[:]) != want {
		t.Errorf("encode = %q, want %q", m[:], want)
	}
	// Wider than the C buffer holds.
	if _, err := (ppDest{LID: 0x10000, QPN: 0x1000000}).encode(); err == nil {
		t.Error("encode of a 5-digit LID and 7-digit QPN: no error")
	}
	got, err := decodeDest(msgOf("0000:000011:0d6a2f:00000000000000000000ffff0a00020f"))
	if err != nil || got != (ppDest{QPN: 0x11, PSN: 0xd6a2f, GID: tooltest.RoCEGID}) {
		t.Errorf("decode = %+v, %v", got, err)
	}
}

func TestDestDecode(t *testing.T) {
	gid := "00000000000000000000ffff0a00020f"
	// What sscanf("%x") would also read: fewer digits, upper case.
	got, err := decodeDest(msgOf("1:A:bC:" + strings.ToUpper(gid)))
	if err != nil || got != (ppDest{LID: 1, QPN: 0xa, PSN: 0xbc, GID: tooltest.RoCEGID}) {
		t.Errorf("decode = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		msg  [ppMsgSize]byte
		want string // in the error
	}{
		{msgOf(""), "want LID:QPN:PSN:GID"},
		{msgOf("0000:000011:0d6a2f"), "want LID:QPN:PSN:GID"},
		{msgOf("0:0:0:" + gid + ":"), "want LID:QPN:PSN:GID"},
		{msgOf(":000011:0d6a2f:" + gid), "LID: \"\": want 1 to 8 hex digits"},
		{msgOf("0000:00x011:0d6a2f:" + gid), "QPN: \"00x011\": \"x\" is not a hex digit"},
		{msgOf("0000:000011:123456789:" + gid[:29]), "PSN: \"123456789\": want 1 to 8 hex digits"},
		{msgOf("0000:000011:0d6a2f:" + gid[:31]), "want 32 hex digits, got 31"},
		{msgOf("0000:000011:0d6a2f:" + gid[:31] + "z"), "\"0z\" is not a hex digit"},
		{msgOf("0000:000011:0d6a2f:" + gid + "\x00junk"), ""}, // after the NUL: ignored
		{[ppMsgSize]byte(bytes.Repeat([]byte("0"), ppMsgSize)), "no NUL terminator"},
	} {
		_, err := decodeDest(tc.msg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("decode(%q): %v", tc.msg[:], err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("decode(%q) = %v, want an error containing %q", tc.msg[:], err, tc.want)
		}
	}
}

// peer runs f on the far end of a pipe and returns the near end and a
// function that closes it and waits for f.
func peer(t *testing.T, f func(c net.Conn)) (net.Conn, func()) {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer b.Close()
		f(b)
	}()
	wait := func() {
		a.Close()
		<-done
	}
	t.Cleanup(wait)
	return a, wait
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Errorf("peer read: %v", err)
	}
	return b
}

func TestExchangeClient(t *testing.T) {
	local := ppDest{QPN: 0x12, PSN: 0xfbbc6e, GID: tooltest.RoCEGID}
	srv := ppDest{QPN: 0x11, PSN: 0x4f34b6, GID: tooltest.RoCEGID}
	var sawLocal, sawDone []byte
	conn, wait := peer(t, func(c net.Conn) {
		sawLocal = readN(t, c, ppMsgSize)
		m, _ := srv.encode()
		c.Write(m[:])
		sawDone = readN(t, c, 5)
	})
	got, err := ppProto{slots: 1}.client(conn, []ppDest{local})
	wait()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]ppDest{srv}, got); d != "" {
		t.Errorf("remote (-want +got):\n%s", d)
	}
	m, _ := local.encode()
	if !bytes.Equal(sawLocal, m[:]) || string(sawDone) != "done\x00" {
		t.Errorf("server saw %q then %q", sawLocal, sawDone)
	}
}

func TestExchangeServer(t *testing.T) {
	local := ppDest{QPN: 0x11, PSN: 0x4f34b6, GID: tooltest.RoCEGID}
	cli := ppDest{QPN: 0x12, PSN: 0xfbbc6e, GID: tooltest.RoCEGID}
	var sawLocal []byte
	conn, wait := peer(t, func(c net.Conn) {
		m, _ := cli.encode()
		c.Write(m[:])
		sawLocal = readN(t, c, ppMsgSize)
		c.Write([]byte("done\x00"))
	})
	var connected []ppDest
	got, err := ppProto{slots: 1}.server(conn, []ppDest{local}, func(r []ppDest) error {
		connected = r
		return nil
	})
	wait()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]ppDest{cli}, got); d != "" || len(connected) != 1 {
		t.Errorf("remote (-want +got):\n%s; connect got %v", d, connected)
	}
	m, _ := local.encode()
	if !bytes.Equal(sawLocal, m[:]) {
		t.Errorf("client saw %q", sawLocal)
	}
}

// ibv_srq_pingpong sends 256 messages each way, zeros past its QPs, and
// reads them however TCP splits them.
func TestExchangeSRQ(t *testing.T) {
	local := []ppDest{{QPN: 0x17, PSN: 1, GID: tooltest.RoCEGID}, {QPN: 0x18, PSN: 2, GID: tooltest.RoCEGID}}
	remote := []ppDest{{QPN: 0x27, PSN: 3, GID: tooltest.RoCEGID}, {QPN: 0x28, PSN: 4, GID: tooltest.RoCEGID}}
	var wire bytes.Buffer
	for i := 0; i < ppSRQSlots; i++ {
		var d ppDest
		if i < len(remote) {
			d = remote[i]
		}
		m, _ := d.encode()
		wire.Write(m[:])
	}
	var saw []byte
	conn, wait := peer(t, func(c net.Conn) {
		saw = readN(t, c, ppSRQSlots*ppMsgSize)
		// Dribble the answer out in odd pieces.
		b := wire.Bytes()
		for len(b) > 0 {
			n := min(len(b), 37)
			c.Write(b[:n])
			b = b[n:]
		}
		readN(t, c, 5)
	})
	got, err := ppProto{slots: ppSRQSlots, srq: true}.client(conn, local)
	wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != ppSRQSlots || got[0] != remote[0] || got[1] != remote[1] || got[2] != (ppDest{}) {
		t.Errorf("remote: %d entries, first three %+v", len(got), got[:min(3, len(got))])
	}
	if len(saw) != ppSRQSlots*ppMsgSize || string(saw[ppMsgSize:ppMsgSize+6]) != "0000:0" ||
		string(saw[2*ppMsgSize:3*ppMsgSize]) != "0000:000000:000000:"+strings.Repeat("0", 32)+"\x00" {
		t.Errorf("server saw %q…", saw[:min(len(saw), 3*ppMsgSize)])
	}
}

func TestExchangeErrors(t *testing.T) {
	good, _ := ppDest{QPN: 1}.encode()
	for _, tc := range []struct {
		name   string
		proto  ppProto
		server bool
		peer   func(c net.Conn)
		fail   error // from connect
		want   string
	}{
		{"client: server closes", ppProto{slots: 1}, false, func(c net.Conn) { readN(t, c, ppMsgSize) },
			nil, "client read/write: Success\nCouldn't read/write remote address"},
		{"client: server sends half", ppProto{slots: 1}, false, func(c net.Conn) { readN(t, c, ppMsgSize); c.Write(good[:20]) },
			nil, "client read/write: Success\nCouldn't read/write remote address"},
		{"srq client: server closes", ppProto{slots: ppSRQSlots, srq: true}, false, func(c net.Conn) {
			readN(t, c, ppSRQSlots*ppMsgSize)
			c.Write(good[:])
			c.Write(good[:10])
		}, nil, "client read: Success\n10/52: Couldn't read remote address [1]"},
		{"client: garbage", ppProto{slots: 1}, false, func(c net.Conn) {
			readN(t, c, ppMsgSize)
			m := msgOf("hello, world")
			c.Write(m[:])
		}, nil, "Couldn't read remote address: malformed address message \"hello, world\""},
		{"server: client closes", ppProto{slots: 1}, true, func(c net.Conn) { c.Write(good[:7]) },
			nil, "server read: Success\n7/52: Couldn't read remote address"},
		{"srq server: client closes", ppProto{slots: ppSRQSlots, srq: true}, true, func(c net.Conn) { c.Write(good[:]) },
			nil, "server read: Success\n0/52: Couldn't read remote address [1]"},
		{"server: connect fails", ppProto{slots: 1}, true, func(c net.Conn) { c.Write(good[:]) },
			ppMsg("Failed to modify QP to RTR"), "Failed to modify QP to RTR\nCouldn't connect to remote QP"},
		{"server: no done", ppProto{slots: 1}, true, func(c net.Conn) { c.Write(good[:]); readN(t, c, ppMsgSize) },
			nil, "Couldn't send/recv local address: EOF"},
		{"server: bad done", ppProto{slots: 1}, true, func(c net.Conn) { c.Write(good[:]); readN(t, c, ppMsgSize); c.Write([]byte("DONE!")) },
			nil, "Couldn't send/recv local address: the client ended with \"DONE!\", want \"done\\x00\""},
		{"srq server: no done", ppProto{slots: ppSRQSlots, srq: true}, true, func(c net.Conn) {
			for range ppSRQSlots {
				c.Write(good[:])
			}
			readN(t, c, ppSRQSlots*ppMsgSize)
		}, nil, "client write: Success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, _ := peer(t, tc.peer)
			var err error
			if tc.server {
				_, err = tc.proto.server(conn, []ppDest{{QPN: 2}}, func([]ppDest) error { return tc.fail })
			} else {
				_, err = tc.proto.client(conn, []ppDest{{QPN: 2}})
			}
			var pe *ppError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want a *ppError", err, err)
			}
			if got := err.Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error text %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAddressLine(t *testing.T) {
	d := ppDest{QPN: 0x11, PSN: 0x0d6a2f, GID: tooltest.RoCEGID}
	for _, tc := range []struct {
		which string
		ud    bool
		want  string
	}{
		{"local", false, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x0d6a2f, GID ::ffff:10.0.2.15\n"},
		{"remote", false, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x0d6a2f, GID ::ffff:10.0.2.15\n"},
		{"local", true, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x0d6a2f: GID ::ffff:10.0.2.15\n"},
	} {
		if got := ppAddressLine(tc.which, d, tc.ud); got != tc.want {
			t.Errorf("ppAddressLine(%s, ud %v) = %q, want %q", tc.which, tc.ud, got, tc.want)
		}
	}
	if got := ppAddressLine("local", ppDest{LID: 0x1234567}, false); !strings.Contains(got, "LID 0x1234567,") || !strings.HasSuffix(got, "GID ::\n") {
		t.Errorf("wide LID, zero GID: %q", got)
	}
}

func TestReport(t *testing.T) {
	// What the C programs' printf lines give, from a C program compiled
	// with gcc on x86-64 (float time, long long bytes, float division).
	for _, tc := range []struct {
		size, iters uint32
		usec        int64
		want        string
		amd64       bool // NaN signs are the FPU's: x86's default NaN is negative
	}{
		{4096, 50, 276914, "409600 bytes in 0.28 seconds = 11.83 Mbit/sec\n50 iters in 0.28 seconds = 5538.28 usec/iter\n", false},
		{1024, 1000, 1, "2048000 bytes in 0.00 seconds = 16384000.00 Mbit/sec\n1000 iters in 0.00 seconds = 0.00 usec/iter\n", false},
		{4096, 1000, 123456789, "8192000 bytes in 123.46 seconds = 0.53 Mbit/sec\n1000 iters in 123.46 seconds = 123456.79 usec/iter\n", false},
		{1, 3, 7, "6 bytes in 0.00 seconds = 6.86 Mbit/sec\n3 iters in 0.00 seconds = 2.33 usec/iter\n", false},
		{4096, 0, 0, "0 bytes in 0.00 seconds = -nan Mbit/sec\n0 iters in 0.00 seconds = -nan usec/iter\n", true},
		{4096, 0, 5, "0 bytes in 0.00 seconds = 0.00 Mbit/sec\n0 iters in 0.00 seconds = inf usec/iter\n", false},
		{65536, math.MaxUint32, 999999, "562949953290240 bytes in 1.00 seconds = 4503604129.93 Mbit/sec\n-1 iters in 1.00 seconds = 0.00 usec/iter\n", false},
		{4096, 50, 16777217, "409600 bytes in 16.78 seconds = 0.20 Mbit/sec\n50 iters in 16.78 seconds = 335544.31 usec/iter\n", false},
	} {
		if tc.amd64 && runtime.GOARCH != "amd64" {
			continue
		}
		if got := ppReport(tc.size, tc.iters, tc.usec); got != tc.want {
			t.Errorf("ppReport(%d, %d, %d) =\n%s want\n%s", tc.size, tc.iters, tc.usec, got, tc.want)
		}
	}
}

func TestCStrtoul(t *testing.T) {
	// What glibc's strtoul(s, NULL, 0) returns.
	for _, tc := range []struct {
		s    string
		want uint64
	}{
		{"18515", 18515}, {"0x10", 16}, {"010", 8}, {"-1", math.MaxUint64}, {"-2", math.MaxUint64 - 1},
		{"", 0}, {"abc", 0}, {" 7z", 7}, {"18446744073709551615", math.MaxUint64},
		{"18446744073709551616", math.MaxUint64}, {"-18446744073709551616", math.MaxUint64},
		{"9223372036854775808", 1 << 63}, {"+5", 5},
	} {
		if got := clib.Strtoul(tc.s); got != tc.want {
			t.Errorf("cStrtoul(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestPingpongOptions(t *testing.T) {
	def := func(k ppKind, f func(o *ppOptions)) ppOptions {
		o := ppDefaults(k)
		if f != nil {
			f(&o)
		}
		return o
	}
	for _, tc := range []struct {
		k    ppKind
		args []string
		want ppOptions
	}{
		{ppAll, nil, def(ppRC, nil)},
		{ppUD, nil, def(ppUD, nil)},
		{ppAll, []string{"--type", "ud"}, def(ppUD, nil)},
		{ppAll, []string{"--type=srq", "-q", "4"}, def(ppSRQ, func(o *ppOptions) { o.numQP = 4 })},
		{ppAll, []string{"-q", "4", "--type=srq"}, def(ppSRQ, func(o *ppOptions) { o.numQP = 4 })},
		{ppRC, []string{"-p", "0x4000", "-drxe0", "-i1", "-s", "64", "-m", "2048", "-r", "10", "-n50", "-l", "3", "-ecg", "1", "10.0.2.15"},
			def(ppRC, func(o *ppOptions) {
				o.port, o.devName, o.devSet, o.size, o.mtu, o.rxDepth, o.iters, o.sl = 0x4000, "rxe0", true, 64, qp.MTU2048, 10, 50, 3
				o.events, o.chk, o.gidIdx, o.server = true, true, 1, "10.0.2.15"
			})},
		{ppUC, []string{"host", "--port=7", "--ib-dev", "rxe1", "--gid-idx=-1", "--iters", "5", "--events", "--chk", "--mtu=256"},
			def(ppUC, func(o *ppOptions) {
				o.server, o.port, o.devName, o.devSet, o.iters, o.events, o.chk, o.mtu = "host", 7, "rxe1", true, 5, true, true, qp.MTU256
			})},
		{ppRC, []string{"-oPN", "--rx-d", "9"}, def(ppRC, func(o *ppOptions) { o.odp, o.prefetch, o.newSend, o.rxDepth = true, true, true, 9 })},
		{ppRC, []string{"-i", "257"}, def(ppRC, func(o *ppOptions) { o.ibPort = 257 })},
		{ppAll, []string{"--type", "srq", "-o", "-s", "1"}, def(ppSRQ, func(o *ppOptions) { o.odp, o.size = true, 1 })},
		{ppRC, []string{"--", "-host"}, def(ppRC, func(o *ppOptions) { o.server = "-host" })},
	} {
		o, stop := ppParse("x", tc.k, tc.args)
		if stop.kind != ppGo {
			t.Errorf("%v %q: stopped: %+v", tc.k, tc.args, stop)
			continue
		}
		if d := cmp.Diff(tc.want, o, cmp.AllowUnexported(ppOptions{})); d != "" {
			t.Errorf("%v %q (-want +got):\n%s", tc.k, tc.args, d)
		}
	}
}

func TestPingpongUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stdout string // substring
		stderr string // exact
	}{
		{"pingpong", []string{"-h"}, 0, "  -N, --new_send ", ""},
		{"pingpong", []string{"--help"}, 0, "--type=<type>", ""},
		{"pingpong", []string{"--type=srq", "-h"}, 0, "  -q, --num-qp=<num>     number of QPs to use (default 16)\n", ""},
		// ibv_ud_pingpong has no -h; rdmago pingpong's is its own.
		{"ud_pingpong", []string{"-h"}, 1, "  -s, --size=<size>      size of message to exchange (default 2048)\n", "rdmago ud_pingpong: invalid option -- 'h'\n"},
		{"rc_pingpong", []string{"-x"}, 1, "Usage:\n  rdmago rc_pingpong            start a server", "rdmago rc_pingpong: invalid option -- 'x'\n"},
		{"ud_pingpong", []string{"-m", "1024"}, 1, "Usage:", "rdmago ud_pingpong: invalid option -- 'm'\n"},
		{"pingpong", []string{"--type", "ud", "--mtu=1024"}, 1, "Usage:", "rdmago pingpong: unrecognized option '--mtu=1024'\n"},
		{"pingpong", []string{"-q", "2"}, 1, "Usage:", "rdmago pingpong: invalid option -- 'q'\n"},
		{"uc_pingpong", []string{"-o"}, 1, "Usage:", "rdmago uc_pingpong: invalid option -- 'o'\n"},
		{"rc_pingpong", []string{"-p"}, 1, "Usage:", "rdmago rc_pingpong: option requires an argument -- 'p'\n"},
		{"rc_pingpong", []string{"--port"}, 1, "Usage:", "rdmago rc_pingpong: option '--port' requires an argument\n"},
		{"rc_pingpong", []string{"--events=0"}, 1, "Usage:", "rdmago rc_pingpong: option '--events' doesn't allow an argument\n"},
		{"rc_pingpong", []string{"-p", "65536", "-x"}, 1, "Usage:", ""},
		{"rc_pingpong", []string{"-p", "-1"}, 1, "Usage:", ""},
		{"ud_pingpong", []string{"-p", "-1"}, 1, "Usage:", ""},
		{"rc_pingpong", []string{"-i", "0"}, 1, "Usage:", ""},
		{"rc_pingpong", []string{"-m", "1000"}, 1, "Usage:", ""},
		{"srq_pingpong", []string{"-s", "0"}, 1, "Usage:", ""},
		{"rc_pingpong", []string{"a", "b"}, 1, "Usage:", ""},
		{"pingpong", []string{"--type=xrc"}, 1, "Usage:", "rdmago pingpong: --type \"xrc\": want rc, uc, ud or srq\n"},
		{"srq_pingpong", []string{"-q", "600"}, 1, "", "rx_depth 500 is too small for 600 QPs -- must have at least one receive per QP.\n"},
		{"srq_pingpong", []string{"-q", "256", "-r", "1000"}, 1, "", "num_qp 256 must be less than 255\n"},
		{"rc_pingpong", []string{"-o", "-j"}, 1, "", "DM memory region can't be on demand\n"},
		{"rc_pingpong", []string{"-P"}, 1, "", "prefetch is valid only with on-demand memory region\n"},
	} {
		var o, e bytes.Buffer
		c := command.NewSet(Commands())[tc.name]
		if c == nil {
			t.Fatalf("no command %s", tc.name)
		}
		st := c.Run(tc.args, &o, &e)
		if st != tc.status || !strings.Contains(o.String(), tc.stdout) || e.String() != tc.stderr {
			t.Errorf("%s %q: status %d, stdout %q, stderr %q; want %d, %q, %q", tc.name, tc.args, st, o.String(), e.String(), tc.status, tc.stdout, tc.stderr)
		}
	}
}

// Without the named device the C programs stop before touching anything.
func TestPingpongNoSuchDevice(t *testing.T) {
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := pingpongMain(ctx, "pingpong", ppAll, []string{"-d", "rdmago_no_such_device"}, &o, &e)
	if st != 1 || o.Len() != 0 {
		t.Errorf("status %d, stdout %q, stderr %q", st, o.String(), e.String())
	}
	if s := e.String(); s != "IB device rdmago_no_such_device not found\n" && !strings.HasPrefix(s, "Failed to get IB devices list: ") {
		t.Errorf("stderr %q", s)
	}
}

// TestTSStats follows ibv_rc_pingpong's parse_single_wc over receive
// timestamps and its report: deltas across the clock's wrap, the minimum
// that starts at 0xffffffff (so a run whose every gap is longer reports
// that), the average printed with %f, and nothing when fewer than two
// receives carried timestamps.
func TestTSStats(t *testing.T) {
	for _, tc := range []struct {
		mask uint64
		ts   []uint64
		want string
	}{
		{0xffff, []uint64{100, 250, 0xfff0, 0x10, 0x10},
			"Max receive completion clock cycles = 65270\nMin receive completion clock cycles = 0\nAverage receive completion clock cycles = 16363.000000\n"},
		{1<<48 - 1, []uint64{0, 1, 3},
			"Max receive completion clock cycles = 2\nMin receive completion clock cycles = 1\nAverage receive completion clock cycles = 1.500000\n"},
		{1<<48 - 1, []uint64{0, 1 << 40},
			"Max receive completion clock cycles = 1099511627776\nMin receive completion clock cycles = 4294967295\nAverage receive completion clock cycles = 1099511627776.000000\n"},
		{1<<48 - 1, []uint64{5}, ""},
		{1<<48 - 1, nil, ""},
	} {
		s := newPPTSStats(tc.mask)
		for _, ts := range tc.ts {
			s.add(ts)
		}
		if got := s.report(); got != tc.want {
			t.Errorf("mask %#x, timestamps %d:\n%s want\n%s", tc.mask, tc.ts, got, tc.want)
		}
	}
}
