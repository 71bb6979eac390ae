//go:build linux

package rsocket_test

import (
	"io"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
)

// TestDeviceSteadyStateAllocs checks that Read and Write allocate nothing
// once a connection is up: the work requests, SGEs, completions and
// waits are all preallocated.
func TestDeviceSteadyStateAllocs(t *testing.T) {
	for _, n := range []int{64, 4096, 65536} {
		c, s := pair(t)
		rdmatest.NoTransferAllocs(t, c, s, n)
	}
}

func benchTransfer(b *testing.B, n int) {
	c, s := pair(b)
	out, in := make([]byte, n), make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if err := rdmatest.Transfer(c, s, out, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteRead64(b *testing.B)  { benchTransfer(b, 64) }
func BenchmarkWriteRead4K(b *testing.B)  { benchTransfer(b, 4096) }
func BenchmarkWriteRead64K(b *testing.B) { benchTransfer(b, 65536) }

// benchCopy sends b.N chunks of n bytes through ReadFrom and receives them
// through WriteTo, as io.Copy on both ends does: the reader fills the send
// buffer and the writer reads the receive ring, with no copy in between.
func benchCopy(b *testing.B, n int) {
	c, s := pair(b)
	chunk := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	src := readerFunc(func(p []byte) (int, error) {
		if sent >= b.N*n {
			return 0, io.EOF
		}
		m := copy(p, chunk[:min(n, b.N*n-sent)])
		sent += m
		return m, nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadFrom(src)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	received := 0
	dst := writerFunc(func(p []byte) (int, error) {
		received += len(p)
		return len(p), nil
	})
	if _, err := s.WriteTo(dst); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if received != b.N*n {
		b.Fatalf("received %d bytes, want %d", received, b.N*n)
	}
}

func BenchmarkCopy4K(b *testing.B)  { benchCopy(b, 4096) }
func BenchmarkCopy64K(b *testing.B) { benchCopy(b, 65536) }
