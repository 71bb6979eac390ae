package uverbs

import (
	"errors"
	"net"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// batchRecorder is a provider QP that batches: it records the requests a
// batch adds (copies, as a provider copies them into its queue), refuses
// the opcodes in refuse, and counts how batches end.
type batchRecorder struct {
	postRecorder
	open            bool
	added, posted   []wr.SendWR
	ended, aborted  int
	refuse          map[wr.Opcode]error
	beginErr, dbErr error
}

func (p *batchRecorder) BeginBatch() error {
	if p.beginErr != nil {
		return p.beginErr
	}
	if p.open {
		panic("batch begun twice")
	}
	p.open, p.added = true, nil
	return nil
}

func (p *batchRecorder) AddToBatch(w *wr.SendWR) error {
	if !p.open {
		panic("AddToBatch outside a batch")
	}
	if err := p.refuse[w.Opcode]; err != nil {
		return err
	}
	c := *w
	c.SGList = append([]wr.SGE(nil), w.SGList...)
	if w.Flags&wr.Inline != 0 {
		// Keep the bytes, as the provider does, not the address.
		for i, s := range c.SGList {
			b := unsafe.Slice(*(**byte)(unsafe.Pointer(&s.Addr)), s.Length)
			c.SGList[i].Addr = uint64(len(b)) // its length, for cmp
			c.SGList[i].LKey = uint32(b[0])
		}
	}
	if w.Bind != nil {
		bind := *w.Bind
		c.Bind = &bind
	}
	p.added = append(p.added, c)
	return nil
}

func (p *batchRecorder) EndBatch() (int, error) {
	p.open = false
	p.ended++
	p.posted = append(p.posted, p.added...)
	return len(p.added), p.dbErr
}

func (p *batchRecorder) AbortBatch() {
	p.open = false
	p.aborted++
}

func batchQP(t *testing.T, typ qp.Type) (*QP, *batchRecorder, *PD) {
	t.Helper()
	_, c := objectContext(t)
	pd := allocPD(t, c)
	rec := &batchRecorder{}
	q := &QP{object: newObject(c, kindQP, 3), pd: pd, typ: typ, prov: rec, caps: qp.Caps{MaxSendSGE: 2}}
	q.state.Store(uint32(qp.StateRTS))
	return q, rec, pd
}

// A batch's requests reach the provider whole, one call each, in order,
// and are posted by one EndBatch.
func TestSendBatch(t *testing.T) {
	q, rec, _ := batchQP(t, qp.RC)
	b, err := q.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.RDMAWrite(1, wr.Signaled, 0x42, 0x9000)
	b.SetSGE(5, 0x1000, 100)
	b.RDMAWriteWithImm(2, 0, 0x43, 0x9100, 0xabcd)
	sgl := []wr.SGE{{Addr: 0x2000, Length: 8, LKey: 6}, {Addr: 0x3000, Length: 16, LKey: 7}}
	b.SetSGEList(sgl)
	sgl[0].Addr = 0xdead // the batch copied the list
	b.SendWithImm(3, wr.Solicited, 7)
	b.SetInlineData([]byte("hi there"))
	b.RDMARead(4, 0, 0x44, 0x9200)
	b.SetSGE(5, 0x4000, 64)
	b.AtomicCmpSwp(5, 0, 0x45, 0x9300, 10, 20)
	b.SetSGE(5, 0x5000, 8)
	b.AtomicFetchAdd(6, 0, 0x46, 0x9308, 3)
	b.SetSGE(5, 0x5008, 8)
	b.SendWithInv(7, 0, 0x47)
	b.SetSGE(5, 0x6000, 1)
	b.LocalInv(8, wr.Fence, 0x48)
	b.BindMW(9, 0, wr.BindInfo{MWRKey: 0x100, NewRKey: 0x101, LKey: 5, Addr: 0x1000, Length: 64, Access: wr.RemoteWrite})
	b.Send(10, 0)
	b.SetSGEList(nil)
	if len(rec.added) != 10 || rec.ended != 0 {
		t.Fatalf("%d requests reached the provider before Complete (%d ended), want 10 and 0", len(rec.added), rec.ended)
	}
	n, err := b.Complete()
	if n != 10 || err != nil || rec.ended != 1 || rec.aborted != 0 {
		t.Fatalf("Complete = %d, %v (ended %d, aborted %d)", n, err, rec.ended, rec.aborted)
	}
	want := []wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, Remote: wr.Remote{Addr: 0x9000, RKey: 0x42}, SGList: []wr.SGE{{Addr: 0x1000, Length: 100, LKey: 5}}},
		{ID: 2, Opcode: wr.OpRDMAWriteWithImm, Remote: wr.Remote{Addr: 0x9100, RKey: 0x43}, Imm: 0xabcd,
			SGList: []wr.SGE{{Addr: 0x2000, Length: 8, LKey: 6}, {Addr: 0x3000, Length: 16, LKey: 7}}},
		{ID: 3, Opcode: wr.OpSendWithImm, Flags: wr.Solicited | wr.Inline, Imm: 7, SGList: []wr.SGE{{Addr: 8, Length: 8, LKey: 'h'}}},
		{ID: 4, Opcode: wr.OpRDMARead, Remote: wr.Remote{Addr: 0x9200, RKey: 0x44}, SGList: []wr.SGE{{Addr: 0x4000, Length: 64, LKey: 5}}},
		{ID: 5, Opcode: wr.OpAtomicCmpAndSwp, Remote: wr.Remote{Addr: 0x9300, RKey: 0x45}, CompareAdd: 10, Swap: 20, SGList: []wr.SGE{{Addr: 0x5000, Length: 8, LKey: 5}}},
		{ID: 6, Opcode: wr.OpAtomicFetchAdd, Remote: wr.Remote{Addr: 0x9308, RKey: 0x46}, CompareAdd: 3, SGList: []wr.SGE{{Addr: 0x5008, Length: 8, LKey: 5}}},
		{ID: 7, Opcode: wr.OpSendWithInv, Imm: 0x47, SGList: []wr.SGE{{Addr: 0x6000, Length: 1, LKey: 5}}},
		{ID: 8, Opcode: wr.OpLocalInv, Flags: wr.Fence, Imm: 0x48, SGList: []wr.SGE{}},
		{ID: 9, Opcode: wr.OpBindMW, Bind: &wr.BindInfo{MWRKey: 0x100, NewRKey: 0x101, LKey: 5, Addr: 0x1000, Length: 64, Access: wr.RemoteWrite}, SGList: []wr.SGE{}},
		{ID: 10, Opcode: wr.OpSend, SGList: []wr.SGE{}},
	}
	if d := cmp.Diff(want, rec.posted, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("posted requests (-want +got):\n%s", d)
	}
	// Ended: its methods do nothing, and a new batch can begin.
	b.Send(11, 0)
	b.SetSGE(1, 2, 3)
	if _, err := b.Complete(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Complete of an ended batch: %v, want EINVAL", err)
	}
	b.Abort()
	if len(rec.posted) != 10 || rec.ended != 1 || rec.aborted != 0 {
		t.Errorf("an ended batch reached the provider: %d posted, %d ended, %d aborted", len(rec.posted), rec.ended, rec.aborted)
	}
	if _, err := q.BeginSend(); err != nil {
		t.Fatalf("BeginSend after Complete: %v", err)
	}
	if _, err := q.BeginSend(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("BeginSend with a batch open: %v, want EBUSY", err)
	}
}

// The first refused call fails the whole batch: nothing of it is posted,
// later calls do nothing, and Complete says which request and why.
func TestSendBatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   qp.Type
		build func(b *SendBatch)
		index int
		want  error
	}{
		{"refused by the provider", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetSGE(1, 0x1000, 8)
			b.RDMARead(2, 0, 1, 0x2000) // refused below
			b.SetSGE(1, 0x1000, 8)
			b.Send(3, 0)
			b.SetSGE(1, 0x1000, 8)
		}, 1, unix.EOPNOTSUPP},
		{"no data", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.Send(2, 0)
		}, 0, unix.EINVAL},
		{"no data at the end", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetSGE(1, 0x1000, 8)
			b.RDMAWrite(2, 0, 1, 0x2000)
		}, 1, unix.EINVAL},
		{"data twice", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetSGE(1, 0x1000, 8)
			b.SetSGE(1, 0x1000, 8)
		}, 1, unix.EINVAL},
		{"data without a request", qp.RC, func(b *SendBatch) {
			b.SetInlineData([]byte("x"))
		}, 0, unix.EINVAL},
		{"data for a local invalidate", qp.RC, func(b *SendBatch) {
			b.LocalInv(1, 0, 5)
			b.SetSGE(1, 0x1000, 8)
		}, 1, unix.EINVAL},
		{"too many SGEs", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetSGEList(make([]wr.SGE, 3))
		}, 0, unix.EINVAL},
		{"UD address on RC", qp.RC, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetUDAddr(nil, 1, 2)
		}, 0, unix.EINVAL},
		{"UD without an address", qp.UD, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetSGE(1, 0x1000, 8)
		}, 0, unix.EINVAL},
		{"UD with a nil address handle", qp.UD, func(b *SendBatch) {
			b.Send(1, 0)
			b.SetUDAddr(nil, 1, 2)
		}, 0, unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, rec, _ := batchQP(t, tc.typ)
			rec.refuse = map[wr.Opcode]error{wr.OpRDMARead: unix.EOPNOTSUPP}
			b, err := q.BeginSend()
			if err != nil {
				t.Fatal(err)
			}
			tc.build(b)
			n, err := b.Complete()
			var pe *PostError
			if n != 0 || !errors.Is(err, tc.want) || !errors.As(err, &pe) || pe.Index != tc.index {
				t.Errorf("Complete = %d, %v; want 0 and %v at request %d", n, err, tc.want, tc.index)
			}
			if rec.ended != 0 || rec.aborted != 1 || len(rec.posted) != 0 {
				t.Errorf("provider: %d ended, %d aborted, %d posted; want 0, 1, 0", rec.ended, rec.aborted, len(rec.posted))
			}
			if tc.typ == qp.UD && !q.pd.ahMu.TryLock() {
				t.Error("the PD's AH lock is still held after the batch")
			}
		})
	}
}

// UD requests need a live AH of the QP's PD; the batch holds off AH
// destruction while it is open.
func TestSendBatchUD(t *testing.T) {
	q, rec, pd := batchQP(t, qp.UD)
	good := &AH{object: newObject(pd.ctx, kindAH, 4), pd: pd, prov: fakeProvAH{}}
	closed := &AH{object: newObject(pd.ctx, kindAH, 5), pd: pd, prov: fakeProvAH{}}
	closed.dead.Store(true)
	b, err := q.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	if q.pd.ahMu.TryLock() {
		t.Fatal("AHs can be destroyed while a UD batch is open")
	}
	b.Send(1, 0)
	b.SetUDAddr(good, 0x11, 0x22)
	b.SetSGE(1, 0x1000, 8)
	b.SendWithImm(2, 0, 9)
	b.SetSGE(1, 0x1000, 8) // data first, then the address
	b.SetUDAddr(good, 0x12, 0x23)
	if n, err := b.Complete(); n != 2 || err != nil {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	if rec.posted[0].RemoteQPN != 0x11 || rec.posted[1].RemoteQKey != 0x23 || rec.posted[1].AH != good {
		t.Errorf("UD requests %+v", rec.posted)
	}
	b, _ = q.BeginSend()
	b.Send(3, 0)
	b.SetUDAddr(closed, 1, 2)
	if _, err := b.Complete(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a closed AH: %v, want ErrClosed", err)
	}
}

// BeginSend refuses a QP that cannot send, a closed one, and a provider
// that cannot batch; a stopped provider is a closed QP.
func TestBeginSendRefused(t *testing.T) {
	q, rec, _ := batchQP(t, qp.RC)
	q.state.Store(uint32(qp.StateRTR))
	if _, err := q.BeginSend(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RTR: %v, want EINVAL", err)
	}
	q.state.Store(uint32(qp.StateRTS))
	rec.beginErr = provider.ErrStopped
	if _, err := q.BeginSend(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("stopped provider: %v, want ErrClosed", err)
	}
	q.prov = &postRecorder{}
	if _, err := q.BeginSend(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a provider without batches: %v, want EOPNOTSUPP", err)
	}
	q.dead.Store(true)
	if _, err := q.BeginSend(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("closed QP: %v, want ErrClosed", err)
	}
	var nilQP *QP
	if _, err := nilQP.BeginSend(); err == nil {
		t.Error("BeginSend on a nil QP succeeded")
	}
	var nilBatch *SendBatch
	nilBatch.Abort()
	if _, err := nilBatch.Complete(); err == nil {
		t.Error("Complete of a nil batch succeeded")
	}
}

// The creation flags have the kernel's values, reach the command with
// sq_sig_all, and unknown ones are refused before anything else.
func TestQPCreateFlags(t *testing.T) {
	for _, tc := range []struct {
		f    QPCreateFlags
		want uint64
	}{
		{QPCreateBlockSelfMcastLB, abi.IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK},
		{QPCreateScatterFCS, abi.IB_UVERBS_QP_CREATE_SCATTER_FCS},
		{QPCreateCVLANStripping, abi.IB_UVERBS_QP_CREATE_CVLAN_STRIPPING},
		{QPCreatePCIWriteEndPadding, abi.IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING},
	} {
		if got := kernelQPCreateFlags(&QPInitAttr{CreateFlags: tc.f}); got != tc.want {
			t.Errorf("flag %#x reaches the kernel as %#x, want %#x", tc.f, got, tc.want)
		}
	}
	if got := kernelQPCreateFlags(&QPInitAttr{CreateFlags: QPCreateBlockSelfMcastLB, SignalAll: true}); got != abi.IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK|abi.IB_UVERBS_QP_CREATE_SQ_SIG_ALL {
		t.Errorf("with SignalAll: %#x", got)
	}
	_, c := objectContext(t)
	pd := allocPD(t, c)
	cq := &CQ{object: newObject(c, kindCQ, 9)}
	_, err := pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, CreateFlags: 1 << 12})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("an unknown flag: %v, want EINVAL", err)
	}
}

// An XRC send QP's requests name their target SRQ (SetXRCSRQN), which
// they need as UD requests need SetUDAddr; an XRC receive QP has no send
// queue to batch on.
func TestSendBatchXRC(t *testing.T) {
	q, rec, pd := batchQP(t, qp.XRCSend)
	b, err := q.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.Send(1, 0)
	b.SetXRCSRQN(0x77)
	b.SetSGE(1, 0x1000, 8)
	b.RDMAWrite(2, 0, 5, 0x2000)
	b.SetSGE(1, 0x1000, 8) // data first, then the SRQ
	b.SetXRCSRQN(0x78)
	if n, err := b.Complete(); n != 2 || err != nil {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	if rec.posted[0].RemoteSRQN != 0x77 || rec.posted[1].RemoteSRQN != 0x78 {
		t.Errorf("XRC requests %+v", rec.posted)
	}
	good := &AH{object: newObject(pd.ctx, kindAH, 4), pd: pd, prov: fakeProvAH{}}
	for _, tc := range []struct {
		name  string
		build func(b *SendBatch)
	}{
		{"no SRQ", func(b *SendBatch) { b.Send(3, 0); b.SetSGE(1, 0x1000, 8) }},
		{"two SRQs", func(b *SendBatch) { b.Send(3, 0); b.SetXRCSRQN(1); b.SetXRCSRQN(2) }},
		{"a UD address", func(b *SendBatch) { b.Send(3, 0); b.SetUDAddr(good, 1, 2) }},
	} {
		b, err := q.BeginSend()
		if err != nil {
			t.Fatal(err)
		}
		tc.build(b)
		if n, err := b.Complete(); n != 0 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: Complete = %d, %v; want EINVAL", tc.name, n, err)
		}
	}
	u, _, _ := batchQP(t, qp.UD)
	b, err = u.BeginSend()
	if err != nil {
		t.Fatal(err)
	}
	b.Send(1, 0)
	b.SetXRCSRQN(1)
	if _, err := b.Complete(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("SetXRCSRQN on UD: %v, want EINVAL", err)
	}
	r, _, _ := batchQP(t, qp.XRCRecv)
	if _, err := r.BeginSend(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("BeginSend on an XRC receive QP: %v, want EINVAL", err)
	}
}
