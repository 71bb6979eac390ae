package valkeyrdma

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []message{
		{op: opGetServerFeature, sel: 7, features: 1 << 40},
		{op: opSetClientFeature, features: 3},
		{op: opKeepalive},
		{op: opRegisterXferMemory, addr: 0x7f0012345000, length: DefaultBuffer, key: 0x1234},
	} {
		var b [msgSize]byte
		m.marshal(b[:])
		got, err := parseMessage(b[:], msgSize)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if diff := cmp.Diff(m, got, cmp.AllowUnexported(message{})); diff != "" {
			t.Errorf("round trip (-sent +parsed):\n%s", diff)
		}
	}
}

// TestMessageLayout checks the offsets against src/rdma.c's structs, with
// a RegisterXferMemory as valkey-server sends it.
func TestMessageLayout(t *testing.T) {
	b := []byte{
		0x00, 0x03, // opcode: RegisterXferMemory
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
		0x00, 0x00, 0x7f, 0x3a, 0x10, 0x20, 0x30, 0x00, // addr
		0x00, 0x10, 0x00, 0x00, // length: 1 MiB
		0x00, 0x00, 0x1a, 0x2b, // key
	}
	m, err := parseMessage(b, msgSize)
	if err != nil {
		t.Fatal(err)
	}
	want := message{op: opRegisterXferMemory, addr: 0x7f3a10203000, length: 1 << 20, key: 0x1a2b}
	if diff := cmp.Diff(want, m, cmp.AllowUnexported(message{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseMessageRefuses(t *testing.T) {
	reg := func(length uint32) []byte {
		b := make([]byte, msgSize)
		(&message{op: opRegisterXferMemory, length: length}).marshal(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		n    uint32
	}{
		{"short", make([]byte, msgSize), 16},
		{"long", make([]byte, msgSize), 33},
		{"unknown opcode", []byte{0, 4, 31: 0}, msgSize},
		{"invalid opcode", []byte{0xff, 0xff, 31: 0}, msgSize},
		{"empty buffer", reg(0), msgSize},
		{"buffer past MaxBuffer", reg(MaxBuffer + 1), msgSize},
		{"1 GiB buffer", reg(1 << 30), msgSize},
	} {
		if _, err := parseMessage(tc.b, tc.n); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", tc.name, err)
		}
	}
	if _, err := parseMessage(reg(MaxBuffer), msgSize); err != nil {
		t.Errorf("a buffer of MaxBuffer: %v", err)
	}
}

// FuzzParseMessage: any bytes a peer sends either parse into a message that
// keeps the invariants the connection relies on, or are refused with
// ErrProtocol; a parsed message marshals back to what was received, but for
// the reserved bytes.
func FuzzParseMessage(f *testing.F) {
	for _, m := range []message{{op: opKeepalive}, {op: opRegisterXferMemory, addr: 1 << 40, length: 4096, key: 9}, {op: opGetServerFeature, sel: 1}} {
		b := make([]byte, msgSize)
		m.marshal(b)
		f.Add(b, uint32(msgSize))
	}
	f.Add([]byte{0, 3}, uint32(2))
	f.Fuzz(func(t *testing.T, b []byte, n uint32) {
		m, err := parseMessage(b, n)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("refused without ErrProtocol: %v", err)
			}
			return
		}
		if n != msgSize || len(b) < msgSize {
			t.Fatalf("accepted %d bytes (%d in the slot)", n, len(b))
		}
		if m.op == opRegisterXferMemory && (m.length == 0 || m.length > MaxBuffer) {
			t.Fatalf("accepted a buffer of %d bytes", m.length)
		}
		out := make([]byte, msgSize)
		m.marshal(out)
		if binary.BigEndian.Uint16(out) != binary.BigEndian.Uint16(b) {
			t.Fatalf("opcode %x became %x", b[:2], out[:2])
		}
		var fields [][2]int
		switch m.op {
		case opGetServerFeature, opSetClientFeature:
			fields = [][2]int{{2, 4}, {24, 32}}
		case opRegisterXferMemory:
			fields = [][2]int{{16, 32}}
		}
		for _, f := range fields {
			if string(out[f[0]:f[1]]) != string(b[f[0]:f[1]]) {
				t.Fatalf("bytes %d:%d changed in the round trip", f[0], f[1])
			}
		}
	})
}
