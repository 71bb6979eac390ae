package cm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/uverbs"
)

func TestDeviceSyncConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen, port := rdmatest.Listen(t, cm.PSTCP)
	t.Logf("listening on %v, device %v port %d", listen.SrcAddr(), listen.Verbs().Device().Name, listen.PortNum())
	caps := provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	done := make(chan error, 1)
	go func() {
		id, err := listen.GetRequest(ctx)
		if err != nil {
			done <- err
			return
		}
		defer id.Destroy()
		t.Logf("request: %v private %q", id.Event(), id.Event().PrivateData())
		if err := id.CreateQP(nil, uverbs.QPInitAttr{Cap: caps}); err != nil {
			done <- err
			return
		}
		if err := id.Accept(ctx, nil); err != nil {
			done <- err
			return
		}
		t.Logf("server established, QP %d state %v", id.QP().Num(), id.QP().State())
		done <- id.Disconnect(ctx)
	}()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(rdmatest.VMAddr, port), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("route %+v", id.Route())
	if err := id.CreateQP(nil, uverbs.QPInitAttr{Cap: caps}); err != nil {
		t.Fatal(err)
	}
	p := cm.DefaultConnParam()
	p.PrivateData = []byte("hello")
	if err := id.Connect(ctx, &p); err != nil {
		t.Fatal(err)
	}
	t.Logf("client established, QP %d state %v", id.QP().Num(), id.QP().State())
	if err := id.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
