//go:build linux && amd64

// Command goscen is the Go half of mlx5cmp's scenario. It runs rdmago's
// mlx5 provider, through the module's public packages only (uverbs, qp, wr,
// mr), through a fixed sequence of verbs on mlx5_0, under mlx5cmp's fake
// mlx5 kernel, and tells the supervisor where it is with markers written to
// descriptor 899 (see scen.Mark). The steps: RC requests of every kind on
// the setup's QP, then, each on fresh objects, every CQE error syndrome, a
// receive error, CQ arming, UC, UD with an address handle, the batch API
// (QP.BeginSend) and an SRQ.
//
// Its C twin is hack/mlx5cmp/scenario/rc.c: the two must perform the SAME
// calls in the SAME order with the SAME arguments and print the same
// markers, so their transcripts can be diffed line by line. Change one and
// you must change the other; the functions have the same names (in Go
// case) and order in both files so they can be compared by eye. What the
// Go programs share (the markers, the setup and teardown, the completion
// lines) is in package scen, as what the C programs share is in common.c.
//
//	CGO_ENABLED=0 go build -o bin/mlx5cmp/scenario-go ./hack/mlx5cmp/scenario/goscen
//	mlx5cmp run -profile hack/mlx5cmp/testdata/cx6.json -o /tmp/go.txt -- bin/mlx5cmp/scenario-go all
//
// Usage: scenario-go SCENARIO, SCENARIO one of the names in scenarios below
// or "all". Outside the supervisor the first marker fails with EBADF and
// the program exits 2; without the device it exits 2 too.
//
// Conventions shared with the C side:
//   - wr_id = step id << 16 | index; receives use index 0x8000 + i.
//   - every number in a marker is printed as decimal or as "0x%x" (never
//     "%#x": C prints 0 as "0", Go as "0x0").
//   - wc lines print ibv_wc's fields with ibv_wc's numeric values
//     (scen.WCStatus, WCOpcode, WCFlags map wr's types to them; common.c
//     checks the same numbers against verbs.h with _Static_assert); the
//     completion array is zeroed before every poll, as the C side zeroes
//     its ibv_wc array, so fields a provider does not write print as 0 on
//     both sides.
//   - imm is printed as ibv_wc carries it: the raw __be32 imm_data read as
//     a host uint32 (so, on a little-endian host, immediate 0x12345678
//     prints as 0x78563412). wr.Completion.Imm is host order, so
//     scen.WCImm converts it back. An invalidated rkey (WCWithInv) is host
//     order in ibv_wc too and printed as is.
//   - "ret NAME=N" is an errno (0 for success), except the cap.* lines of
//     the setup step, which carry the queue sizes the create granted.
package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/hack/mlx5cmp/scenario/scen"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	wrapBatch = 10
	// 1100 one-SGE writes: the QP's send queue is not 64 WQE basic
	// blocks. With max_send_sge 4 and max_inline_data 128, libmlx5 (and
	// provider/mlx5's calcSQ) sizes an RC WQE at 384 bytes (192 of
	// overhead for a bind, then 132 bytes of inline data) and the ring at
	// roundup_pow2(64 * 384) = 32 KiB = 512 BBs, granting max_send_wr 85.
	// A one-SGE write takes one BB, so it takes more than 1024 of them to
	// wrap the ring twice (150 would not wrap it once).
	wrapWrites = 1100
	grhSize    = 40 // a UD receive starts with the GRH (or its room)
)

// Step ids: the high bits of wr_id.
const (
	idSendSGE1    = 1
	idSendImm     = 2
	idWriteSGE0   = 3
	idWriteSGE1   = 4
	idWriteSGE2   = 5
	idWriteSGE4   = 6
	idWriteImm    = 7
	idRead        = 8
	idAtomicCAS   = 9
	idAtomicFAdd  = 10
	idInlineSend  = 11 // + index of the length in inlineLens
	idInlineWrite = 16 // + index of the length in inlineLens
	idUnsignaled  = 21
	idFence       = 22
	idSolicited   = 23
	idWrap        = 24
	idFull        = 25
	idError       = 26
	idErrorSynd   = 27
	idErrorRecv   = 28
	idArm         = 29
	idUCSend      = 30
	idUCWrite     = 31
	idUCWriteImm  = 32
	idUDSend      = 33
	idUDSendImm   = 34
	idBatch       = 35
	idBatchAbort  = 36
	idSRQ         = 37
	idXRC         = 38
	srqRounds     = 4
	srqPerRound   = 5
)

func wrid(id, index uint64) uint64 { return id<<16 | index }

func recvid(id, i uint64) uint64 { return wrid(id, 0x8000+i) }

// ---- completions ----

// drain polls until expect completions have come, 16 at a time, at most
// scen.MaxPolls times, then polls once more (which should find nothing).
// Polls that find nothing while waiting are not reported, so that the
// transcript does not depend on when the device writes its CQEs; every
// other poll is.
func drain(expect int) {
	wc := make([]wr.Completion, scen.PollBatch)
	got := 0
	for polls := 0; got < expect && polls < scen.MaxPolls; polls++ {
		clear(wc)
		n, err := scen.CQ.Poll(wc)
		if err != nil {
			scen.Mark("ret poll_error=1")
			return
		}
		if n == 0 {
			continue
		}
		scen.Mark("poll n=%d", n)
		for i := range n {
			scen.EmitWC(&wc[i])
		}
		got += n
	}
	if got < expect {
		scen.Mark("ret poll_timeout=%d", scen.ETIMEDOUT)
	}
	clear(wc)
	n, err := scen.CQ.Poll(wc)
	if err != nil {
		scen.Mark("ret poll_error=1")
		return
	}
	scen.Mark("poll n=%d", n)
	for i := range n {
		scen.EmitWC(&wc[i])
	}
}

// ---- work requests ----

// sge0 is len bytes at off in buffer 0.
func sge0(off, n int) wr.SGE { return scen.MR0.SGE(off, n) }

// remote1 is the address of off in buffer 1, as a peer would target it.
func remote1(off uint64) uint64 { return scen.MR1.Addr() + off }

// postSend posts wrs in one call, then marks it posted.
func postSend(wrs []wr.SendWR) {
	if _, err := scen.QP.PostSend(wrs); err != nil {
		scen.Fail("post_send", err)
	}
	scen.Mark("posted")
}

// postRecv posts one receive of n bytes at off in buffer 1.
func postRecv(id uint64, off, n int) {
	rwr := []wr.RecvWR{{ID: id, SGList: []wr.SGE{scen.MR1.SGE(off, n)}}}
	if _, err := scen.QP.PostRecv(rwr); err != nil {
		scen.Fail("post_recv", err)
	}
	scen.Mark("posted")
}

// writeWR is a signalled RDMA write of sg to off in buffer 1.
func writeWR(id uint64, sg []wr.SGE, off uint64) wr.SendWR {
	return wr.SendWR{
		ID:     id,
		SGList: sg,
		Opcode: wr.OpRDMAWrite,
		Flags:  wr.Signaled,
		Remote: wr.Remote{Addr: remote1(off), RKey: scen.MR1.RKey()},
	}
}

// ---- scenarios ----

// 1. rc.send.sge1: a receive of 256 bytes, then a signalled SEND of 64.
func scenSend() {
	scen.Mark("step rc.send.sge1")
	postRecv(recvid(idSendSGE1, 0), 0, 256)
	postSend([]wr.SendWR{{
		ID:     wrid(idSendSGE1, 0),
		SGList: []wr.SGE{sge0(0, 64)},
		Opcode: wr.OpSend,
		Flags:  wr.Signaled,
	}})
	scen.Mark("complete")
	drain(2)
}

// 2. rc.send_imm: SEND with immediate 0x12345678 into a posted receive.
func scenSendImm() {
	scen.Mark("step rc.send_imm")
	postRecv(recvid(idSendImm, 0), 0x100, 256)
	postSend([]wr.SendWR{{
		ID:     wrid(idSendImm, 0),
		SGList: []wr.SGE{sge0(0x40, 32)},
		Opcode: wr.OpSendWithImm,
		Flags:  wr.Signaled,
		Imm:    0x12345678, // host order; rc.c: htonl(0x12345678)
	}})
	scen.Mark("complete")
	drain(2)
}

// 3. rc.write.sge{0,1,2,4}: RDMA writes of 0, 1, 2 and 4 SGEs.
func scenWrite() {
	scen.Mark("step rc.write.sge0")
	w := writeWR(wrid(idWriteSGE0, 0), nil, 0)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(1)

	scen.Mark("step rc.write.sge1")
	s1 := []wr.SGE{sge0(0, 100)}
	w = writeWR(wrid(idWriteSGE1, 0), s1, 0x100)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(1)

	scen.Mark("step rc.write.sge2")
	s2 := []wr.SGE{sge0(3, 17), sge0(0x200, 300)}
	w = writeWR(wrid(idWriteSGE2, 0), s2, 0x1000)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(1)

	scen.Mark("step rc.write.sge4")
	s4 := []wr.SGE{sge0(0x10, 1), sge0(0x400, 64), sge0(0x1003, 1000),
		sge0(0x3000, 4096)}
	w = writeWR(wrid(idWriteSGE4, 0), s4, 0x2000)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(1)
}

// 4. rc.write_imm: RDMA WRITE WITH IMM, consuming a posted receive.
func scenWriteImm() {
	scen.Mark("step rc.write_imm")
	postRecv(recvid(idWriteImm, 0), 0x800, 256)
	w := writeWR(wrid(idWriteImm, 0), []wr.SGE{sge0(0x80, 128)}, 0x3000)
	w.Opcode = wr.OpRDMAWriteWithImm
	w.Imm = 0x9abcdef0 // host order; rc.c: htonl(0x9abcdef0)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(2)
}

// 5. rc.read: RDMA READ of 512 bytes from buffer 1 into buffer 0.
func scenRead() {
	scen.Mark("step rc.read")
	postSend([]wr.SendWR{{
		ID:     wrid(idRead, 0),
		SGList: []wr.SGE{sge0(0x4000, 512)},
		Opcode: wr.OpRDMARead,
		Flags:  wr.Signaled,
		Remote: wr.Remote{Addr: remote1(0x4000), RKey: scen.MR1.RKey()},
	}})
	scen.Mark("complete")
	drain(1)
}

// 6. rc.atomic.cas and rc.atomic.fadd: 8 bytes at 8-aligned addresses.
func scenAtomic() {
	scen.Mark("step rc.atomic.cas")
	postSend([]wr.SendWR{{
		ID:         wrid(idAtomicCAS, 0),
		SGList:     []wr.SGE{sge0(0x5000, 8)},
		Opcode:     wr.OpAtomicCmpAndSwp,
		Flags:      wr.Signaled,
		Remote:     wr.Remote{Addr: remote1(0x5000), RKey: scen.MR1.RKey()},
		CompareAdd: 0,
		Swap:       0x1122334455667788,
	}})
	scen.Mark("complete")
	drain(1)

	scen.Mark("step rc.atomic.fadd")
	postSend([]wr.SendWR{{
		ID:         wrid(idAtomicFAdd, 0),
		SGList:     []wr.SGE{sge0(0x5008, 8)},
		Opcode:     wr.OpAtomicFetchAdd,
		Flags:      wr.Signaled,
		Remote:     wr.Remote{Addr: remote1(0x5008), RKey: scen.MR1.RKey()},
		CompareAdd: 0x10,
	}})
	scen.Mark("complete")
	drain(1)
}

// 7. rc.inline.send.N and rc.inline.write.N: signalled inline SENDs (each
// into a posted receive) and inline RDMA writes of N bytes, one SGE each
// (of length 0 for N = 0).
var inlineLens = [5]int{0, 1, 16, 64, 128}

func scenInline() {
	for i, n := range inlineLens {
		scen.Mark("step rc.inline.send.%d", n)
		postRecv(recvid(idInlineSend+uint64(i), 0), 0x6000, 256)
		postSend([]wr.SendWR{{
			ID:     wrid(idInlineSend+uint64(i), 0),
			SGList: []wr.SGE{sge0(0x100, n)},
			Opcode: wr.OpSend,
			Flags:  wr.Signaled | wr.Inline,
		}})
		scen.Mark("complete")
		drain(2)
	}
	for i, n := range inlineLens {
		scen.Mark("step rc.inline.write.%d", n)
		w := writeWR(wrid(idInlineWrite+uint64(i), 0), []wr.SGE{sge0(0x200, n)}, 0x7000)
		w.Flags |= wr.Inline
		postSend([]wr.SendWR{w})
		scen.Mark("complete")
		drain(1)
	}
}

// 8. rc.unsignaled: one post of 4 writes, only the last signalled.
func scenUnsignaled() {
	scen.Mark("step rc.unsignaled")
	w := make([]wr.SendWR, 4)
	for i := range uint64(4) {
		w[i] = writeWR(wrid(idUnsignaled, i), []wr.SGE{sge0(64*int(i), 64)}, 0x8000+64*i)
		if i < 3 {
			w[i].Flags = 0
		}
	}
	postSend(w)
	scen.Mark("complete")
	drain(1)
}

// 9a. rc.fence: a signalled write with wr.Fence.
func scenFence() {
	scen.Mark("step rc.fence")
	w := writeWR(wrid(idFence, 0), []wr.SGE{sge0(0, 64)}, 0x9000)
	w.Flags |= wr.Fence
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(1)
}

// 9b. rc.solicited: a signalled SEND with wr.Solicited.
func scenSolicited() {
	scen.Mark("step rc.solicited")
	postRecv(recvid(idSolicited, 0), 0x9100, 256)
	postSend([]wr.SendWR{{
		ID:     wrid(idSolicited, 0),
		SGList: []wr.SGE{sge0(0x20, 16)},
		Opcode: wr.OpSend,
		Flags:  wr.Signaled | wr.Solicited,
	}})
	scen.Mark("complete")
	drain(2)
}

// 10. rc.wrap.K: wrapWrites signalled one-SGE writes of 32 bytes, in posts
// of wrapBatch, each drained before the next, so the send queue and the CQ
// wrap (twice, see wrapWrites). One step per batch.
func scenWrap() {
	for b := range uint64(wrapWrites / wrapBatch) {
		scen.Mark("step rc.wrap.%d", b)
		w := make([]wr.SendWR, wrapBatch)
		for i := range uint64(wrapBatch) {
			k := b*wrapBatch + i
			w[i] = writeWR(wrid(idWrap, k), []wr.SGE{sge0(32*int(k%64), 32)}, 0xa000+32*(k%64))
		}
		postSend(w)
		scen.Mark("complete")
		drain(wrapBatch)
	}
}

// 11. rc.full: one post of max_send_wr + 1 signalled 8-byte writes (the
// granted max_send_wr, not the 64 asked for: see wrapWrites) on the empty
// queue. The last is refused with ENOMEM; the ones before it are posted.
func scenFull() {
	scen.Mark("step rc.full")
	n := int(scen.Caps.MaxSendWR) + 1
	w := make([]wr.SendWR, n)
	for i := range w {
		w[i] = writeWR(wrid(idFull, uint64(i)), []wr.SGE{sge0(8*i, 8)}, 0xc000+8*uint64(i))
	}
	posted, err := scen.QP.PostSend(w)
	bad := -1
	var pe *uverbs.PostError
	if errors.As(err, &pe) {
		bad = pe.Index
	} else if err != nil {
		bad = posted // not a PostError: the first one not posted
	}
	scen.Mark("posted")
	scen.Mark("ret post_overflow=%d", scen.ErrnoOf(err))
	scen.Mark("ret bad_wr_index=%d", bad)
	scen.Mark("complete")
	drain(posted)
}

// 12. rc.error: a signalled write that the device completes with WR_FLUSH_ERR.
func scenError() {
	scen.Mark("step rc.error")
	w := writeWR(wrid(idError, 0), []wr.SGE{sge0(0, 64)}, 0xd000)
	postSend([]wr.SendWR{w})
	scen.Mark("complete error=0x05")
	drain(1)
}

// 13. rc.error.synd.0xSS: every CQE syndrome the drivers decode (enum
// mlx5_cqe_syndrome), and one they do not (0x7f, which both map to
// IBV_WC_GENERAL_ERR). A request in error takes its QP to ERR, so each
// syndrome gets a fresh QP (on the common CQ): one post of two signalled
// writes; the device fails the first with the syndrome and flushes the
// second (WR_FLUSH_ERR). The functions below swap the QP the helpers post
// on (scen.QP) for the step and restore it.
var errSynds = [...]uint8{0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11,
	0x12, 0x13, 0x14, 0x15, 0x16, 0x22, 0x7f}

func scenErrorSynd() {
	mainQP := scen.QP
	for i, synd := range errSynds {
		scen.Mark("step rc.error.synd.0x%x", synd)
		scen.QP = scen.NewQP(qp.RC, scen.CQ, false)
		i := uint64(i)
		postSend([]wr.SendWR{
			writeWR(wrid(idErrorSynd, 2*i), []wr.SGE{sge0(0, 64)}, 0xd100),
			writeWR(wrid(idErrorSynd, 2*i+1), []wr.SGE{sge0(64, 64)}, 0xd140),
		})
		scen.Mark("complete error=0x%x", synd)
		drain(2)
		scen.DestroyQP(scen.QP)
	}
	scen.QP = mainQP
}

// 14. rc.error.recv: a SEND of 64 bytes into a receive of 16 on a fresh
// QP: the device completes the receive with LOCAL_LENGTH_ERR (a responder
// error CQE) and the send with REMOTE_INVAL_REQ_ERR.
func scenErrorRecv() {
	scen.Mark("step rc.error.recv")
	mainQP := scen.QP
	scen.QP = scen.NewQP(qp.RC, scen.CQ, false)
	postRecv(recvid(idErrorRecv, 0), 0xd200, 16)
	postSend([]wr.SendWR{{
		ID:     wrid(idErrorRecv, 0),
		SGList: []wr.SGE{sge0(0, 64)},
		Opcode: wr.OpSend,
		Flags:  wr.Signaled,
	}})
	scen.Mark("complete")
	drain(2)
	scen.DestroyQP(scen.QP)
	scen.QP = mainQP
}

// 15. cq.arm: a CQ with a completion channel and a fresh QP on it. Arm it
// (all completions, then solicited only) on the empty CQ, then again after
// a completion was consumed, so the arm words carry a consumer index; the
// "posted" after each arm records the CQ doorbell record's arm word and
// the UAR doorbell. No event is raised (the device does not model EQs).
func reqNotify(solicited bool) {
	if err := scen.CQ.ReqNotify(solicited); err != nil {
		scen.Fail("req_notify_cq", err)
	}
	scen.Mark("posted")
}

func scenArm() {
	scen.Mark("step cq.arm")
	mainCQ, mainQP := scen.CQ, scen.QP
	ch, err := scen.Ctx.NewCompChannel()
	if err != nil {
		scen.Fail("create_comp_channel", err)
	}
	if scen.CQ, err = scen.Ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch}); err != nil {
		scen.Fail("create_cq", err)
	}
	scen.QP = scen.NewQP(qp.RC, scen.CQ, false)
	reqNotify(false)
	reqNotify(true)
	for i := range uint64(3) {
		postSend([]wr.SendWR{writeWR(wrid(idArm, i), []wr.SGE{sge0(0, 32)}, 0xd300)})
		scen.Mark("complete")
		drain(1)
		reqNotify(i&1 != 0)
	}
	scen.DestroyQP(scen.QP)
	if err := scen.CQ.Close(); err != nil {
		scen.Fail("destroy_cq", err)
	}
	if err := ch.Close(); err != nil {
		scen.Fail("destroy_comp_channel", err)
	}
	scen.CQ, scen.QP = mainCQ, mainQP
}

// 16. uc.send, uc.write, uc.write_imm: on a fresh UC QP (on the common
// CQ), a SEND into a posted receive, an RDMA write, and an RDMA write with
// immediate consuming a posted receive.
func scenUC() {
	scen.Mark("step uc.send")
	mainQP := scen.QP
	scen.QP = scen.NewQP(qp.UC, scen.CQ, false)
	postRecv(recvid(idUCSend, 0), 0xe000, 256)
	postSend([]wr.SendWR{{
		ID:     wrid(idUCSend, 0),
		SGList: []wr.SGE{sge0(0x300, 48)},
		Opcode: wr.OpSend,
		Flags:  wr.Signaled,
	}})
	scen.Mark("complete")
	drain(2)

	scen.Mark("step uc.write")
	postSend([]wr.SendWR{writeWR(wrid(idUCWrite, 0), []wr.SGE{sge0(0x400, 200)}, 0xe100)})
	scen.Mark("complete")
	drain(1)

	scen.Mark("step uc.write_imm")
	postRecv(recvid(idUCWriteImm, 0), 0xe200, 256)
	w := writeWR(wrid(idUCWriteImm, 0), []wr.SGE{sge0(0x500, 24)}, 0xe300)
	w.Opcode = wr.OpRDMAWriteWithImm
	w.Imm = 0x0badcafe // host order; rc.c: htonl(0x0badcafe)
	postSend([]wr.SendWR{w})
	scen.Mark("complete")
	drain(2)

	scen.DestroyQP(scen.QP)
	scen.QP = mainQP
}

// 17. ud.send, ud.send_imm_inline: a UD QP (on the common CQ) and an
// address handle to port 1's GID 1; the provider asks the kernel
// (CREATE_AH) for the destination MAC of its address vector. A SEND of 100
// bytes, then an inline SEND with immediate of 20, each to the QP itself
// with its Q_Key, into receives with room for the GRH the device puts
// first.
func udSend(ah *uverbs.AH, id uint64, sg wr.SGE, op wr.Opcode, flags wr.SendFlags) {
	postSend([]wr.SendWR{{
		ID:         id,
		SGList:     []wr.SGE{sg},
		Opcode:     op,
		Flags:      flags,
		Imm:        0x55aa0102, // host order; rc.c: htonl(0x55aa0102)
		AH:         ah,
		RemoteQPN:  scen.QP.Num(),
		RemoteQKey: scen.UDQKey,
	}})
}

func scenUD() {
	scen.Mark("step ud.send")
	mainQP := scen.QP
	scen.QP = scen.NewQP(qp.UD, scen.CQ, false)
	ah, err := scen.PD.CreateAH(qp.AHAttr{
		IsGlobal:  true,
		DGID:      scen.DGID,
		SGIDIndex: scen.GIDIndex,
		HopLimit:  64,
		PortNum:   scen.IBPort,
	})
	if err != nil {
		scen.Fail("create_ah", err)
	}
	postRecv(recvid(idUDSend, 0), 0xf000, grhSize+256)
	udSend(ah, wrid(idUDSend, 0), sge0(0x600, 100), wr.OpSend, wr.Signaled)
	scen.Mark("complete")
	drain(2)

	scen.Mark("step ud.send_imm_inline")
	postRecv(recvid(idUDSendImm, 0), 0xf200, grhSize+256)
	udSend(ah, wrid(idUDSendImm, 0), sge0(0x700, 20), wr.OpSendWithImm, wr.Signaled|wr.Inline)
	scen.Mark("complete")
	drain(2)

	if err := ah.Close(); err != nil {
		scen.Fail("destroy_ah", err)
	}
	scen.DestroyQP(scen.QP)
	scen.QP = mainQP
}

// 18. rc.batch: the batch API (QP.BeginSend's SendBatch; libmlx5: the
// ibv_wr_* API) on a fresh RC QP: one batch of six requests, posted with
// one doorbell by Complete: a signalled write of one SGE, an unsignalled
// send of an SGE list of two, a signalled inline send with immediate, a
// signalled write with immediate, a signalled read and a signalled
// fetch-and-add. Three receives take the sends and the write with
// immediate. rc.batch.abort: a write begun and abandoned (Abort), then a
// batch of one signalled write: the abandoned one must leave no trace.
// (rc.c creates this QP with ibv_create_qp_ex and send_ops_flags, which
// libmlx5 needs for the ibv_wr_* functions; BeginSend needs nothing.)
func scenBatch() {
	scen.Mark("step rc.batch")
	mainQP := scen.QP
	scen.QP = scen.NewQP(qp.RC, scen.CQ, false)
	for i := range uint64(3) {
		postRecv(recvid(idBatch, i), 0xf400+0x100*int(i), 256)
	}
	base := scen.MR0.Addr()
	b, err := scen.QP.BeginSend()
	if err != nil {
		scen.Fail("wr_start", err)
	}
	b.RDMAWrite(wrid(idBatch, 0), wr.Signaled, scen.MR1.RKey(), remote1(0xf800))
	b.SetSGE(scen.MR0.LKey(), base+0x800, 96)

	b.Send(wrid(idBatch, 1), 0)
	b.SetSGEList([]wr.SGE{sge0(0x900, 10), sge0(0x980, 30)})

	b.SendWithImm(wrid(idBatch, 2), wr.Signaled, 0x600d1dea) // host order; rc.c: htonl
	b.SetInlineData(scen.Buf0[0xa00 : 0xa00+40])

	b.RDMAWriteWithImm(wrid(idBatch, 3), wr.Signaled, scen.MR1.RKey(), remote1(0xfa00), 0x1234abcd)
	b.SetSGE(scen.MR0.LKey(), base+0xb00, 64)

	b.RDMARead(wrid(idBatch, 4), wr.Signaled, scen.MR1.RKey(), remote1(0xfc00))
	b.SetSGE(scen.MR0.LKey(), base+0xc00, 128)

	b.AtomicFetchAdd(wrid(idBatch, 5), wr.Signaled, scen.MR1.RKey(), remote1(0xfe00), 7)
	b.SetSGE(scen.MR0.LKey(), base+0xe00, 8)
	if _, err := b.Complete(); err != nil {
		scen.Fail("wr_complete", err)
	}
	scen.Mark("posted")
	scen.Mark("complete")
	drain(3 + 5)

	scen.Mark("step rc.batch.abort")
	if b, err = scen.QP.BeginSend(); err != nil {
		scen.Fail("wr_start", err)
	}
	b.RDMAWrite(wrid(idBatchAbort, 0), wr.Signaled, scen.MR1.RKey(), remote1(0xff00))
	b.SetSGE(scen.MR0.LKey(), base, 16)
	b.Abort()
	if b, err = scen.QP.BeginSend(); err != nil {
		scen.Fail("wr_start", err)
	}
	b.RDMAWrite(wrid(idBatchAbort, 1), wr.Signaled, scen.MR1.RKey(), remote1(0xff80))
	b.SetSGE(scen.MR0.LKey(), base+0x40, 32)
	if _, err := b.Complete(); err != nil {
		scen.Fail("wr_complete", err)
	}
	scen.Mark("posted")
	scen.Mark("complete")
	drain(1)

	scen.DestroyQP(scen.QP)
	scen.QP = mainQP
}

// 19. srq.round.K: a basic SRQ (max_wr 8, max_sge 2; the granted sizes
// are marked) and a fresh RC QP receiving from it. srqRounds rounds, each
// one post of srqPerRound receives (two SGEs each) to the SRQ, then one
// post of as many signalled SENDs of 48 bytes, drained: more receives than
// the SRQ has WQEs in all, so WQEs freed by polling are reused through the
// free list.
func scenSRQ() {
	scen.Mark("step srq.round.0")
	mainQP := scen.QP
	srq, err := scen.PD.CreateSRQ(uverbs.SRQAttr{MaxWR: 8, MaxSGE: 2})
	if err != nil {
		scen.Fail("create_srq", err)
	}
	scen.Mark("ret srq.max_wr=%d", srq.Attr().MaxWR)
	scen.Mark("ret srq.max_sge=%d", srq.Attr().MaxSGE)
	scen.NewQPSRQ = srq
	scen.QP = scen.NewQP(qp.RC, scen.CQ, false)
	scen.NewQPSRQ = nil
	for r := range uint64(srqRounds) {
		if r > 0 {
			scen.Mark("step srq.round.%d", r)
		}
		rw := make([]wr.RecvWR, srqPerRound)
		for i := range rw {
			k := r*srqPerRound + uint64(i)
			rw[i] = wr.RecvWR{ID: recvid(idSRQ, k), SGList: []wr.SGE{
				scen.MR1.SGE(0x9400+0x40*i, 16), scen.MR1.SGE(0x9800+0x40*i, 48)}}
		}
		if _, err := srq.PostRecv(rw); err != nil {
			scen.Fail("post_srq_recv", err)
		}
		scen.Mark("posted")
		w := make([]wr.SendWR, srqPerRound)
		for i := range w {
			k := r*srqPerRound + uint64(i)
			w[i] = wr.SendWR{
				ID:     wrid(idSRQ, k),
				SGList: []wr.SGE{sge0(0x40*int(k), 48)},
				Opcode: wr.OpSend,
				Flags:  wr.Signaled,
			}
		}
		postSend(w)
		scen.Mark("complete")
		drain(2 * srqPerRound)
	}
	scen.DestroyQP(scen.QP)
	if err := srq.Close(); err != nil {
		scen.Fail("destroy_srq", err)
	}
	scen.QP = mainQP
}

// 20. xrc.*: XRC, both sides in this process (rc.c's scen_xrc).
func scenXRC() {
	scen.Mark("step xrc.setup")
	mainQP := scen.QP
	xrcd, err := scen.Ctx.OpenXRCD(-1, unix.O_CREAT)
	if err != nil {
		scen.Fail("open_xrcd", err)
	}
	srq, err := scen.PD.CreateXRCSRQ(xrcd, scen.CQ, uverbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		scen.Fail("create_srq_ex", err)
	}
	scen.Mark("ret srq.max_wr=%d", srq.Attr().MaxWR)
	scen.Mark("ret srq.max_sge=%d", srq.Attr().MaxSGE)
	srqn, err := srq.Num()
	if err != nil {
		scen.Fail("get_srq_num", err)
	}
	scen.Mark("ret srq.num=0x%x", srqn)

	tgt, err := xrcd.CreateRecvQP()
	if err != nil {
		scen.Fail("create_qp_xrc_recv", err)
	}
	ini, err := scen.PD.CreateQP(uverbs.QPInitAttr{
		Type:   qp.XRCSend,
		SendCQ: scen.CQ,
		RecvCQ: scen.CQ,
		Caps:   qp.Caps{MaxSendWR: 16, MaxSendSGE: 2, MaxInlineData: 64},
	})
	if err != nil {
		scen.Fail("create_qp_xrc_send", err)
	}
	caps := ini.Caps()
	scen.Mark("ret cap.max_send_wr=%d", caps.MaxSendWR)
	scen.Mark("ret cap.max_send_sge=%d", caps.MaxSendSGE)
	scen.Mark("ret cap.max_inline_data=%d", caps.MaxInlineData)

	// The transitions with the attributes ib_modify_qp_is_ok asks of each type.
	a := qp.Attr{State: qp.StateInit, PortNum: scen.IBPort, QPAccessFlags: wr.RemoteWrite | wr.RemoteRead}
	init := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags
	if err := tgt.Modify(a, init); err != nil {
		scen.Fail("modify_init_tgt", err)
	}
	if err := ini.Modify(a, init); err != nil {
		scen.Fail("modify_init_ini", err)
	}
	rtr := qp.Attr{
		State:           qp.StateRTR,
		PathMTU:         qp.MTU1024,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     12,
		AHAttr: qp.AHAttr{
			IsGlobal:  true,
			DGID:      scen.DGID,
			SGIDIndex: scen.GIDIndex,
			HopLimit:  64,
			PortNum:   scen.IBPort,
		},
	}
	rtrMask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	rtr.DestQPNum = ini.Num()
	if err := tgt.Modify(rtr, rtrMask|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
		scen.Fail("modify_rtr_tgt", err)
	}
	rtr.DestQPNum = tgt.Num()
	if err := ini.Modify(rtr, rtrMask); err != nil {
		scen.Fail("modify_rtr_ini", err)
	}
	rts := qp.Attr{State: qp.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	if err := tgt.Modify(rts, qp.AttrState|qp.AttrTimeout|qp.AttrSQPSN); err != nil {
		scen.Fail("modify_rts_tgt", err)
	}
	if err := ini.Modify(rts, qp.AttrState|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|
		qp.AttrSQPSN|qp.AttrMaxQPRdAtomic); err != nil {
		scen.Fail("modify_rts_ini", err)
	}
	scen.QP = ini

	scen.Mark("step xrc.send")
	rw := make([]wr.RecvWR, 3)
	for i := range rw {
		rw[i] = wr.RecvWR{ID: recvid(idXRC, uint64(i)), SGList: []wr.SGE{scen.MR1.SGE(0xa000+0x40*i, 64)}}
	}
	if _, err := srq.PostRecv(rw); err != nil {
		scen.Fail("post_srq_recv", err)
	}
	scen.Mark("posted")
	w := []wr.SendWR{
		{ID: wrid(idXRC, 0), SGList: []wr.SGE{sge0(0x100, 48)}, Opcode: wr.OpSend, Flags: wr.Signaled},
		{ID: wrid(idXRC, 1), SGList: []wr.SGE{sge0(0x140, 32)}, Opcode: wr.OpSendWithImm, Flags: wr.Signaled,
			Imm: 0x11223344},
		{ID: wrid(idXRC, 2), SGList: []wr.SGE{sge0(0x180, 16)}, Opcode: wr.OpRDMAWriteWithImm, Flags: wr.Signaled,
			Imm: 0x55667788, Remote: wr.Remote{Addr: remote1(0xa400), RKey: scen.MR1.RKey()}},
	}
	for i := range w {
		w[i].RemoteSRQN = srqn
	}
	postSend(w)
	scen.Mark("complete")
	drain(6)

	scen.Mark("step xrc.rdma")
	w2 := []wr.SendWR{
		writeWR(wrid(idXRC, 3), []wr.SGE{sge0(0x200, 24), sge0(0x240, 40)}, 0xa600),
		{ID: wrid(idXRC, 4), SGList: []wr.SGE{scen.MR1.SGE(0xa800, 64)}, Opcode: wr.OpRDMARead, Flags: wr.Signaled,
			Remote: wr.Remote{Addr: scen.MR0.Addr() + 0x300, RKey: scen.MR0.RKey()}},
	}
	for i := range w2 {
		w2[i].RemoteSRQN = srqn
	}
	postSend(w2)
	scen.Mark("complete")
	drain(2)

	scen.Mark("step xrc.teardown")
	scen.DestroyQP(ini)
	scen.DestroyQP(tgt)
	if err := srq.Close(); err != nil {
		scen.Fail("destroy_srq", err)
	}
	if err := xrcd.Close(); err != nil {
		scen.Fail("close_xrcd", err)
	}
	scen.QP = mainQP
}

// ---- main ----

var scenarios = []struct {
	name string
	run  func()
}{
	{"send", scenSend},
	{"send_imm", scenSendImm},
	{"write", scenWrite},
	{"write_imm", scenWriteImm},
	{"read", scenRead},
	{"atomic", scenAtomic},
	{"inline", scenInline},
	{"unsignaled", scenUnsignaled},
	{"fence", scenFence},
	{"solicited", scenSolicited},
	{"wrap", scenWrap},
	{"full", scenFull},
	{"error", scenError},
	{"error_synd", scenErrorSynd},
	{"error_recv", scenErrorRecv},
	{"arm", scenArm},
	{"uc", scenUC},
	{"ud", scenUD},
	{"batch", scenBatch},
	{"srq", scenSRQ},
	{"xrc", scenXRC},
}

func usage() {
	fmt.Fprint(os.Stderr, "usage: scenario-go SCENARIO (all")
	for _, s := range scenarios {
		fmt.Fprintf(os.Stderr, ", %s", s.name)
	}
	fmt.Fprint(os.Stderr, ")\n")
	os.Exit(2)
}

func main() {
	scen.Prog, scen.Args = "scenario-go", "SCENARIO"
	if len(os.Args) != 2 {
		usage()
	}
	which := -1
	if os.Args[1] != "all" {
		for i, s := range scenarios {
			if os.Args[1] == s.name {
				which = i
			}
		}
		if which < 0 {
			usage()
		}
	}
	scen.Setup()
	for i, s := range scenarios {
		if which < 0 || which == i {
			s.run()
		}
	}
	scen.Teardown()
	scen.Mark("end")
}
