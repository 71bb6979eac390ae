package mlx5

import (
	"fmt"
	"math/rand/v2"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

type srqBuilder struct {
	queueBuf
	size srqSize
	xrc  bool
	cmd  abi.Mlx5IbCreateSrq
	resp abi.Mlx5IbCreateSrqResp
}

// NewSRQ allocates the SRQ buffer with its WQEs linked into a free list
// and a doorbell record, and returns the builder whose driver data
// (struct mlx5_ib_create_srq) names them. An XRC SRQ is laid out as a
// basic one (mlx5_create_srq_ex); under CQE version 1 the kernel requires
// its user index (get_srq_user_index), which its receive completions
// carry in place of a QP's.
func (c *Context) NewSRQ(attr provider.SRQInitAttr) (provider.Builder[provider.SRQ], error) {
	size, err := calcSRQ(&c.lim, attr)
	if err != nil {
		return nil, fmt.Errorf("mlx5: SRQ for %+v: %w", attr, err)
	}
	q, err := c.allocQueue("SRQ", int(size.bytes), true)
	if err != nil {
		return nil, err
	}
	b := &srqBuilder{queueBuf: q, size: size, xrc: attr.XRC}
	b.cmd.Buf_addr = addrOf(q.mem)
	b.cmd.Db_addr = uint64(uintptr(q.db))
	b.cmd.Uidx = q.uidx
	return b, nil
}

func (b *srqBuilder) Udata() (in, out []byte) { return bytesOf(&b.cmd), bytesOf(&b.resp) }

func (b *srqBuilder) Abort() { b.free() }

func (b *srqBuilder) Finish(c provider.Created) (provider.SRQ, error) {
	if b.resp.Srqn == 0 || b.resp.Srqn > cqeSrqnUidxMask {
		b.Abort()
		return nil, fmt.Errorf("mlx5: kernel answered SRQ number %#x: %w", b.resp.Srqn, unix.EPROTO)
	}
	s := &SRQ{ctx: b.ctx, num: b.resp.Srqn, uidx: b.cmd.Uidx, xrc: b.xrc, mem: b.mem, db: (*uint32)(b.db)}
	s.ring = srqRing{
		start:    unsafe.Pointer(&b.mem[0]),
		wqeShift: b.size.wqeShift,
		nwqe:     b.size.nwqe,
		maxGS:    b.size.maxGS,
		limitGS:  limit(b.size.maxGS, c.Caps.MaxRecvSGE),
		wrid:     make([]uint64, b.size.nwqe),
	}
	s.ring.link()
	b.ctx.t.srqs.set(s.num, s)
	if s.xrc && s.uidx != defaultUIDX {
		b.ctx.t.xsrqs.set(s.uidx, s)
	}
	return s, nil
}

// SRQ is an mlx5 shared receive queue.
type SRQ struct {
	ctx  *Context
	num  uint32
	uidx uint32 // its user index (CQE version 1), else MLX5_IB_DEFAULT_UIDX
	xrc  bool   // an XRC SRQ: its receive CQEs name it, not a QP of ours
	mu   spinLock
	mem  []byte
	db   *uint32 // doorbell record: WQEs posted (big-endian)
	ring srqRing
}

// PostRecv takes WQEs off the free list for the requests and publishes
// the new count in the doorbell record (mlx5_post_srq_recv).
func (s *SRQ) PostRecv(wrs []wr.RecvWR) (int, error) {
	s.mu.lock()
	defer s.mu.unlock()
	if s.mem == nil {
		return 0, errClosed
	}
	var err error
	var n uint32
	for i := range wrs {
		w := &wrs[i]
		if uint32(len(w.SGList)) > s.ring.limitGS {
			err = unix.EINVAL
			break
		}
		if s.ring.full() {
			err = unix.ENOMEM
			break
		}
		s.ring.write(w)
		n++
	}
	if n > 0 {
		s.ring.counter += n
		publishRecord(s.db, s.ring.counter&0xffff) // a 16-bit counter, as rdma-core's
	}
	return int(n), err
}

// complete takes the ID of the WQE a receive completion names and gives
// the WQE back to the free list.
func (s *SRQ) complete(wqeCounter uint16, c *wr.Completion) {
	s.mu.lock()
	c.ID = s.ring.wrid[uint32(wqeCounter)&(s.ring.nwqe-1)]
	s.ring.free(wqeCounter)
	s.mu.unlock()
}

// release gives a WQE back without a completion (its CQE was cleaned).
func (s *SRQ) release(wqeCounter uint16) {
	s.mu.lock()
	if s.mem != nil {
		s.ring.free(wqeCounter)
	}
	s.mu.unlock()
}

// Close forgets the SRQ and frees its memory; the kernel destroyed it.
// An XRC SRQ's receive completions still in the context's CQs go too
// (CQ.cleanXRC): they would otherwise name an index or number the next
// SRQ or QP may take. A basic SRQ's completions name QPs, which the
// kernel refuses to outlive it, and went with them.
func (s *SRQ) Close() error {
	s.ctx.t.srqs.remove(s.num, s)
	if s.xrc {
		if s.uidx != defaultUIDX {
			s.ctx.t.xsrqs.remove(s.uidx, s)
		}
		for _, cq := range s.ctx.liveCQs() {
			cq.cleanXRC(s)
		}
	}
	s.mu.lock()
	defer s.mu.unlock()
	if s.mem == nil {
		return nil
	}
	err := s.ctx.freeQueue(s.mem, unsafe.Pointer(s.db), s.uidx)
	s.mem, s.db = nil, nil
	return err
}

// Address handles

type ahBuilder struct {
	attr qp.AHAttr
	resp abi.Mlx5IbCreateAhResp
}

// NewAH prepares an address handle. mlx5 builds the address vector in
// user space; the kernel's answer (struct mlx5_ib_create_ah_resp) carries
// the destination MAC, and it answers only on Ethernet (RoCE) ports,
// which is how the provider tells RoCE from InfiniBand.
func (c *Context) NewAH(attr qp.AHAttr) (provider.Builder[provider.AH], error) {
	return &ahBuilder{attr: attr}, nil
}

func (b *ahBuilder) Udata() (in, out []byte) { return nil, bytesOf(&b.resp) }
func (b *ahBuilder) Abort()                  {}

func (b *ahBuilder) Finish(provider.Created) (provider.AH, error) {
	eth := b.resp.Response_length != 0
	if eth && !b.attr.IsGlobal {
		return nil, fmt.Errorf("mlx5: a RoCE address handle needs a GRH: %w", unix.EINVAL)
	}
	var sport uint16
	if eth {
		sport = udpSport(b.attr.FlowLabel)
	}
	return &AH{av: makeAV(&b.attr, eth, b.resp.Dmac, sport)}, nil
}

// AH is an mlx5 address handle: the address vector UD WQEs carry.
type AH struct{ av addressVector }

// rateTable maps enum ibv_rate to the device's static rate codes
// (rdma-core's ib_to_mlx5_rate_table).
var rateTable = [...]uint8{0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0}

func mlx5Rate(r uint8) uint8 {
	if int(r) < len(rateTable) {
		return rateTable[r]
	}
	return 0
}

// makeAV builds an address vector as rdma-core's mlx5_create_ah does. On
// RoCE the rlid field carries the UDP source port (RoCE v2) and the SL
// takes three bits; on InfiniBand the vector has the LID, path bits and a
// four-bit SL, and sets the GRH bit when the address is global.
func makeAV(a *qp.AHAttr, eth bool, dmac [6]byte, sport uint16) addressVector {
	var (
		v                addressVector
		rateSL, flMLID   uint8
		rlid             uint16
		rmac             [6]byte
		tclass, hopLimit uint8
		grhGidFl         uint32
		rgid             [16]byte
		grh              uint32
		rate             = mlx5Rate(a.StaticRate)
	)
	if eth {
		rlid = sport
		rateSL = rate<<4 | (a.SL&7)<<1
		rmac = dmac
	} else {
		flMLID = a.SrcPathBits & 0x7f
		rlid = a.DLID
		grh = 1
		rateSL = rate<<4 | a.SL&0xf
	}
	if a.IsGlobal {
		tclass, hopLimit = a.TrafficClass, a.HopLimit
		grhGidFl = grh<<30 | uint32(a.SGIDIndex)<<20 | a.FlowLabel&grhFlowLabelMask
		rgid = a.DGID
	}
	// The key and destination QP are the request's, set per WQE.
	setDgramSeg(unsafe.Pointer(&v), 0, 0, 0, rateSL, flMLID, rlid, &rmac, tclass, hopLimit, grhGidFl, &rgid)
	return v
}

// udpSport picks a RoCE v2 UDP source port: from the flow label when there
// is one (ibv_flow_label_to_udp_sport), else at random in the range the
// RoCE v2 spec sets aside, as rdma-core does.
func udpSport(flowLabel uint32) uint16 {
	if fl := flowLabel & grhFlowLabelMask; fl != 0 {
		low, high := fl&0x03fff, fl&0xfc000
		low ^= high >> 14
		return uint16(low | roceUDPEncapPortMin)
	}
	return uint16(roceUDPEncapPortMin + rand.IntN(roceUDPEncapPortMax+1-roceUDPEncapPortMin))
}
