//go:build linux

package valkeyrdma_test

import (
	"context"
	"errors"
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
// while blocked, and Close ending blocked calls. Once with the waits of
// the CQ's reader goroutine, once with WaitInKernel, whose waits, deadlines
// and Close take another path.
func TestDeviceNettestConn(t *testing.T) {
	testenv.RequireDevice(t)
	for _, direct := range []bool{false, true} {
		name := "poller"
		if direct {
			name = "WaitInKernel"
		}
		t.Run(name, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				return makePipe(direct)
			})
		})
	}
}

func makePipe(direct bool) (c1, c2 net.Conn, stop func(), err error) {
	lc := valkeyrdma.ListenConfig{WaitInKernel: direct}
	l, err := lc.Listen(context.Background(), "rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		return nil, nil, nil, err
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	d := valkeyrdma.Dialer{WaitInKernel: direct}
	c, err := d.Dial("rdma", l.Addr().String())
	r := <-ch
	if err != nil || r.err != nil {
		if c != nil {
			c.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
		return nil, nil, nil, errors.Join(err, r.err)
	}
	return c, r.c, func() { c.Close(); r.c.Close() }, nil
}
