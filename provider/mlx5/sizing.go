package mlx5

import (
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
)

// Queue sizing, as rdma-core's verbs.c computes it (mlx5_calc_sq_size,
// mlx5_calc_rq_size, mlx5_alloc_srq_buf) from the device limits the
// context response carries. The kernel checks the user buffer against the
// counts in the create request, and the shape of the queues must be
// rdma-core's for a peer or the kernel to see nothing unusual.

// limits are the device's queue limits (struct mlx5_ib_alloc_ucontext_resp).
type limits struct {
	maxSQDescSz  uint32 // bytes in a send WQE
	maxRQDescSz  uint32 // bytes in a receive WQE
	maxSendWQEBB uint32 // BBs in a send queue
	maxRecvWR    uint32
	maxSRQRecvWR uint32
}

// sqOverhead is the part of a send WQE before its data segments, for the
// largest operation the QP type allows (rdma-core's sq_overhead with the
// default send_ops_flags): RC and UC reserve room for a memory-window bind
// (control, UMR control, mkey context and a 64-byte KLM area), UD for the
// datagram segment, XRC send QPs RC's and the XRC segment.
func sqOverhead(t qp.Type) (uint32, error) {
	switch t {
	case qp.RC, qp.UC, qp.XRCSend:
		size := uint32(ctrlSegSize)
		size = max(size, ctrlSegSize+raddrSegSize)
		size = max(size, ctrlSegSize+raddrSegSize+atomicSegSize)
		size = max(size, ctrlSegSize+umrCtrlSegSize+mkeyCtxSegSize+max(umrKLMSegSize, 64))
		if t == qp.XRCSend {
			size += xrcSegSize // the target SRQ's number, after the control segment
		}
		return size, nil
	case qp.UD:
		return ctrlSegSize + datagramSize, nil
	}
	return 0, unix.EINVAL
}

// sqSize is a send queue's shape.
type sqSize struct {
	wqeSize   uint32 // bytes in the largest WQE, a multiple of 64
	wqeCnt    uint32 // BBs in the ring
	maxPost   uint32 // WRs outstanding at most
	maxGS     uint32
	maxInline uint32
	bytes     uint32
}

func calcSQ(l *limits, t qp.Type, c qp.Caps) (sqSize, error) {
	if c.MaxSendWR == 0 {
		return sqSize{}, nil
	}
	over, err := sqOverhead(t)
	if err != nil {
		return sqSize{}, err
	}
	size := over
	var inlSize uint32
	if c.MaxInlineData > 0 {
		inlSize = size + uint32(alignUp(int(inlineHdrSize+c.MaxInlineData), 16))
	}
	if l.maxSQDescSz < size || c.MaxSendSGE > (l.maxSQDescSz-size)/dataSegSize {
		return sqSize{}, unix.EINVAL
	}
	size += c.MaxSendSGE * dataSegSize
	tot := max(size, inlSize)
	if tot > l.maxSQDescSz {
		return sqSize{}, unix.EINVAL
	}
	wqeSize := uint32(alignUp(int(tot), sendWQEBB))
	if wqeSize > l.maxSQDescSz {
		return sqSize{}, unix.EINVAL
	}
	if uint64(c.MaxSendWR) > 0x7fffffff/uint64(l.maxSQDescSz) {
		return sqSize{}, unix.EINVAL
	}
	wqSize := roundUpPow2(c.MaxSendWR * wqeSize)
	s := sqSize{
		wqeSize:   wqeSize,
		wqeCnt:    wqSize / sendWQEBB,
		maxPost:   wqSize / wqeSize,
		maxGS:     c.MaxSendSGE,
		maxInline: wqeSize - over - inlineHdrSize,
		bytes:     wqSize,
	}
	if s.wqeCnt > l.maxSendWQEBB {
		return sqSize{}, unix.EINVAL
	}
	return s, nil
}

// rqSize is a receive queue's shape.
type rqSize struct {
	wqeCnt   uint32
	wqeShift uint32
	maxPost  uint32
	maxGS    uint32
	bytes    uint32
}

func calcRQ(l *limits, c qp.Caps, hasSRQ bool) (rqSize, error) {
	if c.MaxRecvWR == 0 {
		return rqSize{}, nil
	}
	if c.MaxRecvWR > l.maxRecvWR {
		return rqSize{}, unix.EINVAL
	}
	if hasSRQ {
		return rqSize{}, nil // receives come from the SRQ: no WQEs here
	}
	wqeSize := max(c.MaxRecvSGE, 1) * dataSegSize
	if wqeSize > l.maxRQDescSz {
		return rqSize{}, unix.EINVAL
	}
	wqeSize = roundUpPow2(wqeSize)
	if wqeSize > l.maxRQDescSz {
		return rqSize{}, unix.EINVAL
	}
	wqSize := max(roundUpPow2(c.MaxRecvWR)*wqeSize, sendWQEBB)
	cnt := wqSize / wqeSize
	return rqSize{
		wqeCnt:   cnt,
		wqeShift: ilog2(wqeSize),
		maxPost:  cnt,
		maxGS:    wqeSize / dataSegSize,
		bytes:    wqSize,
	}, nil
}

// srqSize is a shared receive queue's shape. rdma-core doubles the ring
// for a "wait queue" of WQEs that hit on-demand-paging faults when the
// device allows; this provider keeps the plain ring the kernel sizes for
// the max_wr it is sent (the kernel's msrq.max is roundup_pow_of_two(max_wr
// + 1), which is this nwqe), so the two agree on the buffer.
type srqSize struct {
	wqeShift uint32
	nwqe     uint32
	maxGS    uint32
	bytes    uint32
}

func calcSRQ(l *limits, a provider.SRQInitAttr) (srqSize, error) {
	if a.MaxWR > l.maxSRQRecvWR || a.MaxSGE > l.maxRQDescSz/dataSegSize {
		return srqSize{}, unix.EINVAL
	}
	size := max(srqNextSegSize+a.MaxSGE*dataSegSize, 32)
	size = roundUpPow2(size)
	if size > l.maxRecvWR { // as rdma-core checks it
		return srqSize{}, unix.EINVAL
	}
	nwqe := roundUpPow2(a.MaxWR + 1)
	return srqSize{
		wqeShift: ilog2(size),
		nwqe:     nwqe,
		maxGS:    (size - srqNextSegSize) / dataSegSize,
		bytes:    nwqe * size,
	}, nil
}
