package rsocket

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Sizes of the stream under test: a small receive queue and ring, so that
// credits, halves and wrap-around all come up in a few messages.
const (
	testRQ   = 16
	testSQ   = 16
	testRbuf = 8192
	testSbuf = 8192
)

// newTestStream returns a stream as newEndpoint and connect leave it,
// with a peer that announced the given connection data.
func newTestStream(t testing.TB, peer connData) *stream {
	t.Helper()
	s := new(stream)
	s.init(testSQ, testRQ, testSbuf, testRbuf, 64, make([]byte, sglSize*sgeLen))
	s.save(&peer)
	return s
}

var testPeer = connData{
	Version:   connVersion,
	Credits:   testRQ,
	TargetSGL: rsSGE{Addr: 0x10000, Key: 1, Length: sglSize},
	DataBuf:   rsSGE{Addr: 0x20000, Key: 2, Length: testRbuf / 2},
}

func TestConnDataRoundTrip(t *testing.T) {
	c := connData{
		Version:   connVersion,
		Flags:     flagNet,
		Credits:   384,
		IOMapSize: 3,
		TargetSGL: rsSGE{Addr: 0x7f00_1234_5000, Key: 0xdeadbeef, Length: 2},
		DataBuf:   rsSGE{Addr: 0x7f00_8000_0000, Key: 0x1234, Length: 65536},
	}
	b := c.marshal()
	// The layout of struct rs_conn_data, big-endian: the offsets are the
	// C struct's, which the peer reads.
	want := [connDataLen]byte{
		1, 1, 0x01, 0x80, 0, 0, 0, 3,
		0, 0, 0x7f, 0, 0x12, 0x34, 0x50, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 2,
		0, 0, 0x7f, 0, 0x80, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 1, 0, 0,
	}
	if b != want {
		t.Fatalf("marshal:\n got %x\nwant %x", b, want)
	}
	got, err := parseConnData(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("parse(marshal(c)) differs (-want +got):\n%s", diff)
	}
}

func TestParseConnDataRejects(t *testing.T) {
	good := testPeer.marshal()
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:connDataLen-1] }},
		{"version 0", func(b []byte) []byte { b[0] = 0; return b }},
		{"version 2", func(b []byte) []byte { b[0] = 2; return b }},
		{"no credits", func(b []byte) []byte { b[2], b[3] = 0, 0; return b }},
		{"empty target SGL", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], 0); return b }},
		{"huge target SGL", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], maxTargetSGL+1); return b }},
		{"target SGL wraps", func(b []byte) []byte { binary.BigEndian.PutUint64(b[8:], ^uint64(0)-8); return b }},
		{"empty data buffer", func(b []byte) []byte { binary.BigEndian.PutUint32(b[36:], 0); return b }},
		{"data buffer wraps", func(b []byte) []byte { binary.BigEndian.PutUint64(b[24:], ^uint64(0)-8); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			_, err := parseConnData(tc.edit(b[:]))
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("parseConnData: %v, want a protocol violation", err)
			}
		})
	}
	if _, err := parseConnData(good[:]); err != nil {
		t.Fatalf("the unedited data: %v", err)
	}
}

func TestRecvMsgRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []uint32
	}{
		{"empty data", []uint32{msg(opData, 0)}},
		{"data beyond the grant", []uint32{msg(opData, testRbuf/2+1)}},
		{"data beyond the grant, in two", []uint32{msg(opData, testRbuf/4), msg(opData, testRbuf/4+1)}},
		{"credits taken back", []uint32{msg(opSGL, testRQ-1)}},
		{"credits beyond the peer's queue", []uint32{msg(opSGL, 2*testRQ+1)}},
		{"unknown control", []uint32{msg(opCtrl, 5)}},
		{"keepalive as a message", []uint32{msg(opCtrl, ctrlKeepAlive)}},
		{"reserved type 1", []uint32{msg(1, 0)}},
		{"direct write type", []uint32{msg(opWrite, 8)}},
		{"reserved type 5", []uint32{msg(5, 8)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStream(t, testPeer)
			var err error
			for _, m := range tc.msgs {
				if err = s.recvMsg(m); err != nil {
					break
				}
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("recvMsg: %v, want a protocol violation", err)
			}
		})
	}
}

func TestRecvMsgTooManyMessages(t *testing.T) {
	s := newTestStream(t, testPeer)
	// One byte each: the receive queue, not the buffer, runs out.
	for i := range testRQ {
		if err := s.recvMsg(msg(opData, 1)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := s.recvMsg(msg(opData, 1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("message %d: %v, want a protocol violation", testRQ, err)
	}
}

// TestStreamReceive follows data through the receive ring: messages are
// read whole and in part, halves are advertised as they free up, and the
// read offset wraps.
func TestStreamReceive(t *testing.T) {
	s := newTestStream(t, testPeer)
	rbuf := make([]byte, testRbuf)
	for i := range rbuf {
		rbuf[i] = byte(i * 7)
	}
	half := uint32(testRbuf / 2)
	for _, m := range []uint32{1000, 3000, 96} { // the whole first half
		if err := s.recvMsg(msg(opData, m)); err != nil {
			t.Fatal(err)
		}
	}
	if s.granted != 0 || s.unread != half {
		t.Fatalf("granted %d unread %d, want 0 and %d", s.granted, s.unread, half)
	}
	// More data than was granted is a violation, until the next half.
	if err := newTestStreamAfter(t, s).recvMsg(msg(opData, 1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("data with nothing granted: %v", err)
	}
	b := make([]byte, 1500)
	if n := s.take(rbuf, b, len(b)); n != 1500 || !equalBytes(b, rbuf[:1500]) {
		t.Fatalf("take: %d bytes", n)
	}
	if s.rseqNo != 1 || s.rmsg[s.rmsgHead] != 2500 {
		t.Fatalf("after a read of one message and a half: rseqNo %d, head message %d bytes", s.rseqNo, s.rmsg[s.rmsgHead])
	}
	// The second half was free from the start: it is advertised now.
	if !s.giveCredits() {
		t.Fatal("no credits due with half of rbuf free")
	}
	m, off, n := s.grant()
	if msgOp(m) != opSGL || msgData(m) != 1+testRQ || off != half || n != half {
		t.Fatalf("grant: message %#x, half at %d of %d bytes", m, off, n)
	}
	if err := s.recvMsg(msg(opData, half)); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, testRbuf)
	if n := s.take(rbuf, rest, len(rest)); n != testRbuf-1500 || !equalBytes(rest[:n], rbuf[1500:]) {
		t.Fatalf("take the rest: %d bytes", n)
	}
	if s.rbufOff != 0 || s.unread != 0 || s.haveData() {
		t.Fatalf("after reading everything: rbufOff %d unread %d", s.rbufOff, s.unread)
	}
	if s.rbufAvail+s.granted+s.unread != testRbuf {
		t.Fatalf("rbuf accounting: avail %d + granted %d + unread %d", s.rbufAvail, s.granted, s.unread)
	}
}

// newTestStreamAfter copies s, so that a violation can be tried on it
// without failing s.
func newTestStreamAfter(t testing.TB, s *stream) *stream {
	t.Helper()
	c := *s
	c.rmsg = append([]uint32(nil), s.rmsg...)
	c.target = append([]byte(nil), s.target...)
	return &c
}

func equalBytes(a, b []byte) bool { return string(a) == string(b) }

// TestStreamSend follows the send side: data is written into the peer's
// target entries in turn, credits and send queue entries are taken and
// returned.
func TestStreamSend(t *testing.T) {
	s := newTestStream(t, testPeer)
	if !s.canSend() {
		t.Fatal("cannot send on a new stream")
	}
	addr, rkey := s.reserve(1000)
	if addr != testPeer.DataBuf.Addr || rkey != testPeer.DataBuf.Key {
		t.Fatalf("first write at %#x key %#x", addr, rkey)
	}
	if addr, _ = s.reserve(testRbuf/2 - 1000); addr != testPeer.DataBuf.Addr+1000 {
		t.Fatalf("second write at %#x", addr)
	}
	// The first entry is used up; the peer has not written the second.
	if s.targetSGE != 1 || s.targetLen() != 0 || s.canSend() {
		t.Fatalf("entry %d with %d bytes, canSend %v", s.targetSGE, s.targetLen(), s.canSend())
	}
	s.setTarget(1, rsSGE{Addr: 0x30000, Key: 3, Length: testRbuf / 2})
	if err := s.recvMsg(msg(opSGL, 2+testRQ)); err != nil {
		t.Fatal(err)
	}
	if addr, rkey = s.reserve(10); addr != 0x30000 || rkey != 3 {
		t.Fatalf("write after the credit update at %#x key %#x", addr, rkey)
	}
	if s.sseqNo != 3 || s.sqeAvail != testSQ-ctrlSlots-3 || s.sbufAvail != testSbuf-testRbuf/2-10 {
		t.Fatalf("sseqNo %d sqeAvail %d sbufAvail %d", s.sseqNo, s.sqeAvail, s.sbufAvail)
	}
	for _, n := range []uint32{1000, testRbuf/2 - 1000, 10} {
		s.sendDone(msg(opData, n))
	}
	if !s.allSendsDone() || s.sbufAvail != testSbuf {
		t.Fatalf("after every completion: allSendsDone %v, sbufAvail %d", s.allSendsDone(), s.sbufAvail)
	}
}

func TestStreamControl(t *testing.T) {
	s := newTestStream(t, testPeer)
	if err := s.recvMsg(msg(opCtrl, ctrlShutdown)); err != nil {
		t.Fatal(err)
	}
	if s.state != stConnected|stWritable {
		t.Fatalf("after the peer's SHUTDOWN: state %#x, want connected and writable", s.state)
	}
	// Our own shutdown already happened: the peer's ends the connection.
	s = newTestStream(t, testPeer)
	s.state &^= stWritable
	if err := s.recvMsg(msg(opCtrl, ctrlShutdown)); err != nil || s.state != 0 {
		t.Fatalf("SHUTDOWN after ours: %v, state %#x", err, s.state)
	}
	s = newTestStream(t, testPeer)
	if err := s.recvMsg(msg(opCtrl, ctrlDisconnect)); err != nil || s.state != 0 {
		t.Fatalf("DISCONNECT: %v, state %#x", err, s.state)
	}
	// An iomap update is ignored: this side announced no iomap.
	s = newTestStream(t, testPeer)
	if err := s.recvMsg(msg(opIOMapSGL, 3)); err != nil || s.state != stConnected|stReadable|stWritable {
		t.Fatalf("IOMAP_SGL: %v, state %#x", err, s.state)
	}
}
