//go:build linux

package valkeyrdma_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/nettest"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/valkeyrdma"
)

// TestDeviceNettestConn runs golang.org/x/net/nettest's conformance suite
// for net.Conn on a Dial and Accept pair: basic I/O, ping-pong, racing
// Reads, Writes and Closes, past and future deadlines, deadlines moved
// while blocked, and Close ending blocked calls; with the CQ's reader
// goroutine, and with WaitInKernel.
func TestDeviceNettestConn(t *testing.T) {
	testenv.RequireDevice(t)
	rdmatest.WaitModes(t, func(t *testing.T, direct bool) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			return makePipe(direct)
		})
	})
}

// TestDeviceSteadyStateAllocs checks that Write and Read allocate nothing
// once a connection is up, in both ways of waiting. A pipe for each size:
// its writes then tile the peer's buffer, whereas a write across the
// buffer's end would wait for the peer to read, which this one goroutine
// does only after it.
func TestDeviceSteadyStateAllocs(t *testing.T) {
	testenv.RequireDevice(t)
	rdmatest.WaitModes(t, func(t *testing.T, direct bool) {
		for _, n := range []int{64, 4096} {
			c, s, stop, err := makePipe(direct)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			rdmatest.NoTransferAllocs(t, c, s, n)
		}
	})
}

func makePipe(direct bool) (c1, c2 net.Conn, stop func(), err error) {
	lc := valkeyrdma.ListenConfig{WaitInKernel: direct}
	l, err := lc.Listen(context.Background(), "rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		return nil, nil, nil, err
	}
	d := valkeyrdma.Dialer{WaitInKernel: direct}
	return rdmatest.Pipe(l, func(addr string) (net.Conn, error) { return d.Dial("rdma", addr) })
}
