package rxe

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/failnote"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// fakeKernel stands in for the rxe driver: it hands out ring memory laid
// out as the kernel lays it out, and counts doorbells.
type fakeKernel struct {
	rings     map[int64][]byte
	doorbells int // Doorbell calls (post send)
	writes    int // other commands (CQ arming)
	lastWrite []byte
}

func (k *fakeKernel) Mmap(offset int64, length int, prot int) ([]byte, error) {
	r, ok := k.rings[offset]
	if !ok || len(r) != length {
		return nil, unix.EINVAL
	}
	return r, nil
}
func (k *fakeKernel) Munmap([]byte) error { return nil }

// Invoke: rxe has no driver methods.
func (k *fakeKernel) Invoke(uint16, uint16, []provider.Attr) error { return unix.EPROTONOSUPPORT }

func (k *fakeKernel) Write(b []byte) error {
	k.writes++
	k.lastWrite = append(k.lastWrite[:0], b...)
	return nil
}

func (k *fakeKernel) Doorbell(b []byte) error {
	k.doorbells++
	k.lastWrite = append(k.lastWrite[:0], b...)
	return nil
}

// ring makes ring memory with slots elements of 1<<log2 bytes and returns
// its mminfo.
func (k *fakeKernel) ring(slots, log2 uint32) abi.Mminfo {
	if k.rings == nil {
		k.rings = map[int64][]byte{}
	}
	size := abi.SizeofRxeQueueBuf + int(slots)<<log2
	mem := make([]byte, size)
	hdr := (*abi.RxeQueueBuf)(unsafe.Pointer(&mem[0]))
	hdr.Log2_elem_size = log2
	hdr.Index_mask = slots - 1
	off := int64(len(k.rings)+1) << 12
	k.rings[off] = mem
	return abi.Mminfo{Offset: uint64(off), Size: uint32(size)}
}

func hdrOf(mem []byte) *abi.RxeQueueBuf { return (*abi.RxeQueueBuf)(unsafe.Pointer(&mem[0])) }

var testCaps = qp.Caps{MaxSendWR: 7, MaxRecvWR: 7, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}

// newTestQP makes an RC (or other) QP on fake rings of 8 slots.
func newTestQP(t testing.TB, typ qp.Type) (*QP, *fakeKernel) {
	t.Helper()
	k := &fakeKernel{}
	b, err := (&Context{k: k}).NewQP(provider.QPInitAttr{Type: typ, Caps: testCaps})
	if err != nil {
		t.Fatal(err)
	}
	qb := b.(*qpBuilder)
	qb.resp.Rq_mi = k.ring(8, 8) // 256-byte receive WQEs
	qb.resp.Sq_mi = k.ring(8, 9) // 512-byte send WQEs
	p, err := b.Finish(provider.Created{Handle: 77, QPNum: 17, Caps: testCaps})
	if err != nil {
		t.Fatal(err)
	}
	return p.(*QP), k
}

func TestPostSendWQE(t *testing.T) {
	q, k := newTestQP(t, qp.RC)
	src := []byte("inline payload!!")
	wrs := []wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWriteWithImm, Flags: wr.Signaled, Imm: 0x01020304,
			SGList: []wr.SGE{{Addr: 0x1000, Length: 100, LKey: 5}, {Addr: 0x2000, Length: 28, LKey: 6}}, Remote: wr.Remote{Addr: 0x9000, RKey: 0x42}},
		{ID: 2, Opcode: wr.OpAtomicCmpAndSwp, SGList: []wr.SGE{{Addr: 0x3000, Length: 8, LKey: 5}}, Remote: wr.Remote{Addr: 0xa000, RKey: 0x43}, CompareAdd: 10, Swap: 20},
		{ID: 3, Opcode: wr.OpSend, Flags: wr.Inline, SGList: []wr.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&src[0]))), Length: uint32(len(src))}}},
	}
	n, err := q.PostSend(wrs)
	if n != 3 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	if k.doorbells != 1 {
		t.Fatalf("%d doorbells for one list, want 1", k.doorbells)
	}
	// The doorbell: a zero-request POST_SEND naming the QP.
	ne := binary.NativeEndian
	db := k.lastWrite
	if cmd := ne.Uint32(db[0:]); cmd != abi.IB_USER_VERBS_CMD_POST_SEND || int(ne.Uint16(db[4:]))*4 != len(db) {
		t.Errorf("doorbell command %d in_words %d for %d bytes", cmd, ne.Uint16(db[4:]), len(db))
	}
	post := (*abi.IbUverbsPostSend)(unsafe.Pointer(&db[8]))
	if post.Qp_handle != 77 || post.Wr_count != 0 || post.Response == 0 || post.Wqe_size < abi.SizeofIbUverbsSendWr {
		t.Errorf("doorbell body %+v", *post)
	}
	if p := hdrOf(q.sq.mem).Producer_index; p != 3 {
		t.Fatalf("producer index %d, want 3", p)
	}

	w0 := (*abi.RxeSendWqe)(q.sq.elem(0))
	if w0.Wr.Wr_id != 1 || w0.Wr.Opcode != uint32(wr.OpRDMAWriteWithImm) || w0.Wr.Send_flags != uint32(wr.Signaled) {
		t.Errorf("WQE 0 header %+v", w0.Wr)
	}
	if binary.BigEndian.Uint32(w0.Wr.Ex[:]) != 0x01020304 {
		t.Errorf("immediate bytes %x, want big-endian 01020304", w0.Wr.Ex)
	}
	if r := w0.Wr.Rdma(); r.Remote_addr != 0x9000 || r.Rkey != 0x42 || w0.Iova != 0x9000 {
		t.Errorf("WQE 0 rdma %+v iova %x", *r, w0.Iova)
	}
	if w0.Dma.Length != 128 || w0.Dma.Resid != 128 || w0.Dma.Num_sge != 2 || w0.Ssn != 0 {
		t.Errorf("WQE 0 dma %+v ssn %d", w0.Dma, w0.Ssn)
	}
	sge1 := (*abi.RxeSge)(unsafe.Add(unsafe.Pointer(w0), sendSGEOffset+abi.SizeofRxeSge))
	if sge1.Addr != 0x2000 || sge1.Length != 28 || sge1.Lkey != 6 {
		t.Errorf("WQE 0 second SGE %+v", *sge1)
	}
	w1 := (*abi.RxeSendWqe)(q.sq.elem(1))
	if a := w1.Wr.Atomic(); a.Remote_addr != 0xa000 || a.Compare_add != 10 || a.Swap != 20 || a.Rkey != 0x43 || w1.Ssn != 1 {
		t.Errorf("WQE 1 atomic %+v ssn %d", *a, w1.Ssn)
	}
	w2 := (*abi.RxeSendWqe)(q.sq.elem(2))
	inline := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(w2), sendSGEOffset)), len(src))
	if string(inline) != string(src) || w2.Dma.Length != uint32(len(src)) {
		t.Errorf("inline data %q length %d", inline, w2.Dma.Length)
	}
}

func TestPostSendFullAndInvalid(t *testing.T) {
	q, k := newTestQP(t, qp.RC)
	sge := []wr.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}
	wrs := make([]wr.SendWR, 9)
	for i := range wrs {
		wrs[i] = wr.SendWR{ID: uint64(i), Opcode: wr.OpSend, SGList: sge}
	}
	n, err := q.PostSend(wrs)
	if n != 7 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("posting 9 on a depth of 7: %d, %v; want 7, ENOMEM", n, err)
	}
	if k.doorbells != 1 {
		t.Errorf("%d doorbells, want 1 for the 7 posted", k.doorbells)
	}
	// Nothing was written past the last accepted slot.
	if w := (*abi.RxeSendWqe)(q.sq.elem(7)); w.Wr.Wr_id != 0 {
		t.Errorf("slot 7 was written: %+v", w.Wr)
	}
	// The kernel consumes everything; now each invalid request is refused
	// at its own index with nothing written.
	hdrOf(q.sq.mem).Consumer_index = hdrOf(q.sq.mem).Producer_index
	for _, bad := range []wr.SendWR{
		{Opcode: wr.OpSend, SGList: make([]wr.SGE, 5)},                                      // too many SGEs
		{Opcode: wr.OpAtomicFetchAdd, SGList: sge, Remote: wr.Remote{Addr: 0x1004}},         // misaligned atomic
		{Opcode: wr.OpAtomicFetchAdd, SGList: []wr.SGE{{Length: 4}}},                        // short atomic
		{Opcode: wr.OpSend, Flags: wr.Inline, SGList: []wr.SGE{{Addr: 0x1000, Length: 65}}}, // inline too long
		{Opcode: wr.OpBindMW}, // nothing to bind
	} {
		prod := hdrOf(q.sq.mem).Producer_index
		n, err := q.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: sge}, bad})
		if n != 1 || err == nil || hdrOf(q.sq.mem).Producer_index != (prod+1)&7 {
			t.Errorf("%+v: posted %d, %v, producer %d→%d", bad, n, err, prod, hdrOf(q.sq.mem).Producer_index)
		}
		hdrOf(q.sq.mem).Consumer_index = hdrOf(q.sq.mem).Producer_index
	}
	// UD needs an address handle, RC cannot have one checked.
	ud, _ := newTestQP(t, qp.UD)
	if n, err := ud.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: sge}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("UD send without AH: %d, %v", n, err)
	}
	if n, err := ud.PostSend([]wr.SendWR{{Opcode: wr.OpSend, SGList: sge, AH: dest{&AH{num: 3}}, RemoteQPN: 9, RemoteQKey: 0x11}}); n != 1 || err != nil {
		t.Errorf("UD send: %d, %v", n, err)
	}
	if u := (*abi.RxeSendWqe)(ud.sq.elem(0)).Wr.Ud(); u.Ah_num != 3 || u.Remote_qpn != 9 || u.Remote_qkey != 0x11 {
		t.Errorf("UD WQE %+v", *u)
	}
}

func TestPostRecvWQE(t *testing.T) {
	q, k := newTestQP(t, qp.RC)
	n, err := q.PostRecv([]wr.RecvWR{{ID: 5, SGList: []wr.SGE{{Addr: 0x10, Length: 4, LKey: 1}, {Addr: 0x20, Length: 6, LKey: 2}}}})
	if n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if k.doorbells != 0 {
		t.Errorf("receives rang %d doorbells; rxe needs none", k.doorbells)
	}
	w := (*abi.RxeRecvWqe)(q.rq.elem(0))
	s := (*abi.RxeSge)(unsafe.Add(unsafe.Pointer(w), recvSGEOffset+abi.SizeofRxeSge))
	if w.Wr_id != 5 || w.Dma.Length != 10 || w.Dma.Num_sge != 2 || s.Addr != 0x20 || s.Lkey != 2 {
		t.Errorf("receive WQE %+v, second SGE %+v", *w, *s)
	}
	if hdrOf(q.rq.mem).Producer_index != 1 {
		t.Errorf("receive producer index %d", hdrOf(q.rq.mem).Producer_index)
	}
}

// newTestCQ makes a CQ on a fake ring of 8 slots of 64-byte entries.
func newTestCQ(t testing.TB) (*CQ, *fakeKernel) {
	t.Helper()
	k := &fakeKernel{}
	b, _ := (&Context{k: k}).NewCQ(7)
	cb := b.(*cqBuilder)
	cb.resp.Mi = k.ring(8, 6)
	p, err := b.Finish(provider.Created{Handle: 3, CQE: 7})
	if err != nil {
		t.Fatal(err)
	}
	return p.(*CQ), k
}

// produce writes completions into the CQ ring as the kernel does.
func produce(cq *CQ, wcs ...abi.IbUverbsWc) {
	h := hdrOf(cq.q.mem)
	for _, w := range wcs {
		*(*abi.IbUverbsWc)(cq.q.elem(h.Producer_index)) = w
		h.Producer_index = (h.Producer_index + 1) & h.Index_mask
	}
}

func TestPollCQ(t *testing.T) {
	cq, _ := newTestCQ(t)
	if cq.Pending() {
		t.Error("a new CQ is Pending")
	}
	var withImm abi.IbUverbsWc
	withImm.Wr_id, withImm.Opcode, withImm.Byte_len, withImm.Qp_num, withImm.Src_qp = 9, uint32(wr.WCRecv), 100, 17, 18
	withImm.Wc_flags = uint32(wr.WCWithImm | wr.WCGRH)
	binary.BigEndian.PutUint32(withImm.Ex[:], 0xcafe0001)
	produce(cq, abi.IbUverbsWc{Wr_id: 1, Status: uint32(wr.RemAccessErr), Vendor_err: 0x77, Qp_num: 21}, withImm)
	if !cq.Pending() {
		t.Error("a CQ with two completions is not Pending")
	}
	// uverbs' note of failed QPs (internal/failnote): the error's QP only.
	var noted []uint32
	if !failnote.Install(cq, func(qpn uint32) { noted = append(noted, qpn) }) {
		t.Fatal("failnote.Install does not take an rxe CQ")
	}
	out := make([]wr.Completion, 4)
	if n := cq.Poll(out); n != 2 {
		t.Fatalf("polled %d, want 2", n)
	}
	if !slices.Equal(noted, []uint32{21}) {
		t.Errorf("failed completions noted for QPs %v, want [21]", noted)
	}
	if out[0].ID != 1 || out[0].Status != wr.RemAccessErr || out[0].VendorErr != 0x77 || out[0].Err() == nil {
		t.Errorf("error completion %+v", out[0])
	}
	if c := out[1]; c.ID != 9 || c.Imm != 0xcafe0001 || c.ByteLen != 100 || c.QPNum != 17 || c.SrcQP != 18 || c.Flags != wr.WCWithImm|wr.WCGRH {
		t.Errorf("receive completion %+v", c)
	}
	if h := hdrOf(cq.q.mem); h.Consumer_index != 2 {
		t.Errorf("consumer index %d, want 2", h.Consumer_index)
	}
	if n := cq.Poll(out); n != 0 {
		t.Errorf("empty CQ polled %d", n)
	}
	if cq.Pending() {
		t.Error("a CQ polled empty is Pending")
	}
	// A batch smaller than what is ready takes only what fits.
	produce(cq, abi.IbUverbsWc{Wr_id: 3}, abi.IbUverbsWc{Wr_id: 4}, abi.IbUverbsWc{Wr_id: 5})
	if n := cq.Poll(out[:2]); n != 2 || out[1].ID != 4 {
		t.Errorf("partial poll: %d, %+v", n, out[:2])
	}
	if n := cq.Poll(out); n != 1 || out[0].ID != 5 {
		t.Errorf("rest: %d, %+v", n, out[0])
	}
}

func TestReqNotify(t *testing.T) {
	cq, k := newTestCQ(t)
	ne := binary.NativeEndian
	for _, solicited := range []bool{true, false, true} {
		if err := cq.ReqNotify(solicited); err != nil {
			t.Fatal(err)
		}
		want := uint32(0)
		if solicited {
			want = 1
		}
		if len(k.lastWrite) != 16 || ne.Uint32(k.lastWrite) != abi.IB_USER_VERBS_CMD_REQ_NOTIFY_CQ || ne.Uint32(k.lastWrite[8:]) != 3 || ne.Uint32(k.lastWrite[12:]) != want {
			t.Errorf("req notify command, solicited %v: % x", solicited, k.lastWrite)
		}
	}
}

// TestStop checks the close protocol posts rely on instead of a lock of
// the core's: a stopped QP refuses posts without touching its rings or
// ringing the doorbell, Resume undoes it, and Close stops for good.
func TestStop(t *testing.T) {
	q, k := newTestQP(t, qp.RC)
	send := []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}}
	recv := []wr.RecvWR{{ID: 2}}
	q.Stop()
	if n, err := q.PostSend(send); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostSend on a stopped QP: %d, %v", n, err)
	}
	if n, err := q.PostRecv(recv); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostRecv on a stopped QP: %d, %v", n, err)
	}
	if k.doorbells != 0 || q.sq.producer() != 0 || q.rq.producer() != 0 {
		t.Errorf("a stopped QP rang %d doorbells, send producer %d, receive producer %d", k.doorbells, q.sq.producer(), q.rq.producer())
	}
	q.Resume()
	if n, err := q.PostSend(send); n != 1 || err != nil || k.doorbells != 1 {
		t.Errorf("PostSend after Resume: %d, %v, %d doorbells", n, err, k.doorbells)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q.Resume() // too late: the rings are gone
	if n, err := q.PostSend(send); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostSend after Close: %d, %v", n, err)
	}
	if n, err := q.PostRecv(recv); n != 0 || err != provider.ErrStopped {
		t.Errorf("PostRecv after Close: %d, %v", n, err)
	}
}

// The data path must not allocate: make test enforces it here, where no
// device is needed; the benchmarks below report the cost.
func TestHotPathAllocs(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(map[bool]string{false: "locked", true: "single-threaded"}[single], func(t *testing.T) {
			testHotPathAllocs(t, single)
		})
	}
}

func testHotPathAllocs(t *testing.T, single bool) {
	q, _ := newTestQP(t, qp.RC)
	cq, _ := newTestCQ(t)
	if single {
		q.SetSingleThreaded()
		cq.SetSingleThreaded()
	}
	send := signaledWrite()
	recv := []wr.RecvWR{{ID: 1, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}}}
	out := make([]wr.Completion, 8)
	for name, f := range map[string]func(){
		"post send": func() { q.PostSend(send); consumeAll(q.sq) },
		"post recv": func() { q.PostRecv(recv); consumeAll(q.rq) },
		"poll":      func() { produce(cq, abi.IbUverbsWc{Wr_id: 1}); cq.Poll(out) },
	} {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
}

func consumeAll(q *queue) { hdrOf(q.mem).Consumer_index = hdrOf(q.mem).Producer_index }

// The benchmarks measure the library's own work per request: the kernel's
// part (the doorbell write) is a no-op in the fake.

// signaledWrite is the request the allocation test and the benchmarks
// post: one signaled RDMA write of one SGE.
func signaledWrite() []wr.SendWR {
	return []wr.SendWR{{ID: 1, Opcode: wr.OpRDMAWrite, Flags: wr.Signaled, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}}
}

// benchPostSend posts send over and over on an RC QP, single-threaded or
// not, and empties the send queue after each post as the device would.
func benchPostSend(b *testing.B, single bool, send []wr.SendWR) {
	q, _ := newTestQP(b, qp.RC)
	if single {
		q.SetSingleThreaded()
	}
	b.ReportAllocs()
	for b.Loop() {
		q.PostSend(send)
		consumeAll(q.sq)
	}
}

// benchPoll polls one completion per call from a CQ it refills first.
func benchPoll(b *testing.B, single bool) {
	cq, _ := newTestCQ(b)
	if single {
		cq.SetSingleThreaded()
	}
	out := make([]wr.Completion, 1)
	b.ReportAllocs()
	for b.Loop() {
		produce(cq, abi.IbUverbsWc{Wr_id: 1})
		cq.Poll(out)
	}
}

func BenchmarkPostSend(b *testing.B) { benchPostSend(b, false, signaledWrite()) }

func BenchmarkPostSendList4(b *testing.B) {
	send := make([]wr.SendWR, 4)
	for i := range send {
		send[i] = wr.SendWR{ID: uint64(i), Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}
	}
	benchPostSend(b, false, send)
}

func BenchmarkPostRecv(b *testing.B) {
	q, _ := newTestQP(b, qp.RC)
	recv := []wr.RecvWR{{ID: 1, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}}}
	b.ReportAllocs()
	for b.Loop() {
		q.PostRecv(recv)
		consumeAll(q.rq)
	}
}

func BenchmarkPoll(b *testing.B) { benchPoll(b, false) }

// TestSingleThreaded checks that a single-threaded QP and CQ take no lock
// (a held lock would deadlock them) and still post and poll.
func TestSingleThreaded(t *testing.T) {
	q, k := newTestQP(t, qp.RC)
	cq, _ := newTestCQ(t)
	var _ provider.SingleThreader = q
	var _ provider.SingleThreader = cq
	q.SetSingleThreaded()
	cq.SetSingleThreaded()
	q.sqMu.mu.Lock()
	q.rqMu.mu.Lock()
	cq.mu.mu.Lock()
	send := []wr.SendWR{{ID: 7, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, Remote: wr.Remote{Addr: 0x2000, RKey: 2}}}
	if n, err := q.PostSend(send); n != 1 || err != nil {
		t.Fatalf("PostSend: %d, %v", n, err)
	}
	if got := (*abi.RxeSendWqe)(q.sq.elem(0)).Wr.Wr_id; got != 7 {
		t.Errorf("WQE wr_id %d, want 7", got)
	}
	if k.doorbells != 1 {
		t.Errorf("%d doorbells, want 1", k.doorbells)
	}
	if n, err := q.PostRecv([]wr.RecvWR{{ID: 8}}); n != 1 || err != nil {
		t.Fatalf("PostRecv: %d, %v", n, err)
	}
	produce(cq, abi.IbUverbsWc{Wr_id: 9})
	out := make([]wr.Completion, 2)
	if n := cq.Poll(out); n != 1 || out[0].ID != 9 {
		t.Errorf("Poll: %d, %+v", n, out[0])
	}
}

func BenchmarkPostSendSingleThreaded(b *testing.B) { benchPostSend(b, true, signaledWrite()) }

func BenchmarkPollSingleThreaded(b *testing.B) { benchPoll(b, true) }

// Memory window requests fill the WQE as rdma-core's convert_send_wr does:
// the bind's window, region and keys in wr.mw, an invalidated rkey in host
// order in ex; they carry no data.
func TestPostSendMemoryWindows(t *testing.T) {
	q, _ := newTestQP(t, qp.RC)
	bind := &wr.BindInfo{MWRKey: 0x1200, NewRKey: 0x1201, LKey: 0x77, Addr: 0x5000, Length: 4096, Access: wr.RemoteWrite | wr.RemoteRead}
	n, err := q.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpBindMW, Bind: bind, Flags: wr.Signaled},
		{ID: 2, Opcode: wr.OpLocalInv, Imm: 0x1201},
		{ID: 3, Opcode: wr.OpSendWithInv, Imm: 0xabcdef01, SGList: []wr.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}},
	})
	if n != 3 || err != nil {
		t.Fatalf("posted %d: %v", n, err)
	}
	w0 := (*abi.RxeSendWqe)(q.sq.elem(0))
	m := w0.Wr.Mw()
	if w0.Wr.Opcode != uint32(wr.OpBindMW) || m.Mw_rkey != 0x1200 || m.Rkey != 0x1201 || m.Mr_lkey != 0x77 ||
		m.Addr != 0x5000 || m.Length != 4096 || m.Access != uint32(wr.RemoteWrite|wr.RemoteRead) || w0.Dma.Num_sge != 0 {
		t.Errorf("bind WQE %+v mw %+v", w0.Wr, *m)
	}
	for i, want := range []uint32{0x1201, 0xabcdef01} {
		w := (*abi.RxeSendWqe)(q.sq.elem(uint32(i + 1)))
		if got := binary.NativeEndian.Uint32(w.Wr.Ex[:]); got != want {
			t.Errorf("WQE %d: invalidate_rkey %#x, want %#x", i+1, got, want)
		}
	}
	ud, _ := newTestQP(t, qp.UD)
	for _, bad := range []wr.SendWR{
		{Opcode: wr.OpBindMW, Bind: bind, SGList: []wr.SGE{{Length: 1}}}, // data with a bind
		{Opcode: wr.OpLocalInv, SGList: []wr.SGE{{Length: 1}}},           // data with an invalidate
	} {
		if n, err := q.PostSend([]wr.SendWR{bad}); n != 0 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("%+v: %d, %v; want EINVAL", bad, n, err)
		}
	}
	for _, bad := range []wr.SendWR{{Opcode: wr.OpBindMW, Bind: bind}, {Opcode: wr.OpSendWithInv}} {
		if n, err := ud.PostSend([]wr.SendWR{bad}); n != 0 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("UD %v: %d, %v; want EINVAL", bad.Opcode, n, err)
		}
	}
}

// batchWRs are requests of every shape a batch writes: gather lists,
// immediates, inline data, atomics, a local invalidate.
func batchWRs(inline []byte) []wr.SendWR {
	return []wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWriteWithImm, Flags: wr.Signaled, Imm: 0x01020304,
			SGList: []wr.SGE{{Addr: 0x1000, Length: 100, LKey: 5}, {Addr: 0x2000, Length: 28, LKey: 6}}, Remote: wr.Remote{Addr: 0x9000, RKey: 0x42}},
		{ID: 2, Opcode: wr.OpAtomicCmpAndSwp, SGList: []wr.SGE{{Addr: 0x3000, Length: 8, LKey: 5}}, Remote: wr.Remote{Addr: 0xa000, RKey: 0x43}, CompareAdd: 10, Swap: 20},
		{ID: 3, Opcode: wr.OpSend, Flags: wr.Inline, SGList: []wr.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&inline[0]))), Length: uint32(len(inline))}}},
		{ID: 4, Opcode: wr.OpLocalInv, Imm: 0x77},
	}
}

// A batch writes the ring as PostSend does, byte for byte, with one
// doorbell at the end and nothing published before it.
func TestBatchMatchesPostSend(t *testing.T) {
	inline := []byte("inline payload!!")
	wrs := batchWRs(inline)
	want, wk := newTestQP(t, qp.RC)
	if n, err := want.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	got, k := newTestQP(t, qp.RC)
	if err := got.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	for i := range wrs {
		if err := got.AddToBatch(&wrs[i]); err != nil {
			t.Fatalf("AddToBatch(%d): %v", i, err)
		}
	}
	if got.sq.producer() != 0 || k.doorbells != 0 {
		t.Fatalf("before EndBatch: producer %d, %d doorbells", got.sq.producer(), k.doorbells)
	}
	if n, err := got.EndBatch(); n != len(wrs) || err != nil {
		t.Fatalf("EndBatch = %d, %v", n, err)
	}
	// The doorbells differ only in where the kernel writes its response.
	if k.doorbells != 1 || string(k.lastWrite[:8]) != string(wk.lastWrite[:8]) || string(k.lastWrite[16:]) != string(wk.lastWrite[16:]) {
		t.Errorf("%d doorbells, last %x; want 1, %x", k.doorbells, k.lastWrite, wk.lastWrite)
	}
	if string(got.sq.mem) != string(want.sq.mem) {
		t.Error("the batch's ring differs from PostSend's")
	}
}

// An aborted batch leaves the ring as it was: nothing published, no
// doorbell, and the next post writes what it would have written without
// the batch (the same slots, the same send sequence numbers).
func TestBatchAbort(t *testing.T) {
	inline := []byte("inline payload!!")
	wrs := batchWRs(inline)
	want, _ := newTestQP(t, qp.RC)
	want.PostSend(wrs[:1])
	want.PostSend(wrs[1:])
	got, k := newTestQP(t, qp.RC)
	got.PostSend(wrs[:1])
	if err := got.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	for i := range wrs {
		if err := got.AddToBatch(&wrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	got.AbortBatch()
	if got.sq.producer() != 1 || k.doorbells != 1 {
		t.Fatalf("after the abort: producer %d, %d doorbells; want 1, 1", got.sq.producer(), k.doorbells)
	}
	got.PostSend(wrs[1:])
	// What the kernel reads: the header and the published WQEs (the
	// batch's fourth request stays beyond them, unpublished, and the bytes
	// past each WQE's data are left from the batch).
	if string(got.sq.mem[:abi.SizeofRxeQueueBuf]) != string(want.sq.mem[:abi.SizeofRxeQueueBuf]) {
		t.Error("the ring's header after an aborted batch differs from one without it")
	}
	for i := range uint32(len(wrs)) {
		if g, w := sendWQEBytes(got.sq, i), sendWQEBytes(want.sq, i); string(g) != string(w) {
			t.Errorf("WQE %d after an aborted batch:\n%x\nwithout it:\n%x", i, g, w)
		}
	}
	// The lock was released: the QP stops.
	got.Stop()
	if err := got.BeginBatch(); err != provider.ErrStopped {
		t.Errorf("BeginBatch on a stopped QP: %v", err)
	}
}

// A batch refuses what PostSend refuses, leaving the queue as before the
// refused request, and stops at the queue's depth.
func TestBatchRefuses(t *testing.T) {
	q, _ := newTestQP(t, qp.RC)
	sge := []wr.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}
	if err := q.BeginBatch(); err != nil {
		t.Fatal(err)
	}
	if err := q.AddToBatch(&wr.SendWR{Opcode: wr.OpSend, SGList: make([]wr.SGE, 5)}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("too many SGEs: %v", err)
	}
	for i := range 7 {
		if err := q.AddToBatch(&wr.SendWR{ID: uint64(i), Opcode: wr.OpSend, SGList: sge}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := q.AddToBatch(&wr.SendWR{Opcode: wr.OpSend, SGList: sge}); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("an eighth request at depth 7: %v, want ENOMEM", err)
	}
	if n, err := q.EndBatch(); n != 7 || err != nil || q.sq.producer() != 7 {
		t.Errorf("EndBatch = %d, %v, producer %d", n, err, q.sq.producer())
	}
}

// Batches allocate nothing.
func TestBatchAllocs(t *testing.T) {
	q, _ := newTestQP(t, qp.RC)
	w := signaledWrite()
	if a := testing.AllocsPerRun(1000, func() {
		q.BeginBatch()
		q.AddToBatch(&w[0])
		q.EndBatch()
		consumeAll(q.sq)
	}); a != 0 {
		t.Errorf("a batch allocates %.1f times", a)
	}
}

// BenchmarkBatch is BenchmarkPostSend's request, through a batch.
func BenchmarkBatch(b *testing.B) {
	q, _ := newTestQP(b, qp.RC)
	w := signaledWrite()
	b.ReportAllocs()
	for b.Loop() {
		q.BeginBatch()
		q.AddToBatch(&w[0])
		q.EndBatch()
		consumeAll(q.sq)
	}
}

// sendWQEBytes is the part of send WQE i the kernel reads: the fixed part
// and its gather list or inline data.
func sendWQEBytes(q *queue, i uint32) []byte {
	w := (*abi.RxeSendWqe)(q.elem(i))
	n := uintptr(w.Dma.Num_sge) * abi.SizeofRxeSge
	if w.Wr.Send_flags&uint32(wr.Inline) != 0 {
		n = uintptr(w.Dma.Length)
	}
	return unsafe.Slice((*byte)(q.elem(i)), sendSGEOffset+n)
}

// rxe honours no creation flag, and says so as rdma-core's rxe does.
func TestNewQPCreateFlags(t *testing.T) {
	_, err := (&Context{k: &fakeKernel{}}).NewQP(provider.QPInitAttr{Type: qp.UD, Caps: testCaps, CreateFlags: 1 << 1})
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("NewQP with a create flag: %v, want EOPNOTSUPP", err)
	}
}

// TestPostRecvFull checks the receive ring's room, counted once a post:
// the depth the kernel granted, slots the kernel consumed meanwhile, the
// index wrapping, and a depth below the ring's size.
func TestPostRecvFull(t *testing.T) {
	q, _ := newTestQP(t, qp.RC)
	recvs := func(n int) []wr.RecvWR {
		w := make([]wr.RecvWR, n)
		for i := range w {
			w[i] = wr.RecvWR{ID: uint64(i), SGList: []wr.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}}
		}
		return w
	}
	if n, err := q.PostRecv(recvs(9)); n != 7 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("posting 9 on a depth of 7: %d, %v; want 7, ENOMEM", n, err)
	}
	h := hdrOf(q.rq.mem)
	h.Consumer_index = (h.Consumer_index + 2) & h.Index_mask // the kernel took two
	if n, err := q.PostRecv(recvs(3)); n != 2 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("posting 3 with 2 free: %d, %v; want 2, ENOMEM", n, err)
	}
	if got := h.Producer_index; got != 1 {
		t.Errorf("producer index %d after 9 posted on 8 slots, want 1 (wrapped)", got)
	}
	consumeAll(q.rq)
	if n, err := q.PostRecv(recvs(7)); n != 7 || err != nil {
		t.Fatalf("posting 7 on an empty ring across its end: %d, %v", n, err)
	}
	consumeAll(q.rq)
	if n, err := postRecv(q.rq, 4, 5, recvs(6)); n != 5 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("posting 6 on a depth of 5 in 8 slots: %d, %v; want 5, ENOMEM", n, err)
	}
}
