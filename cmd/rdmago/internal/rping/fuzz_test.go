package rping

import (
	"bytes"
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func FuzzRpingInfo(f *testing.F) {
	var b [rpInfoSize]byte
	rpInfo{Addr: 0x00007f1234567000, RKey: 0x1a2b3c, Size: 64}.encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, rpInfoSize)) // the go-ahead
	f.Add([]byte{0, 0, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRpInfo(b)
		if !tooltest.DecodedFixed(t, b, rpInfoSize, err) {
			return
		}
		var out [rpInfoSize]byte
		m.encode(out[:])
		if !bytes.Equal(out[:], b[:rpInfoSize]) {
			t.Fatalf("encode(decode(% x)) = % x", b[:rpInfoSize], out)
		}
	})
}
