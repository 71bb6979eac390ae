package perf

// Fuzz targets for what the tools read from a peer: perftest's address
// messages (text over TCP, a struct over rdma_cm) and the exchange around
// them, the pingpong examples' address messages and exchange, and rping's
// buffer advertisements. A peer is untrusted: any bytes must give an error
// or a value, never a panic, and what rdmago encodes must decode to itself.

import (
	"bytes"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func FuzzPerfDest(f *testing.F) {
	for _, withGID := range []bool{false, true} {
		m, err := perfTestDest.encode(withGID)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m, withGID)
	}
	f.Add(padNUL("1:80:12:BDEC7B:2ed:55aa616a9000:0:0:0:0:0:0:0:0:0:0:FF:ff:a:0:2:f:0:", perfKeyMsgSizeGID), true)
	f.Add(padNUL("0000:0080", perfKeyMsgSize), false)
	f.Add([]byte("short"), false)
	f.Fuzz(func(t *testing.T, m []byte, withGID bool) {
		d, err := decodePerfDest(m, withGID)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode, where it fits perftest's
		// fields, to a message that decodes to the same address.
		m2, err := d.encode(withGID)
		if err != nil {
			return
		}
		d2, err := decodePerfDest(m2, withGID)
		if err != nil || d2 != d {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", d, d2, err)
		}
	})
}

func FuzzPerfDestStruct(f *testing.F) {
	f.Add(perfTestDest.encodeStruct())
	f.Add(perfDest{}.encodeStruct())
	f.Add([]byte{0, 0, 0, 0x12})
	f.Fuzz(func(t *testing.T, m []byte) {
		d, err := decodePerfDestStruct(m)
		if !tooltest.DecodedFixed(t, m, perfDestStructSize, err) {
			return
		}
		// The SRQ number does not travel back (rdma_read_keys ignores it).
		d2, err := decodePerfDestStruct(d.encodeStruct())
		if err != nil || d2 != d {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", d, d2, err)
		}
	})
}

// FuzzPerfExchange runs the whole out-of-band exchange of a bandwidth
// benchmark (versions, system data, MTU, two handshakes, the report)
// against a peer that sends the fuzzer's bytes, on either side.
func FuzzPerfExchange(f *testing.F) {
	var good bytes.Buffer
	var v [perfVersionSize]byte
	copy(v[:], perfVersion)
	good.Write(v[:])
	good.Write([]byte{0, 0, 0x10, 0, 0, 0, 0, 64}) // page and cache line sizes
	good.Write([]byte("3\x00"))
	m, _ := perfTestDest.encode(true)
	good.Write(m)
	good.Write(m)
	good.Write(bytes.Repeat([]byte{0x40}, 8*5))
	f.Add(good.Bytes(), true, false)
	f.Add(good.Bytes(), false, false)
	cm := bytes.NewBuffer(append([]byte(nil), good.Bytes()[:perfVersionSize+8+2]...))
	cm.Write(perfTestDest.encodeStruct())
	cm.Write(perfTestDest.encodeStruct())
	f.Add(cm.Bytes(), true, true)
	f.Add([]byte("5.1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), true, false)
	f.Fuzz(func(t *testing.T, peer []byte, client, overCM bool) {
		c := &perfConn{rw: tooltest.FuzzPeer{R: bytes.NewReader(peer)}, client: client, cm: overCM}
		if _, err := c.versions(); err != nil {
			return
		}
		if _, _, err := c.sysData(4096, 64); err != nil {
			return
		}
		if mtu, err := c.mtu(3); err != nil {
			return
		} else if mtu < 1 || mtu > 3 {
			t.Fatalf("MTU code %d from a local 3", mtu)
		}
		for range 2 {
			if _, err := c.handshake(perfTestDest, true); err != nil {
				return
			}
		}
		if _, err := c.bwReport(perfBWReport{Size: 65536, Iters: 1000}); err != nil {
			return
		}
		if err := c.done(); err != nil {
			t.Fatal(err)
		}
	})
}
