package rxe

// Fuzz targets for what rxe's kernel driver writes into memory the
// library reads: completions (struct ib_uverbs_wc) and the header of a
// mapped ring. The kernel is trusted, but a corrupt ring or a kernel
// that lays it out differently must not make Poll read or write outside
// the mapping. And for what a caller posts: a lone request's own paths
// must do what the general path does.

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// wcBytes returns the wire image of a completion.
func wcBytes(w abi.IbUverbsWc) []byte {
	return append([]byte(nil), bytesOf(&w)...)
}

func FuzzDecodeWC(f *testing.F) {
	withImm := abi.IbUverbsWc{Wr_id: 9, Opcode: uint32(wr.WCRecv), Byte_len: 100, Qp_num: 17, Src_qp: 18,
		Wc_flags: uint32(wr.WCWithImm | wr.WCGRH)}
	binary.BigEndian.PutUint32(withImm.Ex[:], 0xcafe0001)
	f.Add(wcBytes(withImm))
	f.Add(wcBytes(abi.IbUverbsWc{Wr_id: 1, Status: uint32(wr.RemAccessErr), Vendor_err: 0x77}))
	// IB_WC_GRH | IB_WC_WITH_INVALIDATE, as rxe reports a send with
	// invalidate.
	f.Add(wcBytes(abi.IbUverbsWc{Wr_id: 2, Opcode: uint32(wr.WCRecv), Wc_flags: 1<<0 | 1<<2, Ex: [4]byte{1, 2, 3, 4}}))
	f.Add(wcBytes(abi.IbUverbsWc{Wr_id: 3, Wc_flags: 0xffffffff}))
	// Through the ring and Poll, which does the conversion in its loop,
	// into a completion left dirty by an earlier one.
	cq, _ := newTestCQ(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var w abi.IbUverbsWc
		copy(bytesOf(&w), b)
		produce(cq, w)
		out := []wr.Completion{{ID: 1, Imm: 2, Flags: 0xff, Timestamp: 3}, {ID: 4}}
		if n := cq.Poll(out); n != 1 {
			t.Fatalf("Poll of one completion returned %d", n)
		}
		c := out[0]
		if c.Timestamp != 0 || out[1].ID != 4 {
			t.Fatalf("Poll left %+v after it", out)
		}
		imm := binary.NativeEndian.Uint32(w.Ex[:])
		if c.Flags&wr.WCWithImm != 0 {
			imm = binary.BigEndian.Uint32(w.Ex[:])
		}
		// The kernel's flags, bit by bit: GRH and WITH_IMM keep their
		// place, WITH_INVALIDATE (bit 2) and IP_CSUM_OK (bit 3) swap,
		// and nothing else is reported.
		bit := func(n uint) bool { return w.Wc_flags&(1<<n) != 0 }
		flags := c.Flags&^(wr.WCGRH|wr.WCWithImm|wr.WCWithInv|wr.WCIPCsumOK) == 0 &&
			(c.Flags&wr.WCGRH != 0) == bit(0) && (c.Flags&wr.WCWithImm != 0) == bit(1) &&
			(c.Flags&wr.WCWithInv != 0) == bit(2) && (c.Flags&wr.WCIPCsumOK != 0) == bit(3)
		if c.ID != w.Wr_id || uint32(c.Status) != w.Status || uint32(c.Opcode) != w.Opcode ||
			c.VendorErr != w.Vendor_err || c.ByteLen != w.Byte_len || c.Imm != imm ||
			c.QPNum != w.Qp_num || c.SrcQP != w.Src_qp || !flags ||
			c.PKeyIndex != w.Pkey_index || c.SLID != w.Slid || c.SL != w.Sl || c.DLIDPathBits != w.Dlid_path_bits {
			t.Fatalf("Poll of %+v = %+v", w, c)
		}
		_ = c.Err()
	})
}

// FuzzCQRing maps a CQ ring whose header (element size, index mask,
// producer and consumer indices) and elements are the fuzzer's, through
// the real CQ creation, and polls it: a header that does not fit the
// mapping must be refused, and polling one that does must stay inside it.
func FuzzCQRing(f *testing.F) {
	var ring []byte
	for i := range 8 {
		ring = append(ring, wcBytes(abi.IbUverbsWc{Wr_id: uint64(i), Byte_len: 64, Qp_num: 17})...)
	}
	f.Add(uint32(6), uint32(7), uint32(3), uint32(0), ring)
	f.Add(uint32(6), uint32(7), uint32(1), uint32(6), ring)
	f.Add(uint32(6), uint32(7), uint32(9), uint32(2), ring)  // producer past the mask
	f.Add(uint32(6), uint32(15), uint32(3), uint32(0), ring) // more slots than mapped
	f.Add(uint32(3), uint32(7), uint32(1), uint32(0), ring)  // elements smaller than a completion
	f.Add(uint32(31), uint32(0), uint32(1), uint32(0), ring)
	f.Fuzz(func(t *testing.T, log2, mask, prod, cons uint32, elems []byte) {
		if len(elems) > 1<<16 {
			return
		}
		mem := make([]byte, abi.SizeofRxeQueueBuf+len(elems))
		hdr := (*abi.RxeQueueBuf)(unsafe.Pointer(&mem[0]))
		hdr.Log2_elem_size, hdr.Index_mask = log2, mask
		hdr.Producer_index, hdr.Consumer_index = prod, cons
		copy(mem[abi.SizeofRxeQueueBuf:], elems)
		k := &fakeKernel{rings: map[int64][]byte{4096: mem}}
		b, err := (&Context{k: k}).NewCQ(int(mask))
		if err != nil {
			t.Fatal(err)
		}
		b.(*cqBuilder).resp.Mi = abi.Mminfo{Offset: 4096, Size: uint32(len(mem))}
		p, err := b.Finish(provider.Created{Handle: 3, CQE: mask})
		if err != nil {
			return
		}
		cq := p.(*CQ)
		if end := abi.SizeofRxeQueueBuf + (uint64(cq.q.mask)+1)<<cq.q.elemLog2; end > uint64(len(mem)) {
			t.Fatalf("ring of %d slots of %d bytes accepted in %d bytes", cq.q.mask+1, cq.q.elemSize(), len(mem))
		}
		wc := make([]wr.Completion, 4)
		for range 3 {
			n := cq.Poll(wc)
			if n < 0 || n > len(wc) {
				t.Fatalf("Poll returned %d into %d", n, len(wc))
			}
			// The index the library stores is masked (before any poll
			// it is whatever the kernel wrote).
			if c := hdr.Consumer_index; n > 0 && c&^cq.q.mask != 0 {
				t.Fatalf("consumer index %#x outside mask %#x", c, cq.q.mask)
			}
		}
		if err := cq.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzPostSendOne draws one send request, well formed or not, and posts it
// alone (the plain and inline paths) and through the general path
// (validateSend and writeSendWQE): the count, the errno, the producer
// index, the sequence number and a published WQE must agree. Inline SGEs
// point into readable memory, across its end into a page nothing may
// read, or at a low address.
func FuzzPostSendOne(f *testing.F) {
	f.Add(uint8(wr.OpRDMAWriteWithImm), uint8(wr.Inline|wr.Signaled), uint8(1), uint64(0x1a2b), []byte{16, 0})
	f.Add(uint8(wr.OpSend), uint8(wr.Inline), uint8(2), uint64(7), []byte{5, 3, 60, 0})
	f.Add(uint8(wr.OpAtomicFetchAdd), uint8(wr.Inline), uint8(1), uint64(8), []byte{8, 0})
	f.Add(uint8(wr.OpRDMAWrite), uint8(0), uint8(1), uint64(0x1000), []byte{64, 1})
	// Mapped memory, outside the Go heap: a page of data and, after it,
	// a page nothing may read that stays reserved, so that no later
	// mapping (a ring, the heap) lands where a request says there is
	// none.
	m, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Munmap(m) })
	if err := unix.Mprotect(m[4096:], unix.PROT_NONE); err != nil {
		f.Fatal(err)
	}
	for i := range 4096 {
		m[i] = byte(i * 7)
	}
	base := uint64(uintptr(unsafe.Pointer(&m[0])))
	gone := base + 4096
	f.Fuzz(func(t *testing.T, op, flags, typ uint8, remote uint64, sgs []byte) {
		if len(sgs) > 2*8 {
			sgs = sgs[:2*8]
		}
		var sg []wr.SGE
		for i := 0; i+1 < len(sgs); i += 2 {
			n, where := uint32(sgs[i]), sgs[i+1]
			var a uint64
			switch where % 4 {
			case 0, 1: // in the data page
				a = base + uint64(where)%128
			case 2: // across the end of the data page, or past it
				a = gone - uint64(where)%8
			default:
				a = uint64(where) // a low address
			}
			sg = append(sg, wr.SGE{Addr: a, Length: n, LKey: uint32(where)})
		}
		w := wr.SendWR{ID: remote ^ 0x55, Opcode: wr.Opcode(op % 16), Flags: wr.SendFlags(flags & 0x1f),
			Imm: uint32(remote), Remote: wr.Remote{Addr: remote, RKey: uint32(remote >> 32)},
			CompareAdd: remote + 1, Swap: remote + 2, SGList: sg}
		qt := []qp.Type{qp.RC, qp.UC}[typ%2]
		one, k1 := newTestQP(t, qt)
		list, k2 := newTestQP(t, qt)
		list.plainOps = [len(fastOps)]uint8{}
		n1, err1 := one.PostSend([]wr.SendWR{w})
		n2, err2 := list.PostSend([]wr.SendWR{w})
		if n1 != n2 || !sameErr(err1, err2) || k1.doorbells != k2.doorbells {
			t.Fatalf("%+v: lone path %d, %v; general %d, %v", w, n1, err1, n2, err2)
		}
		if one.sq.producer() != list.sq.producer() || one.ssn != list.ssn {
			t.Fatalf("%+v: producer %d/%d, ssn %d/%d", w, one.sq.producer(), list.sq.producer(), one.ssn, list.ssn)
		}
		size := abi.SizeofRxeSendWqe
		if n1 == 1 {
			size = one.sq.elemSize()
		}
		a := unsafe.Slice((*byte)(one.sq.elem(0)), size)
		b := unsafe.Slice((*byte)(list.sq.elem(0)), size)
		if !bytes.Equal(a, b) {
			t.Fatalf("%+v: WQE differs:\nlone    %x\ngeneral %x", w, a, b)
		}
	})
}
