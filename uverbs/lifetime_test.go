package uverbs

import (
	"errors"
	"net"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/seal"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// objectKernel is rxeLikeKernel that also allocates PDs and registers MRs
// (through UVERBS_METHOD_INVOKE_WRITE) and destroys PDs, MRs and AHs,
// numbering handles as the kernel does: the lowest free one first, so a
// closed object's handle goes to the next object made.
func objectKernel(t testing.TB) *fakeKernel {
	k := rxeLikeKernel(t)
	used := map[uint32]bool{}
	alloc := func() uint32 {
		for h := uint32(0); ; h++ {
			if !used[h] {
				used[h] = true
				return h
			}
		}
	}
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE, func(c *fakeCall) error {
		cmd, _, _ := c.attr(abi.UVERBS_ATTR_WRITE_CMD)
		switch cmd.Data {
		case abi.IB_USER_VERBS_CMD_ALLOC_PD:
			resp := abi.IbUverbsAllocPdResp{Pd_handle: alloc()}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&resp))
		case abi.IB_USER_VERBS_CMD_REG_MR:
			h := alloc()
			resp := abi.IbUverbsRegMrResp{Mr_handle: h, Lkey: h<<8 | 1, Rkey: h<<8 | 2}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&resp))
		case abi.IB_USER_VERBS_CMD_ALLOC_MW:
			var req abi.IbUverbsAllocMw
			copy(bytesOf(&req), c.in(abi.UVERBS_ATTR_CORE_IN))
			if !used[req.Pd_handle] || (req.Mw_type != 1 && req.Mw_type != 2) {
				return unix.EINVAL
			}
			h := alloc()
			resp := abi.IbUverbsAllocMwResp{Mw_handle: h, Rkey: h<<8 | 0x40 | uint32(req.Mw_type)}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&resp))
		}
		return unix.EOPNOTSUPP
	})
	destroy := func(attr uint16) func(c *fakeCall) error {
		return func(c *fakeCall) error {
			a, _, _ := c.attr(attr)
			if !used[uint32(a.Data)] {
				return unix.ENOENT
			}
			delete(used, uint32(a.Data))
			return nil
		}
	}
	k.handle(abi.UVERBS_OBJECT_PD, abi.UVERBS_METHOD_PD_DESTROY, destroy(abi.UVERBS_ATTR_DESTROY_PD_HANDLE))
	k.handle(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_MR_DESTROY, destroy(abi.UVERBS_ATTR_DESTROY_MR_HANDLE))
	k.handle(abi.UVERBS_OBJECT_MW, abi.UVERBS_METHOD_MW_DESTROY, destroy(abi.UVERBS_ATTR_DESTROY_MW_HANDLE))
	return k
}

// objectContext opens a context on objectKernel, closed when the test ends.
func objectContext(t testing.TB) (*fakeKernel, *Context) {
	t.Helper()
	k := objectKernel(t)
	return k, fakeContext(t, k)
}

// allocPD allocates a PD on c or fails the test.
func allocPD(t testing.TB, c *Context) *PD {
	t.Helper()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

func wantClosed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: %v; want an error matching ErrClosed and net.ErrClosed", what, err)
	}
}

// A closed PD, CQ or SRQ never reaches the kernel again, as a receiver or
// as an argument: its handle may already name a newer object.
func TestClosedObjectsStayClosed(t *testing.T) {
	k, c := objectContext(t)
	old := allocPD(t, c)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	pd := allocPD(t, c)
	if pd.handle != old.handle {
		t.Fatalf("the fake kernel did not reuse handle %d (got %d)", old.handle, pd.handle)
	}
	calls, _ := k.snapshot()
	before := len(calls)

	cq := &CQ{object: newObject(c, kindCQ, 7)}
	deadCQ := &CQ{object: newObject(c, kindCQ, 8)}
	deadCQ.dead.Store(true)
	buf := make([]byte, 64)
	_, err := old.RegMR(buf, wr.LocalWrite)
	wantClosed(t, "RegMR on a closed PD", err)
	_, err = old.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq})
	wantClosed(t, "CreateQP on a closed PD", err)
	_, err = old.CreateSRQ(SRQAttr{MaxWR: 1, MaxSGE: 1})
	wantClosed(t, "CreateSRQ on a closed PD", err)
	_, err = old.CreateAH(qp.AHAttr{PortNum: 1})
	wantClosed(t, "CreateAH on a closed PD", err)
	_, err = pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: deadCQ})
	wantClosed(t, "CreateQP with a closed receive CQ", err)
	_, err = pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: deadCQ, RecvCQ: cq})
	wantClosed(t, "CreateQP with a closed send CQ", err)
	_, err = deadCQ.Poll(make([]wr.Completion, 1))
	wantClosed(t, "Poll of a closed CQ", err)
	wantClosed(t, "ReqNotify of a closed CQ", deadCQ.ReqNotify(false))

	deadQP := &QP{object: newObject(c, kindQP, 9), pd: pd, typ: qp.RC}
	deadQP.dead.Store(true)
	_, err = deadQP.PostSend([]wr.SendWR{{Opcode: wr.OpSend}})
	wantClosed(t, "PostSend on a closed QP", err)
	_, err = deadQP.PostRecv([]wr.RecvWR{{}})
	wantClosed(t, "PostRecv on a closed QP", err)
	wantClosed(t, "Modify of a closed QP", deadQP.Modify(qp.Attr{State: qp.StateErr}, qp.AttrState))
	_, _, err = deadQP.Query(qp.AttrState)
	wantClosed(t, "Query of a closed QP", err)
	wantClosed(t, "AttachMcast of a closed QP", deadQP.AttachMcast(qp.GID{}, 0))

	if calls, _ := k.snapshot(); len(calls) != before {
		t.Errorf("closed objects reached the kernel: %+v", calls[before:])
	}
	if err := pd.Close(); err != nil {
		t.Errorf("the newer PD holding the reused handle: Close: %v", err)
	}
}

// postRecorder is a provider QP that records what reaches it.
type postRecorder struct {
	sends    int
	lastSend wr.SendWR
	stopped  bool
}

func (p *postRecorder) PostSend(wrs []wr.SendWR) (int, error) {
	if p.stopped {
		return 0, provider.ErrStopped
	}
	p.sends += len(wrs)
	if len(wrs) > 0 {
		p.lastSend = wrs[len(wrs)-1]
	}
	return len(wrs), nil
}
func (p *postRecorder) PostRecv(wrs []wr.RecvWR) (int, error) {
	if p.stopped {
		return 0, provider.ErrStopped
	}
	return len(wrs), nil
}
func (p *postRecorder) Stop()        { p.stopped = true }
func (p *postRecorder) Resume()      { p.stopped = false }
func (p *postRecorder) Close() error { p.stopped = true; return nil }

// fakeProvAH is a provider's AH, and also a wr.AddressHandle of the
// program's own, which names no destination.
type fakeProvAH struct{}

func (fakeProvAH) Dest() wr.AH { return wr.AH{} }

// A UD send's address handle is checked before the provider reads it: nil,
// typed nil, closed, of another PD or of another type is an error naming
// the work request, and the requests before it are posted.
func TestUDSendAddressHandles(t *testing.T) {
	_, c := objectContext(t)
	pd := allocPD(t, c)
	other := allocPD(t, c)
	rec := &postRecorder{}
	q := &QP{object: newObject(c, kindQP, 3), pd: pd, typ: qp.UD, prov: rec}
	q.state.Store(uint32(qp.StateRTS))
	good := &AH{object: newObject(c, kindAH, 4), pd: pd, prov: fakeProvAH{}, dest: seal.NewAH[wr.AH](fakeProvAH{})}
	closed := &AH{object: newObject(c, kindAH, 5), pd: pd, prov: fakeProvAH{}, dest: seal.NewAH[wr.AH](fakeProvAH{})}
	closed.dead.Store(true)
	foreign := &AH{object: newObject(c, kindAH, 6), pd: other, prov: fakeProvAH{}, dest: seal.NewAH[wr.AH](fakeProvAH{})}
	var typedNil *AH
	for _, tc := range []struct {
		name string
		ah   wr.AddressHandle
		want error
	}{
		{"no AH", nil, unix.EINVAL},
		{"typed nil", typedNil, unix.EINVAL},
		{"closed", closed, net.ErrClosed},
		{"another PD", foreign, unix.EINVAL},
		{"another type", fakeProvAH{}, unix.EINVAL},
	} {
		rec.sends = 0
		n, err := q.PostSend([]wr.SendWR{{Opcode: wr.OpSend, AH: good}, {Opcode: wr.OpSend, AH: tc.ah}})
		var pe *PostError
		if n != 1 || !errors.Is(err, tc.want) || !errors.As(err, &pe) || pe.Index != 1 || rec.sends != 1 {
			t.Errorf("%s: posted %d (provider %d), %v; want 1 and %v at index 1", tc.name, n, rec.sends, err, tc.want)
		}
	}
	if d, c, g := typedNil.Dest(), closed.Dest(), good.Dest(); seal.Value(&d) != nil || seal.Value(&c) != nil || seal.Value(&g) == nil {
		t.Error("Dest of a nil or closed AH names a destination, or a good one's names none")
	}
}

// waitFor runs the garbage collector until cond holds: cleanups run after
// a collection found their object unreachable, and an object's dependents
// (MR, then PD, then context) each need one more. The device tests use it
// too, as CollectUntil.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s of collections", what)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// Objects dropped without Close release themselves, in dependency order:
// the MR is deregistered before its PD is deallocated, and the context's
// command file closes only after both, and the MR's memory stays alive
// until the deregistration.
func TestDroppedObjectsReleaseThemselves(t *testing.T) {
	k := objectKernel(t)
	var freed = make(chan struct{})
	func() {
		c, err := newContext(testDev, k)
		if err != nil {
			t.Fatal(err)
		}
		pd := allocPD(t, c)
		buf := make([]byte, 1<<16)
		runtime.AddCleanup(&buf[0], func(ch chan struct{}) { close(ch) }, freed)
		if _, err := pd.RegMR(buf, wr.LocalWrite); err != nil {
			t.Fatal(err)
		}
	}()
	waitFor(t, "the dropped context's command file closed", func() bool { _, closed := k.snapshot(); return closed })
	calls, _ := k.snapshot()
	var order []uint16
	for _, c := range calls {
		switch c.Object {
		case abi.UVERBS_OBJECT_MR, abi.UVERBS_OBJECT_PD:
			order = append(order, c.Object)
		}
	}
	if len(order) != 2 || order[0] != abi.UVERBS_OBJECT_MR || order[1] != abi.UVERBS_OBJECT_PD {
		t.Fatalf("destroys in order %v; want the MR's, then the PD's", order)
	}
	waitFor(t, "the MR's memory freed after deregistration", func() bool {
		select {
		case <-freed:
			return true
		default:
			return false
		}
	})
}

// The memory of a dropped MR is not freed while the MR is registered: the
// deregistration comes first, whatever the collector does.
func TestRegisteredMemoryOutlivesDroppedMR(t *testing.T) {
	k := objectKernel(t)
	freed := make(chan struct{})
	isFreed := func() bool {
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}
	deregs, early := 0, false
	k.handle(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_MR_DESTROY, func(*fakeCall) error {
		deregs++
		early = early || isFreed()
		return nil
	})
	c := fakeContext(t, k)
	pd := allocPD(t, c)
	func() {
		buf := make([]byte, 1<<16)
		runtime.AddCleanup(unsafe.SliceData(buf), func(ch chan struct{}) { close(ch) }, freed)
		if _, err := pd.RegMR(buf, wr.LocalWrite); err != nil {
			t.Fatal(err)
		}
	}()
	waitFor(t, "the dropped MR's memory freed", isFreed)
	k.mu.Lock()
	defer k.mu.Unlock()
	if deregs != 1 || early {
		t.Fatalf("%d deregistrations, memory freed before: %v; want one, before the memory went", deregs, early)
	}
}

// Counts out of range are refused with a clear error, not truncated into
// the 32 bits the kernel takes.
func TestCreateCQOutOfRange(t *testing.T) {
	_, c := objectContext(t)
	for _, a := range []CQAttr{{CQE: 0}, {CQE: -1}, {CQE: 1<<32 + 1}, {CQE: 1, CompVector: -1}, {CQE: 1, CompVector: 1}} {
		if _, err := c.CreateCQ(a); !errors.Is(err, unix.EINVAL) {
			t.Errorf("CreateCQ(%+v): %v, want EINVAL", a, err)
		}
	}
}

// BenchmarkPostSendLayer is uverbs' own part of a post: the close-safety
// lock, the state check and the call into a provider that does nothing
// (docs/performance.md adds the layers up under the instruction-counting
// clock).
func BenchmarkPostSendLayer(b *testing.B) {
	_, c := objectContext(b)
	pd := allocPD(b, c)
	q := &QP{object: newObject(c, kindQP, 3), pd: pd, typ: qp.RC, prov: &postRecorder{}}
	q.state.Store(uint32(qp.StateRTS))
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.PostSend(send); err != nil {
			b.Fatal(err)
		}
	}
}

// Once a context's Close has begun, it registers no new object: Close
// releases every registered object before it closes the command file,
// which QPs' unguarded doorbells rely on (devFile.doorbell).
func TestNoRegistrationAfterClose(t *testing.T) {
	_, c := objectContext(t)
	c.reg.close()
	cq := &CQ{object: newObject(c, kindCQ, 9)}
	if registerCQ(c, cq) {
		t.Fatal("a CQ was registered after the context's Close began")
	}
	if err := registered(false, cq.object, "create CQ"); !errors.Is(err, ErrClosed) || !cq.dead.Load() {
		t.Errorf("refused registration: %v, dead %v; want ErrClosed and a released object", err, cq.dead.Load())
	}
}

// BenchmarkDoorbell rings a doorbell the way a provider does, through
// provider.Kernel, down to the write(2) on a real descriptor: /dev/null,
// whose write costs the kernel next to nothing, so under the
// instruction-counting clock the figure is the path's own instructions
// plus the system call's entry and exit.
func BenchmarkDoorbell(b *testing.B) {
	f, err := openDevFile("/dev/null")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	var k provider.Kernel = newKernelPort(f, 0)
	cmd := make([]byte, 24)
	b.ReportAllocs()
	for b.Loop() {
		if err := k.Doorbell(cmd); err != nil {
			b.Fatal(err)
		}
	}
}
