package perf

// Host tests of "rdmago perf": the exchange codec (against the bytes
// perftest writes), the option rules, and the printed header, address
// lines and tables (against perftest 6.06's output on the soft-RoCE VM).

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// perftest's address messages for the same values, with and without a
// GID, as sprintf(KEY_PRINT_FMT_GID) and sprintf(KEY_PRINT_FMT) produce
// them (the text, then NULs up to the message size).
var (
	perfTestDest = perfDest{LID: 0, OutReads: 0x80, QPN: 0x12, PSN: 0xbdec7b, RKey: 0x2ed,
		VAddr: 0x55aa616a9000, GID: tooltest.RoCEGID}
	perfTestMsgGID = "0000:0080:000012:bdec7b:000002ed:000055aa616a9000:" +
		"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:02:0f:00000000:"
	perfTestMsg = "0000:0080:000012:bdec7b:000002ed:000055aa616a9000:00000000"
)

func padNUL(s string, n int) []byte {
	b := make([]byte, n)
	copy(b, s)
	return b
}

func TestPerfDestEncode(t *testing.T) {
	m, err := perfTestDest.encode(true)
	if err != nil || !bytes.Equal(m, padNUL(perfTestMsgGID, perfKeyMsgSizeGID)) {
		t.Errorf("encode(GID) = %q, %v; want %q", m, err, perfTestMsgGID)
	}
	if len(perfTestMsgGID) != perfKeyMsgSizeGID-1 || len(perfTestMsg) != perfKeyMsgSize-1 {
		t.Fatalf("test messages of %d and %d bytes", len(perfTestMsgGID), len(perfTestMsg))
	}
	m, err = perfTestDest.encode(false)
	if err != nil || !bytes.Equal(m, padNUL(perfTestMsg, perfKeyMsgSize)) {
		t.Errorf("encode = %q, %v; want %q", m, err, perfTestMsg)
	}
	for _, withGID := range []bool{false, true} {
		m, _ := perfTestDest.encode(withGID)
		d, err := decodePerfDest(m, withGID)
		want := perfTestDest
		if !withGID {
			want.GID = [16]byte{}
		}
		if err != nil || d != want {
			t.Errorf("decode(encode(%v)) = %+v, %v", withGID, d, err)
		}
	}
	// Wider than perftest's fields: it would overflow its buffer.
	for _, d := range []perfDest{{LID: 0x10000}, {QPN: 0x1000000}, {PSN: 0x1000000}} {
		if _, err := d.encode(true); err == nil {
			t.Errorf("encode(%+v): no error", d)
		}
	}
}

// TestPerfDestStruct checks the address as it crosses rdma_cm: struct
// pingpong_dest, big-endian, as perftest's rdma_write_keys sends it.
func TestPerfDestStruct(t *testing.T) {
	d := perfDest{LID: 0x12, OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234,
		VAddr: 0x55d0c1e2f000, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 2, 15: 15}}
	m := d.encodeStruct()
	want := "00000012" + "00000010" + "00000011" + "00abcdef" + "00001234" + "00000000" + "000055d0c1e2f000" +
		"00000000000000000000ffff0a00020f" + "00000000" + "00000000"
	if got := hex.EncodeToString(m); got != want {
		t.Errorf("encodeStruct = %s, want %s", got, want)
	}
	if got, err := decodePerfDestStruct(m); err != nil || got != d {
		t.Errorf("decodePerfDestStruct = %+v, %v; want %+v", got, err, d)
	}
}

func TestPerfDestDecode(t *testing.T) {
	// perftest's reader takes any number of digits per field and either
	// case; rdmago's too.
	d, err := decodePerfDest(padNUL("1:80:12:BDEC7B:2ed:55aa616a9000:0:0:0:0:0:0:0:0:0:0:FF:ff:a:0:2:f:0:", perfKeyMsgSizeGID), true)
	want := perfTestDest
	want.LID = 1
	if err != nil || d != want {
		t.Errorf("decode = %+v, %v", d, err)
	}
	for _, bad := range []struct {
		msg     string
		withGID bool
	}{
		{perfTestMsgGID, false}, // too long for the format
		{strings.Replace(perfTestMsg, "000012", "0000g2", 1), false}, // not hex
		{strings.TrimSuffix(perfTestMsgGID, ":"), true},              // no final colon
		{strings.Replace(perfTestMsgGID, ":ff:ff:", ":ff:fff:", 1), true},
		{"0000:0080", false}, // fields missing
		{"", true},
	} {
		m := padNUL(bad.msg, perfMsgSize(bad.withGID))
		if len(bad.msg) >= len(m) {
			m = []byte(bad.msg)[:len(m)] // no NUL
		}
		if _, err := decodePerfDest(m, bad.withGID); err == nil {
			t.Errorf("decode(%q, %v): no error", bad.msg, bad.withGID)
		}
	}
	if _, err := decodePerfDest([]byte("short"), false); err == nil {
		t.Error("decode of a short message: no error")
	}
}

func TestPerfAtof(t *testing.T) {
	for s, want := range map[string]float64{"6.06": 6.06, "5.70\x00junk": 5.7, "": 0, "x": 0, " 5.": 5, "6.06a": 6.06} {
		if got := perfAtof(s); got != want {
			t.Errorf("perfAtof(%q) = %v, want %v", s, got, want)
		}
	}
}

// perfScript is the other side of an exchange, step by step: what it
// must receive and what it sends back.
type perfScript struct {
	steps []perfStep
}

type perfStep struct {
	want []byte // what rdmago must send
	send []byte // the peer's message
}

// play runs the script on conn as the peer: for a client under test the
// peer is the server (reads first), and vice versa.
func (s perfScript) play(conn net.Conn, peerIsServer bool) error {
	for i, st := range s.steps {
		got := make([]byte, len(st.want))
		do := []func() error{
			func() error {
				if _, err := io.ReadFull(conn, got); err != nil {
					return err
				}
				if !bytes.Equal(got, st.want) {
					return &perfStepError{Text: "step " + string(rune('0'+i)), Err: errors.New("got " + string(got))}
				}
				return nil
			},
			func() error { _, err := conn.Write(st.send); return err },
		}
		if !peerIsServer {
			do[0], do[1] = do[1], do[0]
		}
		for _, f := range do {
			if err := f(); err != nil {
				return err
			}
		}
	}
	return nil
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// TestPerfExchangeBytes runs rdmago's side of a write_bw exchange, as a
// client and as a server, against the bytes perftest 6.06 sends.
func TestPerfExchangeBytes(t *testing.T) {
	mine, _ := perfTestDest.encode(true)
	peer := perfTestDest
	peer.QPN, peer.PSN, peer.VAddr = 0x11, 0xdc6c6a, 0x5583b0923000
	theirs, _ := peer.encode(true)
	myRep := perfBWReport{Size: 64, Iters: 200, BWPeak: 4, BWAvg: 1.83, MsgRate: 0.029996}
	script := perfScript{steps: []perfStep{
		{padNUL("6.06", 16), padNUL("6.06", 16)},
		{be32(4096), be32(8192)}, // page sizes: the larger wins
		{be32(64), be32(128)},    // cache lines
		{[]byte("3\x00"), []byte("5\x00")},
		{mine, theirs},
		{mine, theirs},
		{be64(myRep.Size), be64(0)},
		{be64(myRep.Iters), be64(0)},
		{be64(math.Float64bits(myRep.BWPeak)), be64(0)},
		{be64(math.Float64bits(myRep.BWAvg)), be64(0)},
		{be64(math.Float64bits(myRep.MsgRate)), be64(0)},
	}}
	for _, client := range []bool{true, false} {
		a, b := net.Pipe()
		errc := make(chan error, 1)
		go func() { errc <- script.play(b, client); b.Close() }()
		c := &perfConn{rw: a, client: client}
		v, err := c.versions()
		if err != nil || v != "6.06" || c.peerVersion != 6.06 {
			t.Fatalf("client %v: versions = %q, %v", client, v, err)
		}
		cyc, cl, err := c.sysData(4096, 64)
		if err != nil || cyc != 8192 || cl != 128 {
			t.Errorf("sysData = %d, %d, %v", cyc, cl, err)
		}
		if m, err := c.mtu(3); err != nil || m != 3 {
			t.Errorf("mtu = %d, %v; want ours, the smaller", m, err)
		}
		for i := 0; i < 2; i++ {
			if d, err := c.handshake(perfTestDest, true); err != nil || d != peer {
				t.Errorf("handshake = %+v, %v", d, err)
			}
		}
		if _, err := c.bwReport(myRep); err != nil {
			t.Errorf("bwReport: %v", err)
		}
		a.Close()
		if err := <-errc; err != nil {
			t.Errorf("client %v: the peer saw: %v", client, err)
		}
	}
}

// TestPerfExchangeGoGo runs both sides of the exchange against each other.
// Over TCP: both sides end by writing "done", which neither reads.
func TestPerfExchangeGoGo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	type result struct {
		d   perfDest
		rep perfBWReport
		mtu int
		err error
	}
	run := func(conn net.Conn, client bool, my perfDest, mtu int, rep perfBWReport) result {
		c := &perfConn{rw: conn, client: client}
		var r result
		if _, r.err = c.versions(); r.err != nil {
			return r
		}
		if _, _, r.err = c.sysData(4096, 64); r.err != nil {
			return r
		}
		if r.mtu, r.err = c.mtu(mtu); r.err != nil {
			return r
		}
		if r.d, r.err = c.handshake(my, false); r.err != nil {
			return r
		}
		if r.rep, r.err = c.bwReport(rep); r.err != nil {
			return r
		}
		r.err = c.done()
		return r
	}
	srvDest := perfDest{QPN: 0x21, PSN: 0x123456, RKey: 7, VAddr: 0x1000, OutReads: 1}
	cliDest := perfDest{QPN: 0x22, PSN: 0x654321, RKey: 8, VAddr: 0x2000, OutReads: 1}
	rep := perfBWReport{Size: 65536, Iters: 5000, BWPeak: 40.5, BWAvg: 39.25, MsgRate: 0.000628}
	resc := make(chan result, 1)
	go func() { resc <- run(b, false, srvDest, 5, perfBWReport{}) }()
	cr := run(a, true, cliDest, 3, rep)
	sr := <-resc
	if cr.err != nil || sr.err != nil {
		t.Fatalf("client: %v; server: %v", cr.err, sr.err)
	}
	if cr.d != srvDest || sr.d != cliDest || cr.mtu != 3 || sr.mtu != 3 || sr.rep != rep {
		t.Errorf("client got %+v mtu %d; server got %+v mtu %d report %+v", cr.d, cr.mtu, sr.d, sr.mtu, sr.rep)
	}
}

func TestPerfExchangeOldPeer(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		io.ReadFull(b, make([]byte, 16))
		b.Write(padNUL("5.60", 16))
	}()
	c := &perfConn{rw: a, client: true}
	if _, err := c.versions(); err == nil || !strings.Contains(err.Error(), "older than 5.70") {
		t.Errorf("versions with a 5.60 peer: %v", err)
	}
	// The formats of older peers: no sys data, a 4-byte MTU, 4-byte iterations.
	c.peerVersion = 5.30
	if cyc, cl, err := c.sysData(4096, 64); err != nil || cyc != 4096 || cl != 64 {
		t.Errorf("sysData with 5.30: %d %d %v", cyc, cl, err)
	}
	go func() {
		io.ReadFull(b, make([]byte, 4))
		b.Write([]byte("2\x00\x00\x00"))
		for _, n := range []int{8, 4, 8, 8, 8} { // 4-byte iterations
			io.ReadFull(b, make([]byte, n))
			b.Write(make([]byte, n))
		}
	}()
	c.client = true
	if m, err := c.mtu(4); err != nil || m != 2 {
		t.Errorf("mtu with 5.30: %d, %v", m, err)
	}
	if _, err := c.bwReport(perfBWReport{}); err != nil {
		t.Errorf("bwReport with 5.30: %v", err)
	}
	a.Close()
	b.Close()
	// A peer that hangs up mid-step.
	a, b = net.Pipe()
	go func() { io.ReadFull(b, make([]byte, 16)); b.Close() }()
	c = &perfConn{rw: a, client: true}
	var se *perfStepError
	if _, err := c.versions(); !errors.As(err, &se) || se.Text != "Unable to read from socket/rdma_cm" {
		t.Errorf("versions with a peer gone: %v", err)
	}
}

func TestPerfParseDefaults(t *testing.T) {
	for _, tc := range []struct {
		test                   string
		args                   []string
		size, iters            uint64
		tx, rx, cqMod, postLst int
		noPeak                 bool
	}{
		{"write_bw", nil, 65536, 5000, 128, 1, 1, 1, false}, // > 8 KiB: no CQ moderation
		{"write_bw", []string{"-s", "64"}, 64, 5000, 128, 1, 100, 1, false},
		{"write_bw", []string{"-s", "64", "-n", "50"}, 64, 50, 50, 1, 50, 1, false},
		{"read_bw", []string{"-s4K", "-Q", "10"}, 4096, 1000, 128, 1, 10, 1, false},
		{"send_bw", []string{"-s", "64", "-n", "200"}, 64, 200, 128, 200, 100, 1, true}, // a send server: no peak
		{"send_bw", []string{"-s", "64", "-n", "200", "host"}, 64, 200, 128, 200, 100, 1, false},
		{"send_bw", []string{"-c", "UD", "-n", "30001", "host"}, 65536, 30001, 128, 16000, 100, 1, true},
		{"send_lat", []string{"-n", "7"}, 2, 7, 1, 8, 1, 1, false}, // odd rx depth: one more
		{"write_lat", nil, 2, 1000, 1, 1, 1, 1, false},
		{"atomic_bw", nil, 8, 1000, 128, 1, 100, 1, false},
		{"write_bw", []string{"-s", "64", "-l", "4", "-n", "200"}, 64, 200, 128, 1, 4, 4, false},
		{"write_bw", []string{"-s", "64", "-l", "4", "-Q", "2", "-n", "200"}, 64, 200, 128, 1, 2, 4, false},
		{"write_bw", []string{"-s", "64", "-D", "3"}, 64, 0, 128, 1, 100, 1, true},
		{"write_bw", []string{"--size=1M", "-a"}, 8388608, 5000, 128, 1, 100, 1, false},
	} {
		o, stop := perfParse("rdmago perf", perfTests[tc.test], tc.args)
		if stop.kind != perfGo {
			t.Errorf("%s %q: stopped: %+v", tc.test, tc.args, stop)
			continue
		}
		got := []any{o.size, o.iters, o.txDepth, o.rxDepth, o.cqMod, o.postList, o.noPeak}
		want := []any{tc.size, tc.iters, tc.tx, tc.rx, tc.cqMod, tc.postLst, tc.noPeak}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s %q: size, iters, tx, rx, cq_mod, post_list, noPeak (-want +got):\n%s", tc.test, tc.args, d)
		}
	}
	o, _ := perfParse("x", perfTests["write_bw"], []string{"-drxe0", "-x1", "-p", "0x4853", "--report_gbits", "-aF", "host", "-i", "1"})
	if o.devName != "rxe0" || o.gidIndex != 1 || !o.useGIDUser || o.port != 18515 || !o.reportG || !o.runAll || o.server != "host" {
		t.Errorf("options %+v", o)
	}
	o, _ = perfParse("x", perfTests["write_bw"], []string{"-D", "8"})
	if o.margin != 2 || o.duration != 8 || !o.durationOn {
		t.Errorf("-D 8: margin %d duration %d", o.margin, o.duration)
	}
	o, stop := perfParse("x", perfTests["read_lat"], []string{"-S", "3", "-u", "14", "-m", "1024", "-o", "4", "-f", "1", "-H", "-U"})
	if stop.kind != perfGo || o.sl != 3 || o.qpTimeout != 14 || o.mtu != 1024 || o.outReads != 4 || o.margin != 1 || !o.histogram || !o.unsorted {
		t.Errorf("read_lat -S 3 -u 14 -m 1024 -o 4 -f 1 -H -U: %+v, %+v", stop, o)
	}
	o, stop = perfParse("x", perfTests["write_bw"], []string{"-l", "2", "-w", "5.5", "-y", "2", "-n", "200"})
	if stop.kind != perfGo || o.postList != 2 || !o.limitBWOn || o.limitBW != 5.5 || !o.limitMROn || o.limitMR != 2 {
		t.Errorf("write_bw -l 2 -w 5.5 -y 2: %+v, %+v", stop, o)
	}
}

func TestPerfParseErrors(t *testing.T) {
	for _, tc := range []struct {
		test        string
		args        []string
		stdout, msg string // msg: a substring of what goes to stderr
		usage       bool
	}{
		{"write_bw", []string{"-n", "3"}, "", " Iteration num should be between 5 and 100000000\n Parser function exited with Error\n", false},
		{"write_bw", []string{"-n", "12x"}, "", " Iteration num argument 12x should be int\n", false},
		{"write_bw", []string{"-c", "UD"}, "", " UD connection only possible in SEND verb\n", false},
		{"read_bw", []string{"-c", "UC"}, "", " UC connection not possible in READ/ATOMIC verbs\n", false},
		{"send_bw", []string{"-c", "XX"}, "", " Invalid Connection type.", false},
		{"write_bw", []string{"-e"}, "", " Events feature not available on WRITE verb\n", false},
		{"write_lat", []string{"-q", "2"}, "", " Multiple QPs only available on bw tests\n", false},
		{"atomic_bw", []string{"-s", "16"}, perfResultLine + "Message size cannot be changed for Atomic tests \n", "", false},
		{"write_bw", []string{"-l", "3", "-n", "200"}, perfResultLine, "Number of iterations must be a multiple of post list size\n", false},
		{"write_bw", []string{"-l", "4", "-Q", "3", "-n", "200", "-s", "64"}, perfResultLine, "Post list size must be a multiple of CQ moderation\n", false},
		{"write_lat", []string{"-l", "2"}, perfResultLine, "Post list is supported in BW tests only\n", false},
		{"read_lat", []string{"-D", "2", "-e"}, perfResultLine, "Duration mode doesn't work with events.\n", false},
		{"write_bw", []string{"-D", "2", "-f", "1"}, perfResultLine, "please check that DURATION > 2*MARGIN\n", false},
		{"send_lat", []string{"-X", "1"}, "", " Events must be enabled to select a completion vector\n", false},
		{"write_bw", []string{"-R", "-c", "UC"}, perfResultLine + " UC is not supported in librdmacm\n", "", false},
		{"send_bw", []string{"-R", "-c", "UD"}, "", "rdmago perf: -R with UD QPs (-c UD) is not supported", false},
		{"write_bw", []string{"-b"}, "", "-b (bidirectional bandwidth) is not supported by rdmago", false},
		{"write_bw", []string{"--odp"}, "", "--odp is not supported by rdmago", false},
		{"write_bw", []string{"-k"}, "", "rdmago perf: invalid option -- 'k'\n Invalid Command or flag.\n", true},
		{"write_bw", []string{"--bogus"}, "", "unrecognized option '--bogus'", true},
		{"write_bw", []string{"a", "b"}, "", " Invalid Command line. Please check command rerun \n", false},
		{"write_bw", []string{"-s", "0"}, "", " Message Size should be between 1 and 2147483647\n", false},
		{"write_lat", []string{"--output=bandwidth"}, perfResultLine, " Output verbosity level for LAT can be: latency\n", false},
		{"send_bw", []string{"-T", "3"}, " TOS only valid for rdma_cm based QP and RawEth QP \n", "", false},
		{"send_bw", []string{"-L", "3"}, " Hop limit only valid for RawEth QP \n", "", false},
		{"write_bw", []string{"-p", "x"}, "", " Port argument x should be int\n", false},
		{"write_bw", []string{"-i", "0"}, "", "IB Port can't be less than 1\n Parser function exited with Error\n", false},
		{"write_bw", []string{"-S", "16"}, "", " Only 15 Service levels\n", false},
		{"write_bw", []string{"-x", "65"}, "", " Gid index should be between 0 and 64\n", false},
		{"write_bw", []string{"-o", "4"}, "", " Setting Outstanding reads only available on READ verb\n", false},
		{"write_bw", []string{"-l", "0"}, "", " Send Post List size must be positive\n", false},
		{"write_bw", []string{"-D", "0"}, "", " Duration period must be positive\n", false},
		{"write_bw", []string{"-f", "-1"}, "", " Margin must be non-negative\n", false},
		{"write_bw", []string{"-H"}, "", " Available only on Latency tests\n", false},
		{"write_bw", []string{"-U"}, "", " is Available only on Latency tests\n", false},
		{"write_bw", []string{"-w", "-1"}, "", " Invalid Minimum BW Limit\n", false},
		{"write_bw", []string{"-y", "-1"}, "", " Invalid Minimum msgRate Limit\n", false},
	} {
		var o, e bytes.Buffer
		st := perfMain(t.Context(), "rdmago perf", perfTests[tc.test], tc.args, &o, &e)
		out := o.String()
		if tc.usage {
			if !strings.Contains(out, "Usage:\n") {
				t.Errorf("%s %q: no usage on stdout: %q", tc.test, tc.args, out)
			}
			out = out[:strings.Index(out, "Usage:\n")]
		}
		if st != 1 || out != tc.stdout || !strings.Contains(e.String(), tc.msg) {
			t.Errorf("%s %q: status %d, stdout %q, stderr %q; want 1, %q, %q", tc.test, tc.args, st, o.String(), e.String(), tc.stdout, tc.msg)
		}
	}
}

func TestPerfCommand(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		stdout string
		stderr string
	}{
		{[]string{"perf"}, 2, "", "usage: rdmago perf <test>"},
		{[]string{"perf", "-h"}, 0, "atomic_bw, atomic_lat, read_bw", ""},
		{[]string{"perf", "bogus_bw"}, 2, "", `unknown test "bogus_bw"`},
		{[]string{"perf", "write_bw", "-h"}, 0, "  rdmago perf write_bw <host>     connect to server at <host>\n", ""},
		{[]string{"perf", "ib_send_lat", "--help"}, 0, "  -c, --connection=<RC/UC/UD>", ""},
		{[]string{"ib_read_bw", "-h"}, 0, "  -o, --outs=<num>", ""},
		{[]string{"ib_write_lat", "-V"}, 0, "Version: 6.06\n", ""},
		{[]string{"help", "ib_atomic_lat"}, 0, "  -A, --atomic_type=<type>", ""},
	} {
		o, e, st := tooltest.Run(Commands(), tc.args...)
		if st != tc.status || !strings.Contains(o, tc.stdout) || !strings.Contains(e, tc.stderr) {
			t.Errorf("rdmago %q: status %d, stdout %q, stderr %q", tc.args, st, o, e)
		}
	}
	// The usage shows each test's options only.
	o, _, _ := tooltest.Run(Commands(), "ib_write_bw", "-h")
	for _, absent := range []string{"--atomic_type", "--events", "--outs", "--rx-depth", "--report-unsorted"} {
		if strings.Contains(o, absent) {
			t.Errorf("ib_write_bw -h lists %s", absent)
		}
	}
}

// perfWriteBWOptions are the options of an "ib_write_bw -d rxe0 -x 1 -n
// 200 -s 64" run on the VM, once the device and the peer are known.
func perfWriteBWOptions(client bool) perfOptions {
	o, _ := perfParse("x", perfTests["write_bw"], []string{"-d", "rxe0", "-x", "1", "-n", "200", "-s", "64"})
	if client {
		o.server = "10.0.2.15"
	}
	o.transport, o.linkType, o.curMTU = "IB", "Ethernet", 3
	return o
}

// TestPerfHeader compares the header with perftest 6.06's on the VM, but
// for the PCIe relaxed ordering line (rdmago asks for none).
func TestPerfHeader(t *testing.T) {
	const cWriteBWClient = `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rxe0
 Number of qps   : 1		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 128
 CQ Moderation   : 100
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
 rdma_cm QPs	 : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
`
	const cReadLatClient = `---------------------------------------------------------------------------------------
                    RDMA_Read Latency Test
 Dual-port       : OFF		Device         : rxe0
 Number of qps   : 1		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Outstand reads  : 128
 rdma_cm QPs	 : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
`
	readLat, _ := perfParse("x", perfTests["read_lat"], []string{"-d", "rxe0", "-x", "1", "host"})
	readLat.transport, readLat.linkType, readLat.curMTU, readLat.outReads = "IB", "Ethernet", 3, 128
	writeBW := func(client, rdmaCM bool) perfOptions {
		o := perfWriteBWOptions(client)
		o.inline, o.rdmaCM = 0, rdmaCM
		return o
	}
	noTX := func(h string) string { return strings.Replace(h, " TX depth        : 128\n", "", 1) }
	// With -R (perftest 4.5-0.17's ib_write_bw -R on the VM).
	cmClient := strings.Replace(cWriteBWClient, " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n", " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n", 1)
	cmServer := strings.Replace(noTX(cmClient), " Data ex. method : rdma_cm\n", " Data ex. method : rdma_cm\n"+perfResultLine+
		" Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n", 1)
	for _, tc := range []struct {
		name string
		o    perfOptions
		want string
	}{
		{"write_bw client", writeBW(true, false), cWriteBWClient},
		{"write_bw server", writeBW(false, false), noTX(cWriteBWClient)},
		{"read_lat client", readLat, cReadLatClient},
		{"write_bw -R client", writeBW(true, true), cmClient},
		{"write_bw -R server", writeBW(false, true), cmServer},
	} {
		if d := cmp.Diff(tc.want, perfTestInfo(&tc.o)); d != "" {
			t.Errorf("%s header (-perftest +rdmago):\n%s", tc.name, d)
		}
	}

	// The lines that depend on the test and options.
	o, _ := perfParse("x", perfTests["atomic_bw"], []string{"-d", "mlx5_0", "-A", "CMP_AND_SWAP", "-l", "2", "-e", "-X", "3", "-q", "4"})
	o.transport, o.linkType, o.curMTU, o.gidIndex = "IB", "IB", 5, -1
	h := perfTestInfo(&o)
	for _, want := range []string{"                    Atomic CMP_AND_SWAP Post List BW Test\n",
		" Test with events. Using mlx5_0_comp3\n", " Number of qps   : 4\t\t", " Post List       : 2\n",
		" CQ Moderation   : 2\n", " Mtu             : 4096[B]\n", " Link type       : IB\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("atomic_bw header lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "GID index") || strings.Contains(h, "TX depth") {
		t.Errorf("atomic_bw server header without a GID:\n%s", h)
	}
	o, _ = perfParse("x", perfTests["send_lat"], []string{"-c", "UD", "-n", "100"})
	o.transport, o.linkType, o.curMTU = "IB", "Ethernet", 3
	if h := perfTestInfo(&o); !strings.Contains(h, "                    Send Latency Test\n") ||
		!strings.Contains(h, " Connection type : UD\t\t") || !strings.Contains(h, " RX depth        : 100\n") ||
		strings.Contains(h, "CQ Moderation") {
		t.Errorf("send_lat UD server header:\n%s", h)
	}
}

func TestPerfAddrLines(t *testing.T) {
	// perftest's lines from the VM runs.
	o := perfWriteBWOptions(true)
	d := perfDest{QPN: 0x11, PSN: 0xdc6c6a, RKey: 0x320, VAddr: 0x5583b0923000, GID: tooltest.RoCEGID, OutReads: 1}
	want := " local address: LID 0000 QPN 0x0011 PSN 0xdc6c6a RKey 0x000320 VAddr 0x005583b0923000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:02:15\n"
	if got := perfAddrLines("local", d, &o); got != want {
		t.Errorf("write_bw: %q, want %q", got, want)
	}
	o.test = perfTests["read_lat"]
	d = perfDest{QPN: 0x14, PSN: 0x4b7b1a, RKey: 0x4f2, VAddr: 0x55dad1d8b000, GID: tooltest.RoCEGID, OutReads: 128}
	want = " remote address: LID 0000 QPN 0x0014 PSN 0x4b7b1a OUT 0x80 RKey 0x0004f2 VAddr 0x0055dad1d8b000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:02:15\n"
	if got := perfAddrLines("remote", d, &o); got != want {
		t.Errorf("read_lat: %q, want %q", got, want)
	}
	// Send and atomic print neither keys nor addresses; IB without -x no GID.
	o.test, o.gidIndex = perfTests["atomic_lat"], -1
	if got, want := perfAddrLines("local", perfDest{LID: 3, QPN: 0x123456, PSN: 1}, &o), " local address: LID 0x03 QPN 0x123456 PSN 0x0001\n"; got != want {
		t.Errorf("atomic_lat on IB: %q, want %q", got, want)
	}
}

func TestPerfAltHex(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		w    int
		want string
	}{{0, 4, "0000"}, {0x80, 4, "0x80"}, {3, 4, "0x03"}, {0x11, 6, "0x0011"}, {0x2ed, 8, "0x0002ed"},
		{0x55aa616a9000, 16, "0x0055aa616a9000"}, {0x123456789, 6, "0x123456789"}, {0, 0, "0"}} {
		if got := perfAltHex(tc.v, tc.w); got != tc.want {
			t.Errorf("perfAltHex(%#x, %d) = %q, want %q", tc.v, tc.w, got, tc.want)
		}
	}
}

func TestPerfRows(t *testing.T) {
	o := perfWriteBWOptions(true)
	// perftest's rows on the VM.
	for _, tc := range []struct {
		r    perfBWReport
		want string
	}{
		{perfBWReport{64, 200, 4.0, 1.83, 0.029996}, " 64         200              4.00               1.83   \t\t   0.029996\n"},
		{perfBWReport{65536, 5000, 112.5, 43.21, 0.000691}, " 65536      5000             112.50             43.21  \t\t   0.000691\n"},
		{perfBWReport{8388608, 123456789012, math.Inf(1), math.NaN(), 0}, " 8388608    123456789012       inf                nan    \t\t   0.000000\n"},
	} {
		if got := perfBWRow(&o, tc.r); got != tc.want {
			t.Errorf("perfBWRow(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
	o.reportG = true
	if got, want := perfBWRow(&o, perfBWReport{64, 200, 0.033234, 0.028862, 0.056372}),
		" 64         200           0.033234            0.028862            0.056372\n"; got != want {
		t.Errorf("Gb/s below 0.1: %q, want %q", got, want)
	}
	if got, want := perfBWRow(&o, perfBWReport{64, 200, 1.5, 0.25, 0.5}), " 64         200              1.50               0.25   \t\t   0.500000\n"; got != want {
		t.Errorf("Gb/s: %q, want %q", got, want)
	}
	if got := perfTableHeader(&o); got != perfResultLine+perfFmtBWG+"\n" {
		t.Errorf("Gb/s heading %q", got)
	}
	o.output = perfOutMsgRate
	if got := perfBWRow(&o, perfBWReport{64, 200, 1.5, 0.25, 0.5}); got != "0.500000\n" {
		t.Errorf("--output=message_rate: %q", got)
	}

	lo, _ := perfParse("x", perfTests["read_lat"], nil)
	lr := perfLatReport{Size: 2, Iters: 200, TMin: 23.64, TMax: 207.35, TTypical: 23.97, TAvg: 25.21, TStdev: 9.22, P99: 143.67, P999: 207.35}
	want := " 2       200          23.64          207.35       23.97    \t       25.21       \t9.22   \t\t143.67  \t\t207.35 \n"
	if got := perfLatRows(&lo, lr); got != want {
		t.Errorf("latency row %q, want %q", got, want)
	}
	if got := perfTableHeader(&lo); got != perfResultLine+perfFmtLat+"\n" {
		t.Errorf("latency heading %q", got)
	}
	lo.unsorted = true
	lr.Unsorted = []float64{1.5, 100000, 0.00001234}
	if got := perfLatRows(&lo, lr); !strings.HasPrefix(got, "#, usec\n1, 1.5\n2, 100000\n3, 1.234e-05\n"+perfResultLine+perfFmtLat+"\n 2 ") {
		t.Errorf("-U: %q", got)
	}
	lo, _ = perfParse("x", perfTests["send_lat"], []string{"-D", "2"})
	if got, want := perfLatDurRow(&lo, perfLatDurReport{2, 85145, 11.75, 42567.89}), " 2             85145            11.75          42567.89\n"; got != want {
		t.Errorf("timed latency row %q, want %q", got, want)
	}
	if got := perfTableHeader(&lo); got != perfResultLine+perfFmtLatDur+"\n" {
		t.Errorf("timed latency heading %q", got)
	}
}

func TestPerfCG(t *testing.T) {
	// printf("%g") of each.
	for v, want := range map[float64]string{0: "0", 1.5: "1.5", 100000: "100000", 1e6: "1e+06", 123456.7: "123457",
		999999.5: "1e+06", 0.0001: "0.0001", 0.00001234: "1.234e-05", 12.3456789: "12.3457", -2.5: "-2.5", math.Inf(1): "inf"} {
		if got := perfCG(v); got != want {
			t.Errorf("perfCG(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestPerfComputeBW(t *testing.T) {
	// 4 messages of 1 MiB, one QP, each completion signaled: posted at
	// 0, 1, 2, 3 ms and completed at 2, 3, 4, 5 ms (times in ns, offset
	// so that none is zero).
	const ms = 1000000
	base := uint64(ms)
	in := perfBWInput{size: 1 << 20, iters: 4, numQPs: 1, postList: 1, cqMod: 1,
		tposted:    []uint64{base, base + ms, base + 2*ms, base + 3*ms},
		tcompleted: []uint64{base + 2*ms, base + 3*ms, base + 4*ms, base + 5*ms}}
	r := perfComputeBW(in)
	// Average: 4 MiB in 5 ms = 800 MiB/s; 0.8 million messages/s. Peak:
	// the best (completion j - post i)/(j-i+1) is (5-0)/4 = 1.25 ms.
	if r.Size != 1<<20 || r.Iters != 4 || math.Abs(r.BWAvg-800) > 1e-9 || math.Abs(r.MsgRate-0.0008) > 1e-12 ||
		math.Abs(r.BWPeak-800) > 1e-9 {
		t.Errorf("report %+v", r)
	}
	// Every second completion signaled (CQ moderation 2): the peak looks
	// at completions 1 and 3 only.
	in.cqMod = 2
	in.tcompleted = []uint64{0, base + 3*ms, 0, base + 5*ms}
	if r := perfComputeBW(in); math.Abs(r.BWPeak-800) > 1e-9 || math.Abs(r.BWAvg-800) > 1e-9 {
		t.Errorf("with CQ moderation 2: %+v", r)
	}
	// Without the peak, the first and last stamps only; Gb/s.
	in = perfBWInput{size: 1000, iters: 1000, numQPs: 2, postList: 1, cqMod: 100, noPeak: true, gbits: true,
		tposted: []uint64{base}, tcompleted: []uint64{base + 8*ms}}
	r = perfComputeBW(in)
	if r.Iters != 2000 || r.BWPeak != 0 || math.Abs(r.BWAvg-2) > 1e-9 || math.Abs(r.MsgRate-0.25) > 1e-12 {
		t.Errorf("no peak: %+v", r)
	}
	// A timed run counts iterations in all QPs already.
	in.duration = true
	if r := perfComputeBW(in); r.Iters != 1000 {
		t.Errorf("timed: %+v", r)
	}
}

// TestPerfBWReportStampsOutOfOrder: a run whose last completion stamp is
// not after its first post stamp (or was never taken) is timed by the
// monotonic clock beside its loop, with no peak and a warning, instead of
// printing a row of zeros.
func TestPerfBWReportStampsOutOfOrder(t *testing.T) {
	var stderr strings.Builder
	r := &perfRun{stderr: &stderr, base: time.Now(), baseTicks: ticks()}
	r.o.size, r.o.iters, r.o.numQPs, r.o.postList, r.o.cqMod = 64, 200, 1, 1, 100
	r.tposted = make([]uint64, 200)
	r.tcompleted = make([]uint64, 200)
	for i := range r.tposted {
		r.tposted[i] = tickOffset + 1000 + uint64(i)
	}
	r.tcompleted[99], r.tcompleted[199] = tickOffset+500, tickOffset+900 // before the first post
	r.monoFirst, r.monoLast = time.Millisecond, 11*time.Millisecond      // 200 messages in 10 ms
	rep := r.bwReport()
	if rep.BWPeak != 0 || rep.Iters != 200 || math.Abs(rep.MsgRate-0.02) > 1e-12 ||
		math.Abs(rep.BWAvg-64*200/0.010/(1<<20)) > 1e-9 {
		t.Errorf("report %+v; want no peak, 0.02 Mpps", rep)
	}
	if !strings.HasPrefix(stderr.String(), perfStampsWarning) {
		t.Errorf("stderr %q, want the warning", stderr.String())
	}
	// Never taken: the same.
	stderr.Reset()
	r.tcompleted[199] = 0
	if rep := r.bwReport(); rep.BWPeak != 0 || math.Abs(rep.MsgRate-0.02) > 1e-12 || stderr.Len() == 0 {
		t.Errorf("unset last stamp: report %+v, stderr %q", rep, stderr.String())
	}
	// In order: the ticks, the peak, no warning.
	stderr.Reset()
	r.tcompleted[99], r.tcompleted[199] = tickOffset+1200, tickOffset+1400
	if rep := r.bwReport(); !(rep.BWPeak > 0 && rep.MsgRate > 0) || stderr.Len() != 0 {
		t.Errorf("stamps in order: report %+v, stderr %q", rep, stderr.String())
	}
}

func TestPerfComputeLat(t *testing.T) {
	// 8 posts 10 µs apart but one gap of 50 µs: 7 samples, of which the
	// two largest are dropped from the statistics.
	var tp []uint64
	at := uint64(1000)
	for i, gap := range []uint64{10, 10, 10, 50, 10, 10, 10, 12} {
		if i > 0 {
			at += gap * 1000
		}
		tp = append(tp, at)
	}
	r := perfComputeLat(2, tp, 1)
	// Samples: 10 10 50 10 10 10 12 µs; sorted 10 10 10 10 10 12 50;
	// measured: the first 5 (all 10).
	if r.Iters != 8 || r.TMin != 10 || r.TMax != 12 || r.TTypical != 10 || r.TAvg != 10 || r.TStdev != 0 ||
		r.P99 != 12 || r.P999 != 12 || len(r.Unsorted) != 7 || r.Unsorted[2] != 50 || len(r.Sorted) != 5 {
		t.Errorf("report %+v", r)
	}
	// A round trip counts half (send, write); an even count averages the
	// middle two.
	tp = []uint64{0, 4000, 10000, 18000, 28000, 40000, 54000}
	r = perfComputeLat(2, tp, 2)
	// Samples 4 6 8 10 12 14 µs, halved 2 3 4 5 6 7; measured 2 3 4 5.
	if r.TMin != 2 || r.TTypical != 3.5 || r.TAvg != 3.5 || r.TMax != 6 {
		t.Errorf("round trips: %+v", r)
	}
	// Deviations past 46 ms: perftest's int square overflows; rdmago's
	// does not.
	tp = []uint64{0}
	for _, us := range []uint64{1, 1, 100000, 100000, 100000, 100000, 200000, 300000} {
		tp = append(tp, tp[len(tp)-1]+us*1000)
	}
	if r := perfComputeLat(2, tp, 1); !(r.TStdev > 40000) || math.IsInf(r.TStdev, 0) {
		t.Errorf("large deviations: stdev %v", r.TStdev)
	}
	d := perfComputeLatDur(64, 1000, 2000000000, 2)
	if d.TAvg != 1000 || d.TPS != 500 {
		t.Errorf("timed: %+v", d)
	}
}

func TestPerfNextAddr(t *testing.T) {
	// 64-byte messages in a 4096-byte cycle of 64-byte lines: 64 slots,
	// then back to the start.
	addr := uint64(0x1000)
	for i := uint64(0); i < 63; i++ {
		addr = perfNextAddr(addr, 64, i, 0x1000, 64, 4096)
		if addr != 0x1000+64*(i+1) {
			t.Fatalf("step %d: %#x", i, addr)
		}
	}
	if addr = perfNextAddr(addr, 64, 63, 0x1000, 64, 4096); addr != 0x1000 {
		t.Errorf("after a cycle: %#x", addr)
	}
	// 100 bytes take two lines.
	if a := perfNextAddr(0, 100, 0, 0, 64, 4096); a != 128 {
		t.Errorf("100 bytes: %#x", a)
	}
	if perfInc(8, 64) != 64 || perfInc(65, 64) != 128 || perfInc(4096, 64) != 4096 {
		t.Error("perfInc")
	}
}

func TestPerfBestGIDIndex(t *testing.T) {
	link := qp.GID{0: 0xfe, 1: 0x80, 8: 0x50, 9: 0x54, 10: 0x00, 11: 0xff, 12: 0xfe, 13: 0x12, 14: 0x34, 15: 0x56}
	v4 := qp.GID(tooltest.RoCEGID)
	rxe := []uverbs.GIDEntry{
		{GID: link, Index: 0, Port: 1, Type: uverbs.GIDTypeRoCEv2},
		{GID: v4, Index: 1, Port: 1, Type: uverbs.GIDTypeRoCEv2},
	}
	if got := perfBestGIDIndex(rxe, 1, 1024, false); got != 1 {
		t.Errorf("rxe: %d, want 1 (the IPv4 GID)", got)
	}
	if got := perfBestGIDIndex(rxe, 1, 1024, true); got != 0 {
		t.Errorf("rxe --ipv6: %d, want 0", got)
	}
	// A RoCE v1 and a v2 entry of each address (mlx5's layout): v2 wins.
	mlx := []uverbs.GIDEntry{
		{GID: link, Index: 0, Port: 1, Type: uverbs.GIDTypeRoCEv1},
		{GID: link, Index: 1, Port: 1, Type: uverbs.GIDTypeRoCEv2},
		{GID: v4, Index: 2, Port: 1, Type: uverbs.GIDTypeRoCEv1},
		{GID: v4, Index: 3, Port: 1, Type: uverbs.GIDTypeRoCEv2},
	}
	if got := perfBestGIDIndex(mlx, 1, 256, false); got != 3 {
		t.Errorf("mlx5: %d, want 3", got)
	}
	if got := perfBestGIDIndex(mlx, 1, 256, true); got != 1 {
		t.Errorf("mlx5 --ipv6: %d, want 1", got)
	}
	if g, ok := perfQueryGID(rxe, 1, 2, 1); !ok || g != tooltest.RoCEGID {
		t.Errorf("query GID 1: %x %v", g, ok)
	}
	if _, ok := perfQueryGID(rxe, 1, 2, 2); ok {
		t.Error("query GID past the table: ok")
	}
	if g, ok := perfQueryGID(rxe, 2, 2, 1); !ok || g != ([16]byte{}) {
		t.Errorf("empty entry: %x %v", g, ok)
	}
	if !perfV4Mapped(tooltest.RoCEGID) || perfV4Mapped(link) || !perfV4Mapped([16]byte{0: 0xff, 1: 0x0e, 10: 0xff, 11: 0xff, 15: 1}) {
		t.Error("perfV4Mapped")
	}
}

func TestPerfJSONReport(t *testing.T) {
	o := perfWriteBWOptions(true)
	o.inline, o.devName = 0, "rxe0"
	j := newPerfJSONReport(&o, "6.06")
	j.Local = append(j.Local, perfJSONDestOf(perfTestDest, &o))
	j.addBW(perfBWReport{64, 200, math.Inf(1), 1.83, 0.029996}, "local")
	var got map[string]any
	if err := json.Unmarshal([]byte(j.text()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, j.text())
	}
	res := got["results"].([]any)[0].(map[string]any)
	local := got["local"].([]any)[0].(map[string]any)
	if got["test"] != "write_bw" || got["role"] != "client" || got["mtu"] != 1024.0 || got["gid_index"] != 1.0 ||
		got["bw_units"] != "MB/sec" || got["tx_depth"] != 128.0 || res["bw_peak"] != nil || res["bw_average"] != 1.83 ||
		res["bytes"] != 64.0 || local["gid"] != "::ffff:10.0.2.15" || local["rkey"] != 749.0 {
		t.Errorf("report %v", got)
	}
	lo, _ := perfParse("x", perfTests["atomic_lat"], nil)
	lo.gidIndex = -1
	j = newPerfJSONReport(&lo, "6.06")
	j.addLat(perfLatReport{Size: 8, Iters: 5, TMin: 1})
	if s := j.text(); !strings.Contains(s, `"outstanding_reads": 0`) || strings.Contains(s, "gid_index") ||
		!strings.Contains(s, `"atomic_type": "FETCH_AND_ADD"`) || !strings.Contains(s, `"t_min_usec": 1`) {
		t.Errorf("atomic_lat report:\n%s", s)
	}
}
