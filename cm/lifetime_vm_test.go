package cm_test

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// bindID makes a synchronous ID bound to the VM's address, which binds it
// to rxe0.
func bindID(t testing.TB) *cm.ID {
	t.Helper()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	rdmatest.Must(t, err)
	if err := id.BindAddr(netip.AddrPortFrom(rdmatest.VMAddr, 0)); err != nil {
		id.Close()
		t.Fatal(err)
	}
	return id
}

// TestDeviceVerbsOutliveIDs: a PD and CQ made on an ID's device context,
// as cmtime and cmatose make them, stay valid after the last ID on the
// device is destroyed, and serve the next ID's QP; so does the shared PD.
func TestDeviceVerbsOutliveIDs(t *testing.T) {
	rdmatest.Context(t)
	id := bindID(t)
	vctx := id.Verbs()
	shared := id.PD()
	pd, err := vctx.AllocPD()
	rdmatest.Must(t, err)
	defer pd.Close()
	cq, err := vctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	rdmatest.Must(t, err)
	defer cq.Close()
	rdmatest.Destroy(t, id) // the last ID on rxe0

	buf := rdmatest.Alloc(t, 4096)
	m, err := pd.RegMR(buf, wr.LocalWrite)
	if err != nil {
		t.Fatalf("RegMR on a PD of the device context after the last ID went: %v", err)
	}
	rdmatest.Must(t, m.Close())
	m, err = shared.RegMR(buf, wr.LocalWrite)
	if err != nil {
		t.Fatalf("RegMR on the shared PD after the last ID went: %v", err)
	}
	rdmatest.Must(t, m.Close())

	id2 := bindID(t)
	defer rdmatest.Destroy(t, id2)
	if id2.Verbs() != vctx || id2.PD() != shared {
		t.Errorf("the next ID on the device got another context or PD")
	}
	err = id2.CreateQP(pd, uverbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Caps: rdmatest.Caps})
	if err != nil {
		t.Fatalf("CreateQP with the kept PD and CQ: %v", err)
	}
	if q := id2.QP(); q.State() != qp.StateInit {
		t.Errorf("QP in %v", q.State())
	}
	rdmatest.Must(t, id2.DestroyQP())
}

// TestDeviceAsyncPeerGoneFlush: the peer goes away while an asynchronous
// ID has RDMA writes outstanding, and the program only polls the CQ. The
// DISCONNECTED event moves the QP to the error state (a grace period
// later), so every write completes, flushed or not, within a bound. The
// ACK timeout is long enough (4 s a try, 8 tries) that the transport's own
// retries would not end them within it.
func TestDeviceAsyncPeerGoneFlush(t *testing.T) {
	ctx := rdmatest.Context(t)
	l, port := rdmatest.Listen(t, cm.PSTCP)
	ch := rdmatest.NewChannel(t)
	client := rdmatest.NewID(t, ch, nil, cm.PSTCP)
	rdmatest.Must(t, client.SetAckTimeout(20))
	rdmatest.Must(t, client.ResolveAddr(ctx, netip.AddrPort{}, netip.AddrPortFrom(rdmatest.VMAddr, port), 0))
	nextEvent(ctx, t, ch, cm.EventAddrResolved, client)
	rdmatest.Must(t, client.ResolveRoute(ctx, 0))
	nextEvent(ctx, t, ch, cm.EventRouteResolved, client)
	rdmatest.Must(t, client.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))

	sbuf := rdmatest.Alloc(t, 1<<16)
	srv := rdmatest.AcceptAsync(ctx, l, rdmatest.Caps, nil)
	rdmatest.Must(t, client.Connect(ctx, nil))
	nextEvent(ctx, t, ch, cm.EventEstablished, client)
	s := <-srv
	rdmatest.Must(t, s.Err)
	sm := rdmatest.Reg(t, s.ID.RegWrite, sbuf)
	remote := sm.Remote()

	// The peer goes: its QP, then its ID, which sends the DREQ.
	rdmatest.Destroy(t, s.ID)

	const n = 16
	cbuf, cmr := rdmatest.Msgs(t, client, 1<<16)
	for i := range n {
		rdmatest.Must(t, client.PostWrite(uint64(i), cbuf[i*1024:(i+1)*1024], cmr, wr.Signaled, remote.Add(uint64(i*1024))))
	}
	nextEvent(ctx, t, ch, cm.EventDisconnected, client)
	gone := time.Now()

	const bound = 5 * time.Second
	cq := client.SendCQ()
	wc := make([]wr.Completion, n)
	got := map[uint64]wr.Status{}
	for len(got) < n && time.Since(gone) < bound {
		k, err := cq.Poll(wc)
		rdmatest.Must(t, err)
		for _, c := range wc[:k] {
			if _, dup := got[c.ID]; dup {
				t.Errorf("request %d completed twice", c.ID)
			}
			got[c.ID] = c.Status
		}
		if k == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(got) < n {
		t.Fatalf("%d of %d outstanding writes completed within %v of DISCONNECTED (QP in %v)",
			len(got), n, bound, client.QP().State())
	}
	flushed := 0
	for id, st := range got {
		switch st {
		case wr.Success:
		case wr.WRFlushErr:
			flushed++
		default:
			t.Errorf("write %d: %v", id, st)
		}
	}
	t.Logf("all %d writes completed %v after DISCONNECTED, %d flushed", n, time.Since(gone).Round(time.Millisecond), flushed)
	// The kernel flushes the writes while the move to the error state is
	// under way; the QP's state is recorded when that call returns, which
	// on a slow guest can come after the test has polled the flushes.
	for deadline := time.Now().Add(bound); client.QP().State() != qp.StateErr && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if client.QP().State() != qp.StateErr {
		t.Errorf("QP in %v %v after the peer's disconnect", client.QP().State(), time.Since(gone).Round(time.Millisecond))
	}
}

// dropIDs makes IDs of every kind and drops them without Destroy: bound
// synchronous IDs with a QP, unbound ones, asynchronous IDs with and
// without a QP on a channel that is dropped too, and a connected pair with
// its listener. It returns how many IDs it made.
func dropIDs(ctx context.Context, t *testing.T) int {
	made := 0
	for range 40 {
		id := bindID(t)
		rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
		made++
	}
	for range 27 {
		_, err := cm.CreateID(nil, nil, cm.PSTCP)
		rdmatest.Must(t, err)
		made++
	}
	ch, err := cm.NewEventChannel()
	rdmatest.Must(t, err)
	for i := range 30 {
		id, err := cm.CreateID(ch, nil, cm.PSUDP)
		rdmatest.Must(t, err)
		rdmatest.Must(t, id.BindAddr(netip.AddrPortFrom(rdmatest.VMAddr, 0)))
		if i%2 == 0 {
			rdmatest.Must(t, id.CreateQP(nil, uverbs.QPInitAttr{Caps: rdmatest.Caps}))
		}
		made++
	}
	l := bindID(t)
	rdmatest.Must(t, l.Listen(0))
	port := l.SrcAddr().Port()
	srv := rdmatest.AcceptAsync(ctx, l, rdmatest.Caps, nil)
	c, err := rdmatest.Dial(ctx, t, cm.PSTCP, port, rdmatest.Caps, nil)
	rdmatest.Must(t, err)
	rdmatest.Must(t, (<-srv).Err)
	if c.QP().State() != qp.StateRTS {
		t.Fatalf("client QP in %v", c.QP().State())
	}
	return made + 3
}

// TestDeviceDroppedIDs: IDs dropped without Destroy are destroyed once the
// garbage collector finds them unreachable, with their QPs, CQs,
// completion channels and event channels: the process's descriptors and
// kernel objects come back to where they were.
func TestDeviceDroppedIDs(t *testing.T) {
	ctx := rdmatest.Context(t)
	rdmatest.Destroy(t, bindID(t)) // opens rxe0's kept context
	fds0, res0 := fdCount(), rdmatest.LeftBehind(resKinds...)
	made := dropIDs(ctx, t)
	t.Logf("%d IDs dropped: %d descriptors open, %d before", made, fdCount(), fds0)

	deadline := time.Now().Add(20 * time.Second)
	var fds int
	var res string
	for {
		runtime.GC()
		fds, res = fdCount(), rdmatest.LeftBehind(resKinds...)
		if (fds == fds0 && res == res0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fds != fds0 {
		t.Errorf("%d descriptors open, %d before the IDs were made:\n%s", fds, fds0, fdList())
	}
	if res != res0 {
		t.Errorf("kernel objects:\n%s\nbefore the IDs were made:\n%s", res, res0)
	}
}
