//go:build linux

package valkeyrdma_test

import (
	"io"
	"net"
	"testing"

	"github.com/rdmago/rdma/internal/testenv"
)

// TestDeviceSteadyStateAllocs checks that Write and Read allocate nothing
// once a connection is up, in both ways of waiting: the work requests,
// SGEs, completions and waits are preallocated.
func TestDeviceSteadyStateAllocs(t *testing.T) {
	testenv.RequireDevice(t)
	for _, direct := range []bool{false, true} {
		name := "poller"
		if direct {
			name = "WaitInKernel"
		}
		t.Run(name, func(t *testing.T) {
			// A pipe for each size, whose writes then tile the peer's
			// buffer: a write across its end would wait for the peer to
			// read, which this single goroutine does only after it.
			for _, n := range []int{64, 4096} {
				c, s, stop, err := makePipe(direct)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				out, in := make([]byte, n), make([]byte, n)
				for range 100 {
					if err := transfer(c, s, out, in); err != nil {
						t.Fatal(err)
					}
				}
				allocs := testing.AllocsPerRun(500, func() {
					if e := transfer(c, s, out, in); e != nil {
						err = e
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if allocs != 0 {
					t.Errorf("%d-byte Write and Read: %v allocations, want 0", n, allocs)
				}
			}
		})
	}
}

// transfer writes b on c and reads it whole on s.
func transfer(c, s net.Conn, b, in []byte) error {
	if _, err := c.Write(b); err != nil {
		return err
	}
	_, err := io.ReadFull(s, in)
	return err
}
