package rxe

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// The common requests take their own path (plain and writePlain, no
// validateSend, no writeSendWQE), alone or in a list. It must leave the
// ring exactly as the general path would (a refused inline request may
// leave part of its data in the unpublished slot), and refuse exactly what
// the general path refuses: every opcode on every QP type, with and without an
// SGE, with the flags and fields each uses; and a list of them all.
func TestPostSendOneMatchesList(t *testing.T) {
	src, big := inlineSrc, inlineBig[:testCaps.MaxInlineData+1]
	at := func(b []byte, n int) wr.SGE {
		return wr.SGE{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: uint32(n)}
	}
	gone := testenv.UnmappedAddr(t)
	sge := wr.SGE{Addr: 0x1000, Length: 64, LKey: 5}
	var reqs []wr.SendWR
	for op := wr.Opcode(0); op <= wr.OpSendWithInv+1; op++ {
		base := wr.SendWR{ID: 0x1122334455667788, Opcode: op, Imm: 0xa1b2c3d4,
			Remote: wr.Remote{Addr: 0x9000, RKey: 0x42}, CompareAdd: 10, Swap: 20}
		for _, v := range []struct {
			flags wr.SendFlags
			sg    []wr.SGE
		}{
			{wr.Signaled, []wr.SGE{sge}},
			{wr.Signaled | wr.Fence | wr.Solicited, nil},
			{0, []wr.SGE{{Addr: 0x1000, Length: 8, LKey: 5}}},
			{0, []wr.SGE{{Addr: 0x1000, Length: 4, LKey: 5}}},      // short for an atomic
			{0, []wr.SGE{sge, {Addr: 0x3000, Length: 8, LKey: 6}}}, // two SGEs: the list path
			{wr.Inline, []wr.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&src[0]))), Length: 16}}},
			// Inline, the lone request's own path: two SGEs, none, an
			// empty one, exactly the QP's limit, one byte past it,
			// more SGEs than the QP has, memory that is not there.
			{wr.Inline | wr.Signaled, []wr.SGE{at(src, 5), at(big[7:], 20)}},
			{wr.Inline, nil},
			{wr.Inline, []wr.SGE{at(src, 0), at(src, 3)}},
			{wr.Inline, []wr.SGE{at(big, int(testCaps.MaxInlineData))}},
			{wr.Inline, []wr.SGE{at(big, 40), at(big, int(testCaps.MaxInlineData)-39)}},
			{wr.Inline, make([]wr.SGE, testCaps.MaxSendSGE+1)},
			{wr.Inline, []wr.SGE{at(src, 4), {Addr: gone, Length: 4}}},
			{wr.Inline, []wr.SGE{{Addr: ^uint64(0) - 2, Length: 8}}},
		} {
			w := base
			w.Flags, w.SGList = v.flags, v.sg
			reqs = append(reqs, w)
			w.Remote.Addr = 0x9004 // misaligned for an atomic
			reqs = append(reqs, w)
		}
	}
	for _, typ := range []qp.Type{qp.RC, qp.UC} {
		for i, w := range reqs {
			t.Run(fmt.Sprintf("%v/%d/op%d", typ, i, w.Opcode), func(t *testing.T) {
				one, k1 := newTestQP(t, typ)
				list, k2 := newTestQP(t, typ)
				list.plainOps = [len(fastOps)]uint8{} // validateSend and writeSendWQE for all
				n1, err1 := one.PostSend([]wr.SendWR{w})
				n2, err2 := list.PostSend([]wr.SendWR{w})
				if n1 != n2 || !sameErr(err1, err2) {
					t.Fatalf("plain path: %d, %v; general: %d, %v", n1, err1, n2, err2)
				}
				if k1.doorbells != k2.doorbells {
					t.Errorf("doorbells: %d, list %d", k1.doorbells, k2.doorbells)
				}
				if got, want := one.sq.producer(), list.sq.producer(); got != want {
					t.Errorf("producer index %d, list %d", got, want)
				}
				// The slot as the kernel may read it: a refused inline
				// request may leave part of its data there, unpublished.
				a := unsafe.Slice((*byte)(one.sq.elem(0)), one.sq.elemSize())
				b := unsafe.Slice((*byte)(list.sq.elem(0)), list.sq.elemSize())
				if n1 == 0 {
					a = a[:abi.SizeofRxeSendWqe]
					b = b[:abi.SizeofRxeSendWqe]
				}
				if !bytes.Equal(a, b) {
					t.Errorf("WQE differs from the general path's:\nplain   %x\ngeneral %x", a[:abi.SizeofRxeSendWqe+32], b[:abi.SizeofRxeSendWqe+32])
				}
				if one.ssn != list.ssn {
					t.Errorf("ssn %d, list %d", one.ssn, list.ssn)
				}
			})
		}
	}
	// Lists of five, each a window over the same requests, the refused
	// ones included: the same count, error and ring.
	for _, typ := range []qp.Type{qp.RC, qp.UC} {
		one, _ := newTestQP(t, typ)
		list, _ := newTestQP(t, typ)
		list.plainOps = [len(fastOps)]uint8{}
		for i := 0; i+5 <= len(reqs); i++ {
			n1, err1 := one.PostSend(reqs[i : i+5])
			n2, err2 := list.PostSend(reqs[i : i+5])
			if n1 != n2 || !sameErr(err1, err2) {
				t.Fatalf("%v: list at %d: plain path %d, %v; general %d, %v", typ, i, n1, err1, n2, err2)
			}
			a := unsafe.Slice((*byte)(one.sq.elem(0)), one.sq.elemSize()*8)
			b := unsafe.Slice((*byte)(list.sq.elem(0)), list.sq.elemSize()*8)
			if !bytes.Equal(a, b) || one.sq.producer() != list.sq.producer() {
				t.Fatalf("%v: list at %d: the rings differ", typ, i)
			}
			consumeAll(one.sq)
			consumeAll(list.sq)
		}
	}
}

// Inline data the requests name by address, package variables so that
// no stack move leaves an address stale.
var (
	inlineSrc = []byte("0123456789abcdef")
	inlineBig = func() (b [256]byte) {
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()
)

// sameErr reports whether two posts failed alike: the same error, or the
// same errno (an inline copy's EFAULT is made afresh by each).
func sameErr(a, b error) bool {
	if errors.Is(a, b) || errors.Is(b, a) {
		return true
	}
	var x, y unix.Errno
	return errors.As(a, &x) && errors.As(b, &y) && x == y
}

// A full ring and a stopped QP refuse a lone request as they refuse a list.
func TestPostSendOneRefusals(t *testing.T) {
	q, _ := newTestQP(t, qp.RC)
	w := signaledWrite()
	for i := range int(testCaps.MaxSendWR) {
		if n, err := q.PostSend(w); n != 1 || err != nil {
			t.Fatalf("post %d: %d, %v", i, n, err)
		}
	}
	if n, err := q.PostSend(w); n != 0 || !errors.Is(err, unix.ENOMEM) {
		t.Errorf("post to a full ring: %d, %v; want 0, ENOMEM", n, err)
	}
	q.Stop()
	consumeAll(q.sq)
	if n, err := q.PostSend(w); n != 0 || !errors.Is(err, provider.ErrStopped) {
		t.Errorf("post to a stopped QP: %d, %v; want provider.ErrStopped", n, err)
	}
}
