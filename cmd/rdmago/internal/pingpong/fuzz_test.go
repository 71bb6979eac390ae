package pingpong

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func FuzzPingpongDest(f *testing.F) {
	for _, d := range []ppDest{
		{QPN: 0x11, PSN: 0xd6a2f, GID: tooltest.RoCEGID},
		{LID: 0xbeef, QPN: 0xabcdef, PSN: 0xffffff},
	} {
		m, err := d.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m[:])
	}
	m := msgOf("1:A:bC:00000000000000000000FFFF0A00020F")
	f.Add(m[:])
	m = msgOf("0000:000011:123456789:00000000000000000000ffff0a000")
	f.Add(m[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var m [ppMsgSize]byte
		copy(m[:], b)
		d, err := decodeDest(m)
		if err != nil {
			return
		}
		m2, err := d.encode()
		if err != nil {
			return // wider than the C programs' fields
		}
		d2, err := decodeDest(m2)
		if err != nil || d2 != d {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", d, d2, err)
		}
	})
}

// FuzzPingpongExchange runs the client's and the server's side of the
// pingpong examples' exchange against a peer that sends the fuzzer's
// bytes: every failure must be a *ppError.
func FuzzPingpongExchange(f *testing.F) {
	d, _ := (ppDest{QPN: 0x11, PSN: 0xd6a2f, GID: tooltest.RoCEGID}).encode()
	f.Add(d[:], false, 1)
	f.Add(append(d[:], ppDone[:]...), true, 1)
	f.Add(bytes.Repeat(d[:], 3), false, 3)
	f.Add([]byte("0000:00"), true, 256)
	f.Fuzz(func(t *testing.T, peer []byte, server bool, slots int) {
		p := ppProto{slots: 1}
		if slots > 1 {
			p = ppProto{slots: ppSRQSlots, srq: true}
		}
		local := []ppDest{{QPN: 0x22, PSN: 0x123}}
		conn := tooltest.FuzzPeer{R: bytes.NewReader(peer)}
		var remote []ppDest
		var err error
		if server {
			remote, err = p.server(conn, local, func([]ppDest) error { return nil })
		} else {
			remote, err = p.client(conn, local)
		}
		var pe *ppError
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("error %T %v, want a *ppError", err, err)
		}
		if err == nil && len(remote) != p.slots {
			t.Fatalf("%d addresses, want %d", len(remote), p.slots)
		}
	})
}
