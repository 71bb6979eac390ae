package cm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceMulticast joins two UD IDs to a group, sends to it from one
// and receives on the other, then leaves.
func TestDeviceMulticast(t *testing.T) {
	ctx := rdmatest.Context(t)
	group := netip.MustParseAddr("239.1.2.3")
	join := func(name string) (*cm.ID, *cm.Event) {
		id, err := cm.CreateID(nil, name, cm.PSUDP)
		rdmatest.Must(t, err)
		t.Cleanup(func() { rdmatest.Destroy(t, id) })
		rdmatest.Must(t, id.ResolveAddr(ctx, netip.AddrPortFrom(rdmatest.VMAddr, 0), netip.AddrPortFrom(group, 0), 2*time.Second))
		rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
		rdmatest.Must(t, id.JoinMulticast(ctx, group, cm.JoinFullMember, name+" joined"))
		ev := id.Event()
		if ev.Type != cm.EventMulticastJoin || ev.UserData != name+" joined" || ev.UD.QPNum != 0xffffff {
			t.Fatalf("%s: join event %v %+v context %v", name, ev, ev.UD, ev.UserData)
		}
		return id, ev
	}
	recv, _ := join("receiver")
	send, ev := join("sender")
	rbuf, rm := rdmatest.Msgs(t, recv, 4096)
	rdmatest.Must(t, recv.PostRecv(1, rbuf[:grh+100], rm))
	ah := rdmatest.CreateAH(t, send, ev.UD.AHAttr)
	sendUD(ctx, t, "mcast send", send, 2, []byte("to the group"), nil, wr.Signaled|wr.Inline, ah, ev.UD.QPNum)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wc, err := recv.GetRecvComp(rctx)
	wantComp(t, "mcast recv", wc, err, 1, wr.WCRecv)
	if got := string(rbuf[grh:wc.ByteLen]); got != "to the group" {
		t.Errorf("received %q", got)
	}
	rdmatest.Must(t, send.LeaveMulticast(group))
	rdmatest.Must(t, recv.LeaveMulticast(group))
	wantErrno(t, "leave twice", recv.LeaveMulticast(group), unix.EADDRNOTAVAIL)
}
