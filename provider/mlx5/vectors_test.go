package mlx5

import (
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// The types of the golden vectors in zvectors_test.go, which
// hack/mlx5gen/gen.c writes from rdma-core's mlx5dv.h (make
// generate-mlx5). Buffers a vector shows were filled with a pattern first
// (prefillPattern), so the vectors also say which bytes an operation
// leaves alone.

type ctrlVector struct {
	pi                    uint16
	opcode, opmod         uint8
	qpn                   uint32
	fmCeSe, ds, signature uint8
	imm                   uint32
	want                  [16]byte
}

type dataVector struct {
	length, lkey uint32
	addr         uint64
	want         [16]byte
}

type raddrVector struct {
	raddr uint64
	rkey  uint32
	want  [16]byte
}

type atomicVector struct {
	opcode           wr.Opcode
	swap, compareAdd uint64
	want             [16]byte
}

type dgramVector struct {
	key                 uint64
	dqp                 uint32
	ext, rateSL, flMLID uint8
	rlid                uint16
	tclass, hopLimit    uint8
	grhGidFl            uint32
	rmac                [6]byte
	rgid                [16]byte
	want                [48]byte
}

type avVector struct {
	name  string
	eth   bool
	sport uint16
	attr  qp.AHAttr
	dmac  [6]byte
	want  [48]byte
}

type sgeVector struct {
	addr         uint64
	length, lkey uint32
}

type wrVector struct {
	id                    uint64
	opcode                wr.Opcode
	flags                 wr.SendFlags
	imm                   uint32
	remoteAddr            uint64
	rkey                  uint32
	compareAdd, swap      uint64
	remoteQPN, remoteQKey uint32
	av                    int // index into avVectors, for UD
	sges                  []sgeVector
	inline                [][]byte // the data of inline SGEs
	wantDS, wantPost      uint32
}

type wqeVector struct {
	name                   string
	qpType                 qp.Type
	qpn, wqeCnt, startPost uint32
	sigAll                 bool
	prefill                int
	wrs                    []wrVector
	want                   []byte // the whole send queue after the posts
}

type recvVector struct {
	name     string
	wqeShift uint32
	prefill  int
	sges     []sgeVector
	want     []byte
}

type cqeVector struct {
	name     string
	ok       bool
	cqe      [64]byte
	want     wr.Completion
	sqTail   uint32
	rqTail   uint32
	srqFreed int
	ts       uint64 // the completion's timestamp on a CQ that asked for them
}

// tsToNSVector is one conversion of mlx5dv_ts_to_ns.
type tsToNSVector struct {
	info   clockInfo
	ts, ns uint64
}

// cqe128Poll is one poll of the 128-byte CQE ring: the offset of the
// 64-byte CQE software owns at consumer index n (-1: none) and the
// cqeVectors case it holds.
type cqe128Poll struct {
	n    uint32
	off  int
	name string
}

type ownerVector struct {
	opOwn                     uint8
	n, ncqe                   uint32
	owned                     bool
	owner, opcode, se, format uint8
}

type sizeVector struct {
	name        string
	qpType      qp.Type
	caps        qp.Caps
	hasSRQ, err bool
	sq          sqSize
	rq          rqSize
}

type srqSizeVector struct {
	attr provider.SRQInitAttr
	err  bool
	want srqSize
}

// prefillPattern fills b as gen.c's prefill does.
func prefillPattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}
