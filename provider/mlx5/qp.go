package mlx5

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// eceTrigger asks the kernel for enhanced connection establishment
// version 1 on a QP, as rdma-core does when the context offers it.
const eceTrigger = 0x10000000

type qpBuilder struct {
	queueBuf
	attr provider.QPInitAttr
	sq   sqSize
	rq   rqSize
	srq  *SRQ
	bf   *bfReg // the register of a dynamic UAR the QP names, or nil
	cmd  abi.Mlx5IbCreateQp
	resp abi.Mlx5IbCreateQpResp
}

// NewQP sizes the QP's queues as rdma-core does, allocates one buffer for
// both (receive queue first, then the send queue) and a doorbell record,
// and returns the builder whose driver data (struct mlx5_ib_create_qp)
// names them. With static registers the kernel picks the QP's BlueFlame
// register and answers with its index; with dynamic UARs the provider
// picks it (qpRegister) and names its UAR by page id.
func (c *Context) NewQP(attr provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	switch attr.Type {
	case qp.RC, qp.UC, qp.UD, qp.XRCSend:
	case qp.XRCRecv:
		return xrcRecvBuilder{ctx: c}, nil
	default:
		return nil, fmt.Errorf("mlx5: QP type %d: %w", attr.Type, unix.EOPNOTSUPP)
	}
	sq, err := calcSQ(&c.lim, attr.Type, attr.Caps)
	if err != nil {
		return nil, fmt.Errorf("mlx5: send queue for %+v: %w", attr.Caps, err)
	}
	rq, err := calcRQ(&c.lim, attr.Caps, attr.HasSRQ)
	if err != nil {
		return nil, fmt.Errorf("mlx5: receive queue for %+v: %w", attr.Caps, err)
	}
	size := int(sq.bytes + rq.bytes)
	if size == 0 {
		return nil, fmt.Errorf("mlx5: QP with neither send nor receive queue: %w", unix.EINVAL)
	}
	q, err := c.allocQueue("QP", size, true)
	if err != nil {
		return nil, err
	}
	b := &qpBuilder{queueBuf: q, attr: attr, sq: sq, rq: rq}
	b.cmd.Buf_addr = addrOf(q.mem)
	b.cmd.Db_addr = uint64(uintptr(q.db))
	b.cmd.Sq_wqe_count = sq.wqeCnt
	b.cmd.Rq_wqe_count = rq.wqeCnt
	b.cmd.Rq_wqe_shift = rq.wqeShift
	b.cmd.Uidx = q.uidx
	if attr.HasSRQ {
		if b.srq, _ = attr.SRQ.(*SRQ); b.srq == nil && c.cqeVersion == cqeVersion1 {
			b.Abort()
			return nil, fmt.Errorf("mlx5: QP on an SRQ that is not an mlx5 SRQ (%T): %w", attr.SRQ, unix.EINVAL)
		}
	}
	if c.ece {
		b.cmd.Ece_options = eceTrigger
	}
	if c.dyn {
		bf, err := c.qpRegister()
		if err != nil {
			b.Abort()
			return nil, fmt.Errorf("mlx5: QP UAR: %w", err)
		}
		b.bf = bf
		b.cmd.Bfreg_index = bf.pageID
		b.cmd.Flags |= abi.MLX5_QP_FLAG_UAR_PAGE_INDEX
	}
	return b, nil
}

func (b *qpBuilder) Udata() (in, out []byte) { return bytesOf(&b.cmd), bytesOf(&b.resp) }

func (b *qpBuilder) Abort() {
	b.free()
	if b.bf != nil {
		b.ctx.putUAR(b.bf.uar, b.bf)
		b.bf = nil
	}
}

// limit is the smaller of what the provider computed and what the kernel
// granted, when the kernel granted anything.
func limit(computed, granted uint32) uint32 {
	if granted > 0 && granted < computed {
		return granted
	}
	return computed
}

// KernelCaps is what mlx5_create_qp sends the kernel
// (provider.CapsSizer): the caps asked for, but the inline-data size that
// calc_sq_size computed from the WQE's stride, which it writes into the
// attributes before the command.
func (b *qpBuilder) KernelCaps(c qp.Caps) qp.Caps {
	if b.sq.wqeCnt > 0 {
		c.MaxInlineData = b.sq.maxInline
	}
	return c
}

func (b *qpBuilder) Finish(c provider.Created) (provider.QP, error) {
	// With dynamic UARs the kernel answers MLX5_IB_INVALID_BFREG: the
	// register is the one the provider named.
	bf := b.bf
	if bf == nil {
		idx := b.resp.Bfreg_index
		if int(idx) >= len(b.ctx.bfs) {
			b.Abort()
			return nil, fmt.Errorf("mlx5: kernel gave the QP BlueFlame register %d of %d: %w", idx, len(b.ctx.bfs), unix.EPROTO)
		}
		bf = &b.ctx.bfs[idx]
	}
	b.bf = nil // the QP's now
	base := unsafe.Pointer(&b.mem[0])
	qp := &QP{
		ctx: b.ctx,
		num: c.QPNum,
		rsn: c.QPNum,
		srq: b.srq,
		typ: b.attr.Type,
		mem: b.mem,
		db:  (*[2]uint32)(b.db),
		bf:  bf,

		// Register 0 and the non-cached UAR's have no BlueFlame halves.
		bfMax:        uint32(bf.bufSize),
		inlineBFOnly: !b.ctx.preferBF,
	}
	if b.rq.wqeCnt > 0 {
		qp.rq = &recvQueue{
			start:    base,
			wqeCnt:   b.rq.wqeCnt,
			wqeShift: b.rq.wqeShift,
			maxPost:  b.rq.maxPost,
			maxGS:    b.rq.maxGS,
			wrid:     make([]uint64, b.rq.wqeCnt),
		}
	}
	if b.sq.wqeCnt > 0 {
		start := unsafe.Add(base, b.rq.bytes)
		qp.sq = &sendQueue{
			start:   start,
			qend:    unsafe.Add(start, uintptr(b.sq.wqeCnt)<<sendWQEShift),
			wqeCnt:  b.sq.wqeCnt,
			maxPost: b.sq.maxPost,
			maxGS:   b.sq.maxGS,
			maxInl:  b.sq.maxInline,
			qpn:     c.QPNum,
			typ:     b.attr.Type,
			recs:    make([]wqeRecord, b.sq.wqeCnt),
		}
		if b.attr.SignalAll {
			qp.sq.sigBits = ctrlCQUpdate
		}
	}
	if b.ctx.cqeVersion == cqeVersion1 {
		qp.rsn = b.cmd.Uidx
		b.ctx.t.uidx.set(qp.rsn, qp)
	} else {
		b.ctx.t.qps.set(c.QPNum, qp)
	}
	return qp, nil
}

// xrcRecvBuilder makes an XRC receive QP. The kernel creates an XRC_TGT
// QP without the driver data (ib_create_qp_user passes mlx5_ib no udata,
// so no buffer, doorbell record, UAR or user index reaches it), and the
// device gives it none: what arrives lands in the XRC SRQ each message
// names and completes on that SRQ's CQ, naming the SRQ. rdma-core
// allocates queues of zero entries and a UAR register all the same, and
// keeps the QP out of its tables (no user index; under CQE version 0 no
// queue to store it for); here there is nothing to allocate, and the QP
// is in no table either, so no CQE resolves to it and destroying it
// cleans no CQ.
type xrcRecvBuilder struct{ ctx *Context }

func (xrcRecvBuilder) Udata() (in, out []byte) { return nil, nil }
func (xrcRecvBuilder) Abort()                  {}

func (b xrcRecvBuilder) Finish(c provider.Created) (provider.QP, error) {
	return &QP{ctx: b.ctx, num: c.QPNum, rsn: c.QPNum, typ: qp.XRCRecv}, nil
}

// QP is an mlx5 queue pair.
type QP struct {
	ctx *Context
	num uint32
	// rsn is what the QP's CQEs name it by: its user index with CQE
	// version 1, else its number (rdma-core's rsc.rsn).
	rsn uint32
	srq *SRQ // the SRQ its receives come from, or nil
	typ qp.Type
	// An XRC receive QP has no queues, no register (bf nil) and no
	// memory; it posts nothing (EINVAL) and its Stop changes nothing.
	mem []byte
	// stopped: posts are refused (Stop, Close); set under both queues'
	// locks.
	stopped bool
	db      *[2]uint32 // doorbell record: receive counter, send counter (big-endian)
	bf      *bfReg
	// bfMax is the largest WQE, in bytes, a doorbell copies whole to the
	// BlueFlame register: the register's half, or 0 on register 0 or
	// without write combining. rdma-core copies inline WQEs always and
	// others when it prefers BlueFlame (MLX5_POST_SEND_PREFER_BF, on by
	// default); inlineBFOnly is that preference turned off.
	bfMax        uint32
	inlineBFOnly bool

	sqMu spinLock
	sq   *sendQueue
	rqMu spinLock
	rq   *recvQueue

	// batch is the open batch (provider.SendBatcher), under sqMu.
	batch struct {
		n       uint32         // requests written
		curPost uint32         // the post position it started at
		ctrl    unsafe.Pointer // the last request's control segment
		ds      uint32         // and its length in units
		inl     bool           // and whether it carries inline data
	}
}

// GrantedCaps returns the queues' sizes as libmlx5's mlx5_create_qp
// writes them back into ibv_qp_init_attr (provider.QueueSizer): what the
// queues let a post carry. max_send_wr is what the send ring holds of the
// largest WQE, max_inline_data what that WQE holds after its overhead,
// and the receive queue's count and SGEs are its power-of-two shape's.
func (qp *QP) GrantedCaps() (c qp.Caps) {
	if sq := qp.sq; sq != nil {
		c.MaxSendWR, c.MaxSendSGE, c.MaxInlineData = sq.maxPost, sq.maxGS, sq.maxInl
	}
	if rq := qp.rq; rq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = rq.maxPost, rq.maxGS
	}
	return c
}

// PostSend writes a WQE for each request, then publishes them all with
// one doorbell, as rdma-core's _mlx5_post_send and post_send_db do: the
// send counter goes into the doorbell record once the WQEs are visible to
// the device, then the doorbell rings through the QP's BlueFlame register.
// A single WQE of two or more units that fits a BlueFlame buffer is copied
// there whole; otherwise the doorbell is the last WQE's first eight bytes.
// The register's two halves are used alternately. (rdma-core stores the
// record before taking a shared register's lock; here the record store
// joins the doorbell in one call, under the lock, which orders the same.)
func (qp *QP) PostSend(wrs []wr.SendWR) (int, error) {
	// One request that plain passes, the shape of most posts (perftest's,
	// rdma_post_send's, a stream's), is posted here: no loop over a list,
	// and the doorbell written out rather than called (ring, which lists
	// and EndBatch call, is the same; a call here cost 3.5% per post
	// under QEMU's instruction counting).
	sq := qp.sq
	if len(wrs) != 1 || sq == nil || !sq.plain(&wrs[0]) {
		return qp.postList(wrs)
	}
	qp.sqMu.lock()
	if qp.stopped {
		qp.sqMu.unlock()
		return 0, provider.ErrStopped
	}
	if sq.overflow(0) {
		qp.sqMu.unlock()
		return 0, unix.ENOMEM
	}
	ctrl, ds, inl := sq.write(&wrs[0], nil, 0)
	sq.head++
	rec, raw := &qp.db[sndDBR], beWord32(sq.curPost&0xffff)
	bf := qp.bf
	if bf.mu != nil {
		bf.mu.lock()
	}
	dst := unsafe.Add(bf.reg, bf.offset)
	switch {
	case ds < 2 || ds*16 > qp.bfMax || (qp.inlineBFOnly && !inl):
		ringDoorbell(rec, raw, dst, *(*uint64)(ctrl))
	case ds*16 <= sendWQEBB:
		ringBlueFlame(rec, raw, dst, ctrl)
	default:
		qp.blueFlameLong(rec, raw, dst, ctrl, ds)
	}
	bf.offset ^= bf.bufSize
	if bf.mu != nil {
		bf.mu.unlock()
	}
	qp.sqMu.unlock()
	return 1, nil
}

// postList is PostSend of any other list: each request checked unless
// plain passes it, written, and all published with one doorbell.
func (qp *QP) postList(wrs []wr.SendWR) (int, error) {
	sq := qp.sq
	if sq == nil {
		if len(wrs) == 0 {
			return 0, nil
		}
		return 0, unix.EINVAL // created without a send queue
	}
	qp.sqMu.lock()
	if qp.stopped {
		qp.sqMu.unlock()
		return 0, provider.ErrStopped
	}
	var (
		ctrl unsafe.Pointer
		ds   uint32
		inl  bool
		err  error
		n    uint32
	)
	for i := range wrs {
		w := &wrs[i]
		var av *addressVector
		if !sq.plain(w) {
			var e error
			if av, e = sq.check(w); e != nil {
				err = e
				break
			}
		}
		if sq.overflow(n) {
			err = unix.ENOMEM
			break
		}
		ctrl, ds, inl = sq.write(w, av, n)
		n++
	}
	if n != 0 {
		qp.ring(n, ctrl, ds, inl)
	}
	qp.sqMu.unlock()
	return int(n), err
}

// ring publishes the n WQEs just written, the last of which, ds units long,
// starts at ctrl, and rings the doorbell, as PostSend does; the caller holds
// sqMu.
func (qp *QP) ring(n uint32, ctrl unsafe.Pointer, ds uint32, inl bool) {
	sq := qp.sq
	sq.head += n
	rec, raw := &qp.db[sndDBR], beWord32(sq.curPost&0xffff)
	bf := qp.bf
	if bf.mu != nil {
		bf.mu.lock()
	}
	dst := unsafe.Add(bf.reg, bf.offset)
	switch {
	case n != 1 || ds < 2 || ds*16 > qp.bfMax || (qp.inlineBFOnly && !inl):
		ringDoorbell(rec, raw, dst, *(*uint64)(ctrl))
	case ds*16 <= sendWQEBB:
		ringBlueFlame(rec, raw, dst, ctrl)
	default:
		qp.blueFlameLong(rec, raw, dst, ctrl, ds)
	}
	bf.offset ^= bf.bufSize
	if bf.mu != nil {
		bf.mu.unlock()
	}
}

// BeginBatch opens a batch: the send queue's lock stays held until
// EndBatch or AbortBatch.
func (qp *QP) BeginBatch() error {
	if qp.sq == nil {
		return unix.EINVAL // created without a send queue
	}
	qp.sqMu.lock()
	if qp.stopped {
		qp.sqMu.unlock()
		return provider.ErrStopped
	}
	qp.batch.n, qp.batch.curPost = 0, qp.sq.curPost
	return nil
}

// AddToBatch writes w's WQE after the batch's earlier ones. The device
// reads none of them before the doorbell record moves (EndBatch).
func (qp *QP) AddToBatch(w *wr.SendWR) error {
	sq := qp.sq
	var av *addressVector
	if !sq.plain(w) {
		var err error
		if av, err = sq.check(w); err != nil {
			return err
		}
	}
	if sq.overflow(qp.batch.n) {
		return unix.ENOMEM
	}
	b := &qp.batch
	b.ctrl, b.ds, b.inl = sq.write(w, av, b.n)
	b.n++
	return nil
}

// EndBatch publishes the batch's WQEs with one doorbell, as PostSend does,
// and closes the batch.
func (qp *QP) EndBatch() (int, error) {
	b := &qp.batch
	n := b.n
	if n > 0 {
		qp.ring(n, b.ctrl, b.ds, b.inl)
	}
	b.n, b.ctrl = 0, nil
	qp.sqMu.unlock()
	return int(n), nil
}

// AbortBatch closes the batch without publishing: the post position goes
// back to where the batch began, so the next post overwrites its WQEs.
func (qp *QP) AbortBatch() {
	b := &qp.batch
	qp.sq.curPost = b.curPost
	b.n, b.ctrl = 0, nil
	qp.sqMu.unlock()
}

// blueFlameLong rings the doorbell with a WQE of more than one block,
// copied block by block from the send queue, across its end.
func (qp *QP) blueFlameLong(rec *uint32, raw uint32, dst, src unsafe.Pointer, ds uint32) {
	sq := qp.sq
	storeRecord(rec, raw)
	wcFlush()
	for left := (ds*16 + sendWQEBB - 1) &^ (sendWQEBB - 1); left > 0; left -= sendWQEBB {
		mmioCopy64(dst, src)
		dst = unsafe.Add(dst, sendWQEBB)
		if src = unsafe.Add(src, sendWQEBB); src == sq.qend {
			src = sq.start
		}
	}
	wcFlush()
}

// PostRecv writes receive WQEs and publishes them in the doorbell record;
// the device reads it when a message arrives, so no doorbell rings.
func (qp *QP) PostRecv(wrs []wr.RecvWR) (int, error) {
	rq := qp.rq
	if rq == nil {
		if len(wrs) == 0 {
			return 0, nil
		}
		return 0, unix.EINVAL // receives go to the SRQ
	}
	qp.rqMu.lock()
	if qp.stopped {
		qp.rqMu.unlock()
		return 0, provider.ErrStopped
	}
	var err error
	var n uint32
	ind := rq.head & (rq.wqeCnt - 1)
	for i := range wrs {
		w := &wrs[i]
		if rq.overflow(n) {
			err = unix.ENOMEM
			break
		}
		if uint32(len(w.SGList)) > rq.maxGS {
			err = unix.EINVAL
			break
		}
		rq.write(ind, w)
		ind = (ind + 1) & (rq.wqeCnt - 1)
		n++
	}
	if n > 0 {
		rq.head += n
		publishRecord(&qp.db[rcvDBR], rq.head&0xffff)
	}
	qp.rqMu.unlock()
	return int(n), err
}

// Stop refuses every later post (provider.QP); taking both queues' locks
// waits for the posts under way.
func (qp *QP) Stop() { qp.setStopped(true) }

// Resume undoes Stop.
func (qp *QP) Resume() { qp.setStopped(false) }

func (qp *QP) setStopped(v bool) {
	qp.sqMu.lock()
	qp.rqMu.lock()
	if qp.mem != nil {
		qp.stopped = v
	}
	qp.rqMu.unlock()
	qp.sqMu.unlock()
}

// Close stops and forgets the QP, removes its completions from the context's CQs
// (they would otherwise name a QP number the kernel may reuse) and frees
// its memory, and gives back its register of a dynamic UAR. The core
// calls it after the kernel destroyed the QP.
func (qp *QP) Close() error {
	if qp.bf == nil {
		return nil // an XRC receive QP: nothing of its own (xrcRecvBuilder)
	}
	v1 := qp.ctx.cqeVersion == cqeVersion1
	if v1 {
		qp.ctx.t.uidx.remove(qp.rsn, qp)
	} else {
		qp.ctx.t.qps.remove(qp.num, qp)
	}
	cqs := qp.ctx.liveCQs()
	qp.sqMu.lock()
	defer qp.sqMu.unlock()
	qp.rqMu.lock()
	defer qp.rqMu.unlock()
	qp.stopped = true
	if qp.mem == nil {
		return nil
	}
	for _, cq := range cqs {
		cq.clean(qp)
	}
	uidx := uint32(defaultUIDX)
	if v1 {
		uidx = qp.rsn // no CQE names it any more
	}
	err := qp.ctx.freeQueue(qp.mem, unsafe.Pointer(qp.db), uidx)
	qp.mem, qp.db = nil, nil
	if u := qp.bf.uar; u != nil {
		// The kernel no longer names the UAR in a QP: give the register
		// back, and the UAR when it was its last user.
		if e := qp.ctx.putUAR(u, qp.bf); e != nil && err == nil {
			err = e
		}
	}
	return err
}
