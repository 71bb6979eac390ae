package mlx5

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/failnote"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/wr"
)

type cqBuilder struct {
	queueBuf
	ncqe uint32
	size int
	ts   bool    // completions carry the CQE's timestamp
	uar  *dynUAR // the UAR the CQ names, with dynamic UARs
	cmd  abi.Mlx5IbCreateCq
	resp abi.Mlx5IbCreateCqResp
}

// NewCQ allocates a CQ buffer of the next power of two above cqe entries,
// every entry marked invalid, and its doorbell record, and returns the
// builder whose driver data (struct mlx5_ib_create_cq) names them. The
// kernel sizes the CQ the same way from the cqe the core sends. Entries
// are 64 bytes, or 128 when the context was opened with MLX5_CQE_SIZE=128
// (rdma-core's get_cqe_size; the kernel takes either size for a user CQ).
func (c *Context) NewCQ(cqe int) (provider.Builder[provider.CQ], error) {
	return c.NewCQEx(provider.CQAttr{CQE: cqe})
}

// NewCQEx is NewCQ for an extended CQ (mlx5_create_cq_ex). The device
// writes its clock into every CQE whatever the CQ asked for, so a CQ with
// timestamps differs only in its polling, which copies that field into
// each completion (mlx5_cq_read_wc_completion_ts); the kernel is told
// through the core's create flags.
func (c *Context) NewCQEx(attr provider.CQAttr) (provider.Builder[provider.CQ], error) {
	cqe := attr.CQE
	if cqe < 1 || cqe >= maxCQEntries {
		return nil, fmt.Errorf("mlx5: CQ of %d entries: %w", cqe, unix.EINVAL)
	}
	size := c.cqeSize
	if size != cqe64Size && size != cqe128Size {
		return nil, fmt.Errorf("mlx5: CQE size %d (MLX5_CQE_SIZE): %w", size, unix.EINVAL)
	}
	ncqe := roundUpPow2(uint32(cqe) + 1)
	q, err := c.allocQueue("CQ", int(ncqe)*size, false)
	if err != nil {
		return nil, err
	}
	for i := 0; i < int(ncqe); i++ {
		q.mem[(i+1)*size-cqe64Size+cqeOffOpOwn] = cqeInvalidOpOwn
	}
	b := &cqBuilder{queueBuf: q, ncqe: ncqe, size: size, ts: attr.Timestamp}
	b.cmd.Buf_addr = addrOf(q.mem)
	b.cmd.Db_addr = uint64(uintptr(q.db))
	b.cmd.Cqe_size = uint32(size)
	if c.dyn {
		// The kernel gives a CQ no UAR of its own in this mode: it names
		// the non-cached one it arms through, as rdma-core's CQs name
		// nc_uar.
		u, err := c.cqUAR()
		if err != nil {
			b.Abort()
			return nil, fmt.Errorf("mlx5: CQ UAR: %w", err)
		}
		b.uar = u
		b.cmd.Flags |= abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
		b.cmd.Uar_page_index = uint16(u.pageID)
	}
	return b, nil
}

func (b *cqBuilder) Udata() (in, out []byte) { return bytesOf(&b.cmd), bytesOf(&b.resp) }

// KernelCQE is the entry count mlx5_create_cq sends: the ring less one
// (provider.CQESizer). mlx5_ib rounds count+1 up to a power of two, so the
// kernel makes the ring the buffer was sized for.
func (b *cqBuilder) KernelCQE() uint32 { return b.ncqe - 1 }

func (b *cqBuilder) Abort() {
	b.free()
	if b.uar != nil {
		b.ctx.putUAR(b.uar, nil)
		b.uar = nil
	}
}

func (b *cqBuilder) Finish(c provider.Created) (provider.CQ, error) {
	if c.CQE+1 != b.ncqe {
		b.Abort()
		return nil, fmt.Errorf("mlx5: kernel made a CQ of %d entries over a buffer of %d: %w", c.CQE+1, b.ncqe, unix.EPROTO)
	}
	cq := &CQ{
		ctx:   b.ctx,
		mem:   b.mem,
		db:    (*[2]uint32)(b.db),
		cqn:   b.resp.Cqn,
		ring:  newCQRing(unsafe.Pointer(&b.mem[0]), b.ncqe, b.size),
		uar:   b.uar,
		armDB: b.ctx.cqDB,
		ts:    b.ts,
	}
	if b.uar != nil {
		cq.armDB = unsafe.Pointer(&b.uar.mem[cqDoorbellOffset])
	}
	b.uar = nil // the CQ's now
	b.ctx.cqMu.Lock()
	b.ctx.cqs[cq] = struct{}{}
	b.ctx.cqMu.Unlock()
	return cq, nil
}

// CQ is an mlx5 completion queue.
type CQ struct {
	ctx   *Context
	mu    spinLock
	mem   []byte
	db    *[2]uint32 // doorbell record: consumer index, arm word (big-endian)
	cqn   uint32
	ring  cqRing
	armSN uint32
	// armDB is the 64-bit arm doorbell: in the context's first static UAR,
	// or in the dynamic UAR the CQ named at creation (uar, released when
	// the CQ closes).
	armDB unsafe.Pointer
	uar   *dynUAR
	ts    bool // completions carry the CQE's timestamp
	// onError, set by uverbs before the first poll (internal/failnote),
	// is called with the QP number of each failed completion Poll
	// returns.
	onError func(qpn uint32)
}

func init() { failnote.For(func(c *CQ) *func(uint32) { return &c.onError }) }

// Poll consumes up to len(wc) completions, as rdma-core's poll_cq does:
// take each software-owned CQE in order, order the reads of its contents
// after the owner check, decode it, and finally publish the new consumer
// index in the doorbell record so the device may reuse the entries.
func (cq *CQ) Poll(wc []wr.Completion) int {
	cq.mu.lock()
	if cq.mem == nil {
		cq.mu.unlock()
		return 0
	}
	r := resources{t: &cq.ctx.t, v1: cq.ctx.cqeVersion == cqeVersion1, ts: cq.ts, onError: cq.onError}
	n := uint(0) // unsigned: the compiler then proves wc[n] in bounds
	start := cq.ring.consIndex
	for n < uint(len(wc)) {
		cqe := cq.ring.swOwned(cq.ring.consIndex)
		if cqe == nil {
			break
		}
		cq.ring.consIndex++
		fromDeviceBarrier()
		c := &wc[n]
		// A send's completion on the QP the CQE before named, the
		// common case of a send queue's CQ, is decoded here, as
		// decodeCQE would (decodeReq): a call per CQE, with every live
		// value spilled around it, cost 18 instructions per completion
		// (docs/performance.md, the mlx5 poll).
		if *(*uint8)(at(cqe, cqeOffOpOwn))>>cqeOpcodeShift == cqeReq && !r.ts {
			sop := getBE32(at(cqe, cqeOffSopDropQPN))
			qpn := sop & cqeQPNMask
			if q := r.qp; q != nil && q.rsn == r.reqRsn(cqe, qpn) && q.sq != nil {
				*c = wr.Completion{QPNum: qpn}
				k := &reqCompletions[uint8(sop>>24)]
				c.Opcode, c.Flags = k.opcode, k.flags
				c.ByteLen = k.byteLen | getBE32(at(cqe, cqeOffByteCnt))&k.byteCnt
				completeSend(q.sq, cqe, c)
				n++
				continue
			}
		}
		if decodeCQE(cqe, c, &r) {
			n++
		}
	}
	if cq.ring.consIndex != start {
		setRecord(&cq.db[cqSetCI], cq.ring.consIndex&cqeConsIndexMask)
	}
	cq.mu.unlock()
	return int(n)
}

// ReqNotify arms the CQ from user space (mlx5_arm_cq): the arm word goes
// into the doorbell record, then, ordered after it, a 64-bit doorbell to
// the UAR carrying the same word and the CQ number. The sequence number
// tells the device this arm from the previous one; CQEvent advances it.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.lock()
	defer cq.mu.unlock()
	if cq.mem == nil {
		return errClosed
	}
	cmd := uint32(cqDBReqNot)
	if solicitedOnly {
		cmd = cqDBReqNotSol
	}
	word := (cq.armSN&3)<<28 | cmd | cq.ring.consIndex&cqeConsIndexMask
	setRecord(&cq.db[cqArmDB], word)
	wcFlush() // mmio_wc_start: the record before the doorbell
	mmioWrite64(cq.armDB, beWord64(uint64(word)<<32|uint64(cq.cqn)))
	wcFlush()
	return nil
}

// CQEvent records that a completion event for this CQ was read from its
// channel (rdma-core's mlx5_cq_event, which libibverbs calls from
// ibv_get_cq_event): the next arm carries the next sequence number.
func (cq *CQ) CQEvent() {
	cq.mu.lock()
	cq.armSN++
	cq.mu.unlock()
}

// beWord64 returns the value whose native in-memory bytes are v big-endian.
func beWord64(v uint64) uint64 { return toBE64(v) }

// clean removes the CQEs of a destroyed QP from the ring
// (__mlx5_cq_clean). Receives on an SRQ give their WQEs back to it. With
// CQE version 1 the QP's CQEs carry its user index (rsn) and its receives
// are on its own SRQ; with version 0 they carry its number, and a receive
// on an SRQ names the SRQ.
func (cq *CQ) clean(qp *QP) {
	v1 := cq.ctx.cqeVersion == cqeVersion1
	cq.remove(func(cqe64 unsafe.Pointer) bool {
		srqnUidx := getBE32(at(cqe64, cqeOffSrqnUidx)) & cqeSrqnUidxMask
		if v1 {
			if srqnUidx != qp.rsn {
				return false
			}
		} else if getBE32(at(cqe64, cqeOffSopDropQPN))&cqeQPNMask != qp.num {
			return false
		}
		if isResponder(cqe64) {
			var srq *SRQ
			if v1 {
				srq = qp.srq
			} else if srqnUidx != 0 {
				srq = cq.ctx.t.srqs.get(srqnUidx)
			}
			if srq != nil {
				srq.release(getBE16(at(cqe64, cqeOffWQECounter)))
			}
		}
		return true
	})
}

// cleanXRC removes the receive completions of a destroyed XRC SRQ from
// the ring. rdma-core leaves them (mlx5_destroy_srq cleans no CQ), and its
// poll then fails on a user index it no longer knows, or, once a new QP
// or SRQ took the index, completes the stale CQE as that one's. The XRC
// receive QP the CQEs name may be another process's and outlive the SRQ,
// so its destroy cannot clean them. Under CQE version 1 they name the SRQ
// by user index (nothing else carries it), under version 0 by number.
func (cq *CQ) cleanXRC(s *SRQ) {
	v1 := cq.ctx.cqeVersion == cqeVersion1
	cq.remove(func(cqe64 unsafe.Pointer) bool {
		srqnUidx := getBE32(at(cqe64, cqeOffSrqnUidx)) & cqeSrqnUidxMask
		if v1 {
			return srqnUidx == s.uidx
		}
		return srqnUidx == s.num && isResponder(cqe64)
	})
}

// isResponder reports whether a CQE completes a receive, successful or
// not (rdma-core's is_responder, with the error opcode).
func isResponder(cqe64 unsafe.Pointer) bool {
	switch *(*uint8)(at(cqe64, cqeOffOpOwn)) >> cqeOpcodeShift {
	case cqeRespWrImm, cqeRespSend, cqeRespSendIm, cqeRespSendIn, cqeRespErr:
		return true
	}
	return false
}

// remove takes the software-owned CQEs mine picks out of the ring, as
// __mlx5_cq_clean does: later CQEs move up over them, keeping the owner
// bits of the entries they land in, and the consumer index skips the freed
// entries.
func (cq *CQ) remove(mine func(cqe64 unsafe.Pointer) bool) {
	cq.mu.lock()
	defer cq.mu.unlock()
	if cq.mem == nil {
		return
	}
	r := &cq.ring
	prod := r.consIndex
	for r.swOwned(prod) != nil {
		prod++
		if prod == r.consIndex+r.ncqe-1 {
			break
		}
	}
	fromDeviceBarrier()
	var nfreed uint32
	for int32(prod-r.consIndex) > 0 {
		prod--
		cqe := r.entry(prod)
		if mine(r.cqe64(cqe)) {
			nfreed++
		} else if nfreed > 0 {
			dst := r.entry(prod + nfreed)
			p := (*uint8)(at(r.cqe64(dst), cqeOffOpOwn))
			owner := *p & cqeOwnerMask
			memmove(dst, cqe, r.size())
			*p = owner | *p&^cqeOwnerMask
		}
	}
	if nfreed > 0 {
		r.consIndex += nfreed
		publishRecord(&cq.db[cqSetCI], r.consIndex&cqeConsIndexMask) // after the moved CQEs
	}
}

// liveCQs returns the context's CQs, for cleaning outside its lock.
func (c *Context) liveCQs() []*CQ {
	c.cqMu.Lock()
	defer c.cqMu.Unlock()
	cqs := make([]*CQ, 0, len(c.cqs))
	for cq := range c.cqs {
		cqs = append(cqs, cq)
	}
	return cqs
}

// Close frees the buffer and the doorbell record, and gives back its
// dynamic UAR. The core calls it after the kernel destroyed the CQ.
func (cq *CQ) Close() error {
	cq.ctx.cqMu.Lock()
	delete(cq.ctx.cqs, cq)
	cq.ctx.cqMu.Unlock()
	cq.mu.lock()
	defer cq.mu.unlock()
	if cq.mem == nil {
		return nil
	}
	err := cq.ctx.freeQueue(cq.mem, unsafe.Pointer(cq.db), defaultUIDX)
	cq.mem, cq.db = nil, nil
	if cq.uar != nil {
		if e := cq.ctx.putUAR(cq.uar, nil); e != nil && err == nil {
			err = e
		}
		cq.uar = nil
	}
	return err
}
