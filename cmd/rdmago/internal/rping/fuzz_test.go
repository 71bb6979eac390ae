package rping

import (
	"bytes"
	"testing"
)

func FuzzRpingInfo(f *testing.F) {
	var b [rpInfoSize]byte
	rpInfo{Addr: 0x00007f1234567000, RKey: 0x1a2b3c, Size: 64}.encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, rpInfoSize)) // the go-ahead
	f.Add([]byte{0, 0, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRpInfo(b)
		if len(b) < rpInfoSize {
			if err == nil {
				t.Fatalf("a %d-byte message decoded", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var out [rpInfoSize]byte
		m.encode(out[:])
		if !bytes.Equal(out[:], b[:rpInfoSize]) {
			t.Fatalf("encode(decode(% x)) = % x", b[:rpInfoSize], out)
		}
	})
}
