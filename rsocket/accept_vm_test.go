//go:build linux

package rsocket_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/rsocket"
)

// TestDeviceAcceptWithdrawnRequest: a request whose client gave up before
// Accept took it cannot be served. Accept rejects it, releases what it
// made for it and goes on to the next request.
func TestDeviceAcceptWithdrawnRequest(t *testing.T) {
	l := listen(t)
	param := &cm.ConnParam{PrivateData: rsocket.ConnDataForTest(), RetryCount: 7, RNRRetryCount: 7}
	rdmatest.AcceptAfterWithdrawn(t, l.Addr().(rsocket.Addr).Port(), param, func() { acceptOne(t, l) })
}

// acceptOne dials l and accepts; both ends close when the test ends.
func acceptOne(t *testing.T, l *rsocket.Listener) {
	t.Helper()
	var d rsocket.Dialer
	rdmatest.ConnectPair(t, l.AcceptRsocket, func(ctx context.Context) (*rsocket.Conn, error) {
		return d.DialContext(ctx, "rdma", l.Addr().String())
	})
}
