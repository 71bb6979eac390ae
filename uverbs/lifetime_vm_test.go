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

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// resCount counts the kernel's objects of a kind (pd, cq, qp, mr) that this
// program made, as rdma res lists them.
func resCount(t *testing.T, kind string) int {
	t.Helper()
	lines, err := ourResLines(kind)
	if err != nil {
		t.Fatal(err)
	}
	return len(lines)
}

// collectUntil runs the garbage collector until cond holds. Cleanups run
// after a collection, each level of dependency (MR, then PD, then context)
// one collection after the other.
func collectUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s of collections", what)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// An MR dropped without Close is deregistered before its memory can be
// reused: a peer writing with the old rkey into memory the runtime has
// given to new allocations gets a remote access error, and the new
// allocations are untouched.
func TestDeviceDroppedMRStaleRKey(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	baseline := resCount(t, "mr")
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
			m, err := r.pd.RegMR(buf, allAccess)
			if err != nil {
				t.Fatal(err)
			}
			old = append(old, stale{m.Addr(), m.RKey})
		}
	}()
	got := resCount(t, "mr")
	debug.SetGCPercent(gc)
	if got != baseline+n {
		t.Fatalf("%d MRs registered, want %d", got-baseline, n)
	}
	collectUntil(t, "the dropped MRs deregistered", func() bool { return resCount(t, "mr") == baseline })
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
	copy(r.a.buf.Bytes(), pattern)
	var wrs []wr.SendWR
	for i, s := range old {
		wrs = append(wrs, wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.a.buf.SGE(0, len(pattern))}, RemoteAddr: s.addr, RKey: s.rkey})
	}
	if _, err := r.a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, c := range waitWC(t, r.a.cq, n) {
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
			out = append(out, resCount(t, k))
		}
		return out
	}
	// The runtime opens descriptors of its own the first time (the
	// poller): warm up with one set closed explicitly.
	makeSet := func(keep bool) {
		ctx, err := uverbs.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		pd, err := ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		ch, err := ctx.NewCompChannel()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch})
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq,
			Cap: provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, 4096), wr.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			for _, c := range []interface{ Close() error }{m, q, cq, ch, pd, ctx} {
				check(t, "close", c.Close())
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
	collectUntil(t, "descriptors, mappings and kernel objects back to their baseline", func() bool {
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
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	old, err := r.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	check(t, "close PD", old.Close())
	pd, err := r.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("closed PD handle %d, new PD handle %d", old.Handle(), pd.Handle())
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: %v, want net.ErrClosed", what, err)
		}
	}
	_, err = old.RegMR(make([]byte, 64), wr.LocalWrite)
	closed("RegMR on a closed PD", err)
	cq, err := r.ctx.CreateCQ(uverbs.CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	caps := provider.QPCaps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	_, err = old.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: caps})
	closed("CreateQP on a closed PD", err)
	check(t, "close CQ", cq.Close())
	_, err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: r.a.cq, RecvCQ: cq, Cap: caps})
	closed("CreateQP with a closed CQ", err)
	check(t, "the new PD, which nothing landed on: Close", pd.Close())

	// A closed QP and AH.
	uq := newRig(t, qp.UD, provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	ah, err := uq.pd.CreateAH(provider.AHAttr{IsGlobal: true, DGID: uq.gid, SGIDIndex: uq.gidIndex, HopLimit: 1, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "close AH", ah.Close())
	_, err = uq.a.qp.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: []wr.SGE{uq.a.buf.SGE(0, 8)}, AH: ah,
		RemoteQPN: uq.b.qp.Num(), RemoteQKey: testQKey}})
	closed("UD send with a closed AH", err)
	var typedNil *uverbs.AH
	_, err = uq.a.qp.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: []wr.SGE{uq.a.buf.SGE(0, 8)}, AH: typedNil,
		RemoteQPN: uq.b.qp.Num(), RemoteQKey: testQKey}})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("UD send with a typed-nil AH: %v, want EINVAL", err)
	}
}

// Bad addresses and lengths in a work request are errors, not crashes or
// truncated messages.
func TestDeviceBadSGEs(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64})
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	gone := uint64(uintptr(unsafe.Pointer(&m[0])))
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		w    wr.SendWR
		want error
	}{
		{"inline from unmapped memory", wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline,
			SGList: []wr.SGE{{Addr: gone, Length: 16}}}, unix.EFAULT},
		{"inline from address 0", wr.SendWR{Opcode: wr.OpSend, Flags: wr.Inline,
			SGList: []wr.SGE{{Addr: 0, Length: 16}}}, unix.EFAULT},
		{"lengths past 2^32", wr.SendWR{Opcode: wr.OpSend,
			SGList: []wr.SGE{r.a.buf.SGE(0, 0xfffffff0), r.a.buf.SGE(0, 0x20)}}, unix.EINVAL},
	} {
		n, err := r.a.qp.PostSend([]wr.SendWR{tc.w})
		if n != 0 || !errors.Is(err, tc.want) {
			t.Errorf("%s: posted %d, %v; want %v", tc.name, n, err, tc.want)
		}
	}
	n, err := r.b.qp.PostRecv([]wr.RecvWR{{SGList: []wr.SGE{r.b.buf.SGE(0, 0xfffffff0), r.b.buf.SGE(0, 0x20)}}})
	if n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("receive lengths past 2^32: posted %d, %v; want EINVAL", n, err)
	}
	// The queue is intact: a good send still goes through.
	msg := []byte("still working")
	copy(r.a.buf.Bytes(), msg)
	if _, err := r.b.qp.PostRecv([]wr.RecvWR{{ID: 2, SGList: []wr.SGE{r.b.buf.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled | wr.Inline,
		SGList: []wr.SGE{r.a.buf.SGE(0, len(msg))}}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, r.a.cq, 1)[0], 1, wr.WCSend)
	wantOK(t, waitWC(t, r.b.cq, 1)[0], 2, wr.WCRecv)
	if got := r.b.buf.Bytes()[:len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("received %q", got)
	}

	// Region memory stays valid after Close: reading and writing a slice
	// kept from Bytes does not fault.
	kept := r.b.buf.Bytes()
	check(t, "close region", r.b.buf.Close())
	kept[0] = 1
	if kept[1] != msg[1] {
		t.Errorf("region memory changed after Close")
	}
}

// A receive posted to a QP in the error state completes with a flush
// error, whether the QP got there by Modify or by a failed request, even
// on kernels that leave such a receive in the queue for ever (rxe on 6.1).
func TestDeviceRecvInErrorStateFlushes(t *testing.T) {
	caps := provider.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	t.Run("Modify", func(t *testing.T) {
		r := newRig(t, qp.RC, caps)
		if err := r.a.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		n, err := r.a.qp.PostRecv([]wr.RecvWR{{ID: 1, SGList: []wr.SGE{r.a.buf.SGE(0, 64)}}, {ID: 2}})
		if n != 2 || err != nil {
			t.Fatalf("PostRecv in ERR: %d, %v", n, err)
		}
		for i, c := range waitWC(t, r.a.cq, 2) {
			if c.ID != uint64(i+1) || c.Status != wr.WRFlushErr || c.Opcode != wr.WCRecv || c.QPNum != r.a.qp.Num() {
				t.Errorf("completion %d: %+v; want a flushed receive %d", i, c, i+1)
			}
		}
	})
	t.Run("ErrorCompletion", func(t *testing.T) {
		r := newRig(t, qp.RC, caps)
		if _, err := r.a.qp.PostSend([]wr.SendWR{{ID: 7, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.a.buf.SGE(0, 8)}, RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey + 0x1000}}); err != nil {
			t.Fatal(err)
		}
		if c := waitWC(t, r.a.cq, 1)[0]; c.Status != wr.RemAccessErr {
			t.Fatalf("write with a bad rkey: %v", c.Status)
		}
		if _, err := r.a.qp.PostRecv([]wr.RecvWR{{ID: 8, SGList: []wr.SGE{r.a.buf.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if c := waitWC(t, r.a.cq, 1)[0]; c.ID != 8 || c.Status != wr.WRFlushErr {
			t.Errorf("receive after the QP failed: %+v; want a flushed receive 8", c)
		}
	})
}

// Inline sends racing Close of the region they read from never fault: the
// region's memory is Go memory, alive as long as anything refers to it.
func TestDeviceInlineRacesRegionClose(t *testing.T) {
	r := newRig(t, qp.RC, provider.QPCaps{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	for i := 0; i < 50; i++ {
		reg, err := mr.New(r.pd, 4096, wr.LocalWrite)
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
				r.a.qp.PostSend([]wr.SendWR{{Opcode: wr.OpRDMAWrite, Flags: wr.Inline, SGList: []wr.SGE{sge},
					RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey}})
				r.a.cq.Poll(wc)
			}
		}()
		check(t, "close region", reg.Close())
		<-done
	}
	// The QP is still good: a signaled write completes, once the send
	// queue has room again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := r.a.qp.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled,
			SGList: []wr.SGE{r.a.buf.SGE(0, 8)}, RemoteAddr: r.b.buf.Addr(), RKey: r.b.buf.RKey}})
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
		n, err := r.a.cq.Poll(wc)
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
