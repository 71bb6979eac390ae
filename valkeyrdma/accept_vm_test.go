//go:build linux

package valkeyrdma_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/valkeyrdma"
)

// TestDeviceAcceptWithdrawnRequest: a request whose client gave up before
// Accept took it cannot be served (valkey's rdma-test gives up a connect
// after its timeout). Accept rejects it, releases what it made for it and
// goes on to the next request.
func TestDeviceAcceptWithdrawnRequest(t *testing.T) {
	testenv.RequireDevice(t)
	l, err := valkeyrdma.Listen("rdma", netip.AddrPortFrom(rdmatest.VMAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	param := &cm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	rdmatest.AcceptAfterWithdrawn(t, l.Addr().(valkeyrdma.Addr).Port(), param, func() { connectPair(t, l) })
}

// connectPair dials l and accepts; both ends close when the test ends.
func connectPair(t *testing.T, l *valkeyrdma.Listener) {
	t.Helper()
	var d valkeyrdma.Dialer
	rdmatest.ConnectPair(t, l.Accept, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "rdma", l.Addr().String())
	})
}
