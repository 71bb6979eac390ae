package uverbs_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// An MR dropped without Close is deregistered before its memory can be
// reused: a peer writing with the old rkey into memory the runtime has
// given to new allocations gets a remote access error, and the new
// allocations are untouched.
func TestDeviceDroppedMRStaleRKey(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	baseline := rdmatest.ResCount(t, "mr")
	const n, size = 64, 1 << 16
	type stale struct {
		addr uint64
		rkey uint32
	}
	var old []stale
	// No collection while the MRs are made, so that all of them are
	// there at once first.
	gc := debug.SetGCPercent(-1)
	func() {
		for i := 0; i < n; i++ {
			buf := make([]byte, size)
			m, err := r.PD.RegMR(buf, rdmatest.AllAccess)
			if err != nil {
				t.Fatal(err)
			}
			old = append(old, stale{m.Addr(), m.RKey()})
		}
	}()
	got := rdmatest.ResCount(t, "mr")
	debug.SetGCPercent(gc)
	if got != baseline+n {
		t.Fatalf("%d MRs registered, want %d", got-baseline, n)
	}
	uverbs.CollectUntil(t, "the dropped MRs deregistered", func() bool { return rdmatest.ResCount(t, "mr") == baseline })
	// New allocations of the same size take the freed memory back.
	fresh := make([][]byte, 4*n)
	reused := 0
	for i := range fresh {
		fresh[i] = make([]byte, size)
		a := uint64(uintptr(unsafe.Pointer(&fresh[i][0])))
		for _, s := range old {
			if s.addr == a {
				reused++
			}
		}
	}
	t.Logf("%d of %d stale addresses reused by new allocations", reused, n)
	pattern := bytes.Repeat([]byte{0x41}, 64)
	copy(r.A.Buf.Bytes(), pattern)
	var wrs []wr.SendWR
	for i, s := range old {
		wrs = append(wrs, wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.A.Buf.SGE(0, len(pattern))}, Remote: wr.Remote{Addr: s.addr, RKey: s.rkey}})
	}
	if _, err := r.A.QP.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, c := range rdmatest.WaitWC(t, r.A.CQ, n) {
		// The first write fails on the peer's check; the QP is then in
		// the error state and the rest are flushed.
		if c.Status == wr.Success || (i == 0 && c.Status != wr.RemAccessErr) {
			t.Fatalf("write %d with a stale rkey: status %v", c.ID, c.Status)
		}
	}
	for i, b := range fresh {
		if bytes.Contains(b, pattern[:8]) {
			t.Fatalf("new allocation %d was written through a stale rkey", i)
		}
	}
	runtime.KeepAlive(fresh)
}

// Every kind of object dropped without Close is released: descriptors,
// mappings and kernel objects go back to where they were.
func TestDeviceDroppedObjectsRelease(t *testing.T) {
	name := testenv.RequireDevice(t)
	maps := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "/dev/infiniband/")
	}
	kinds := []string{"pd", "cq", "qp", "mr"}
	count := func() []int {
		out := []int{openFDs(t), maps()}
		for _, k := range kinds {
			out = append(out, rdmatest.ResCount(t, k))
		}
		return out
	}
	// The runtime opens descriptors of its own the first time (the
	// poller): warm up with one set closed explicitly.
	makeSet := func(keep bool) {
		ctx, err := uverbs.Open(name)
		rdmatest.Must(t, err)
		pd, err := ctx.AllocPD()
		rdmatest.Must(t, err)
		ch, err := ctx.NewCompChannel()
		rdmatest.Must(t, err)
		cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch})
		rdmatest.Must(t, err)
		q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq,
			Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		rdmatest.Must(t, err)
		m, err := pd.RegMR(make([]byte, 4096), wr.LocalWrite)
		rdmatest.Must(t, err)
		if keep {
			for _, c := range []interface{ Close() error }{m, q, cq, ch, pd, ctx} {
				rdmatest.Check(t, "close", c.Close())
			}
		}
	}
	makeSet(true)
	before := count()
	const sets = 100
	gc := debug.SetGCPercent(-1)
	for i := 0; i < sets; i++ {
		makeSet(false)
	}
	during := count()
	debug.SetGCPercent(gc)
	if during[0] < before[0]+sets {
		t.Fatalf("%d sets made only %d descriptors: nothing to release", sets, during[0]-before[0])
	}
	uverbs.CollectUntil(t, "descriptors, mappings and kernel objects back to their baseline", func() bool {
		now := count()
		for i := range now {
			if now[i] != before[i] {
				return false
			}
		}
		return true
	})
}

// Use after Close never reaches the kernel: a closed PD's handle goes to
// the next PD, which must not receive the closed one's objects.
func TestDeviceUseAfterClose(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	old, err := r.Ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.Check(t, "close PD", old.Close())
	pd, err := r.Ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("closed PD handle %d, new PD handle %d", uverbs.HandleOf(old), uverbs.HandleOf(pd))
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: %v, want net.ErrClosed", what, err)
		}
	}
	_, err = old.RegMR(make([]byte, 64), wr.LocalWrite)
	closed("RegMR on a closed PD", err)
	cq, err := r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	caps := qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	_, err = old.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps})
	closed("CreateQP on a closed PD", err)
	rdmatest.Check(t, "close CQ", cq.Close())
	_, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.A.CQ, RecvCQ: cq, Caps: caps})
	closed("CreateQP with a closed CQ", err)
	rdmatest.Check(t, "the new PD, which nothing landed on: Close", pd.Close())

	// A closed QP and AH.
	uq := rdmatest.NewPair(t, qp.UD, qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	ah, err := uq.PD.CreateAH(qp.AHAttr{IsGlobal: true, DGID: uq.GID, SGIDIndex: uq.GIDIndex, HopLimit: 1, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	rdmatest.Check(t, "close AH", ah.Close())
	_, err = uq.A.QP.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: []wr.SGE{uq.A.Buf.SGE(0, 8)}, AH: ah,
		RemoteQPN: uq.B.QP.Num(), RemoteQKey: rdmatest.QKey}})
	closed("UD send with a closed AH", err)
	var typedNil *uverbs.AH
	_, err = uq.A.QP.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: []wr.SGE{uq.A.Buf.SGE(0, 8)}, AH: typedNil,
		RemoteQPN: uq.B.QP.Num(), RemoteQKey: rdmatest.QKey}})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("UD send with a typed-nil AH: %v, want EINVAL", err)
	}
}

// Inline sends racing Close of the region they read from never fault: the
// region's memory is Go memory, alive as long as anything refers to it.
func TestDeviceInlineRacesRegionClose(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	for i := 0; i < 50; i++ {
		reg, err := mr.New(r.PD, 4096, wr.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		sge := reg.SGE(0, 64)
		done := make(chan struct{})
		go func() {
			defer close(done)
			wc := make([]wr.Completion, 16)
			for j := 0; j < 20; j++ {
				// Unsignaled RDMA writes into the peer's region.
				r.A.QP.PostSend([]wr.SendWR{{Opcode: wr.OpRDMAWrite, Flags: wr.Inline, SGList: []wr.SGE{sge},
					Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}}})
				r.A.CQ.Poll(wc)
			}
		}()
		rdmatest.Check(t, "close region", reg.Close())
		<-done
	}
	// The QP is still good: a signaled write completes, once the send
	// queue has room again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := r.A.QP.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.A.Buf.SGE(0, 8)}, Remote: wr.Remote{Addr: r.B.Buf.Addr(), RKey: r.B.Buf.RKey()}}})
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOMEM) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		wc := make([]wr.Completion, 16)
		n, err := r.A.CQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			if c.ID == 1 {
				if c.Status != wr.Success {
					t.Fatalf("write after the races: %v", c.Status)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion for the write after the races")
		}
		time.Sleep(time.Millisecond)
	}
}
