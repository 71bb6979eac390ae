//go:build linux && amd64

// Command gorandom is the Go half of mlx5cmp's random sequences (FuzzCompare
// in hack/mlx5cmp/fuzz_test.go). It decodes its argument, a hex string,
// into a sequence of work requests, completions the device is asked for
// (some with an error syndrome) and polls, and runs it with rdmago's mlx5
// provider, through the module's public packages only, on one RC QP
// connected to itself, under mlx5cmp's fake mlx5 kernel, telling the
// supervisor where it is with markers written to descriptor 899 (as goscen
// does).
//
// Its C twin is hack/mlx5cmp/scenario/random.c: both decode the input by
// the spec below, byte for byte, and perform the same calls in the same
// order; change one and you must change the other. The setup and the
// teardown are goscen's (copied), so the shared divergences apply.
//
//	CGO_ENABLED=0 go build -o /tmp/random-go ./hack/mlx5cmp/scenario/gorandom
//	mlx5cmp run -profile hack/mlx5cmp/testdata/cx6.json -o /tmp/go.txt -- /tmp/random-go 0a0102...
//
// ---- The input (the same spec heads random.c) ----
//
// The bytes are read in order; past the end every byte reads as 0. The
// sequence is at most maxOps ops and maxWRs work requests (send and
// receive, counted as decoded, posted or not); it ends when the input is
// used up or a limit is reached. Op number s (from 1) marks "step s.KIND".
// Each op starts with a byte c: its kind is c % 8, its argument a = c / 8.
//
//	0-2 send: a list of 1 + a % 8 send WRs (fewer if maxWRs is reached),
//	    posted in one call. Each WR, index i in the list:
//	      o = byte: opcode o % 7, in order SEND, SEND_WITH_IMM, RDMA_WRITE,
//	          RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP,
//	          ATOMIC_FETCH_AND_ADD; local buffer (o / 7) % 2 (0: buf0 and
//	          mr0, 1: buf1 and mr1); compare_add 0 if o & 0x80, else s.
//	      f = byte: flags f & 15 (ibv_send_flags: 1 FENCE, 2 SIGNALED, 4 SOLICITED, 8 INLINE);
//	          SGE count k = f >> 4: 5 if k == 15 (over max_send_sge, so
//	          refused), else k % 5.
//	      per SGE, 3 bytes: offset (hi, lo) in the local buffer, length l:
//	          inline: l & 0x80 ? (l & 0x7f) * 2 : l % 48 (so four short
//	          ones fit max_inline_data 188, one long one may not);
//	          otherwise: l & 0x80 ? (l & 0x7f) * 64 : l; either way at
//	          most bufSize - offset.
//	      r = 2 bytes (hi, lo): the remote offset in buf1 (rkey mr1),
//	          r % (bufSize - total + 1), total the SGEs' summed length.
//	    Adjusted after decoding (every byte above is read regardless):
//	      RDMA_READ: INLINE dropped (rdmago refuses an inline READ with
//	          EINVAL; libmlx5 would copy the local data into the WQE).
//	      atomics: INLINE dropped; exactly one 8-byte SGE at the first
//	          SGE's offset & ~7 (0 with none); total 8, remote offset
//	          & ~7 (rdmago refuses other atomics with EINVAL; libmlx5
//	          posts them for the device to fail).
//	      wr_id s << 16 | i; imm_data htonl(0xa5000000 | s << 8 | i); swap
//	      0x0102030405060708 * (i + 1).
//	3   recv: a list of 1 + a % 4 receive WRs (fewer if maxWRs is
//	    reached), posted in one call. Each, index i: f = byte: SGE count
//	    k = f & 15: 5 if k == 15 (over max_recv_sge), else k % 5; buffer
//	    (f >> 4) & 1; per SGE 3
//	    bytes as a send's non-inline SGE. wr_id s << 16 | (0x8000 + i).
//	4   complete: the device executes every posted request (a == 0) or
//	    the next a of them: marker "complete" or "complete n=a".
//	5   complete with error: "complete error=0xSS", SS = syndromes[a % 13]
//	    (every syndrome provider/mlx5/cqe.go decodes): the next request the
//	    device executes fails with it, and every one after it is flushed.
//	6   poll: one poll of 1 + a % 16 completions, reported.
//	7   drain: polls of 1 + a % 16 until one finds nothing (at most
//	    maxPolls polls), each reported.
//
// At the end: step "final", "complete", a drain of pollBatch, then the
// teardown.
//
// A post that fails marks "ret post_send=ERRNO bad_wr_index=N" (or
// post_recv) after its "posted" (the ones before N were posted). A
// send list with a request the QP must refuse (more SGEs than
// max_send_sge, inline data over max_inline_data) is step "s.send-refused"
// instead of "s.send": after a refused request libmlx5 rings the
// doorbell with that request's half-written control segment, which
// testdata/divergences-random.txt covers in those steps only.
// Before the first op, buffer 1 is filled with (i * 13 + 5) & 0xff (buffer
// 0 holds setup's (i * 7 + 3) & 0xff).
// The device writes every completion before "complete" returns, so every
// poll's result is deterministic and every poll is reported.
//
// The QP in error: once a poll has returned a completion with an error
// status, the program posts no more receives (a recv op reads its bytes
// and marks "ret recv_skipped=1"): rdmago's uverbs flushes a receive
// posted to a failed RC QP itself (QP.PostRecv), where libmlx5 hands it
// to the device. Sends go on: the device flushes them (WR_FLUSH_ERR).
package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	markFD    = 899
	bufSize   = 64 * 1024
	cqSize    = 256
	pollBatch = 16
	maxPolls  = 100
	ibPort    = 1
	gidIndex  = 1
	maxOps    = 64
	maxWRs    = 64 // below max_send_wr (85) and max_recv_wr (64): no post overflows
	maxSGE    = 5  // one over the QP's max_send_sge and max_recv_sge
	maxList   = 8
	maxInput  = 4096 // bytes kept; a run reads fewer (maxOps + maxWRs * 19)
)

// ETIMEDOUT, as rc.c checks it against <errno.h>.
const eTIMEDOUT = 110

// The send opcodes in the order the input numbers them.
var opcodes = [7]wr.Opcode{
	wr.OpSend, wr.OpSendWithImm, wr.OpRDMAWrite,
	wr.OpRDMAWriteWithImm, wr.OpRDMARead, wr.OpAtomicCmpAndSwp,
	wr.OpAtomicFetchAdd,
}

// The syndromes "complete error=" draws from: those provider/mlx5/cqe.go decodes.
var syndromes = [13]uint8{0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11,
	0x12, 0x13, 0x14, 0x15, 0x16, 0x22}

// The input's flag bits are ibv_send_flags' (random.c asserts them);
// wr.SendFlags has the same values.
const sendFlagsMask = wr.Fence | wr.Signaled | wr.Solicited | wr.Inline

// The objects of the common setup.
var (
	ctx        *uverbs.Context
	pd         *uverbs.PD
	buf0, buf1 []byte
	mr0, mr1   *mr.Region
	cq         *uverbs.CQ
	q          *uverbs.QP
	caps       qp.Caps // as granted
)

// ---- markers ----

// mark writes one marker line to markFD. Outside mlx5cmp the descriptor
// does not exist: say so and exit 2.
func mark(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	n, err := syscall.Write(markFD, []byte(line))
	if err != nil || n != len(line) {
		if err == syscall.EBADF {
			fmt.Fprintf(os.Stderr, "random-go: marker descriptor %d does not exist: run me under mlx5cmp (mlx5cmp run ... -- random-go HEX)\n", markFD)
		} else {
			fmt.Fprintf(os.Stderr, "random-go: marker write: %v (%d of %d bytes)\n", err, n, len(line))
		}
		os.Exit(2)
	}
}

// errnoOf returns the errno err wraps: 0 for nil, -1 for an error that
// wraps none.
func errnoOf(err error) int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// fail reports an unexpected failure of call name with err, then exits 1.
func fail(name string, err error) {
	mark("ret %s=%d", name, errnoOf(err))
	fmt.Fprintf(os.Stderr, "random-go: %s: %v\n", name, err)
	os.Exit(1)
}

// ---- completions ----

// wcStatus maps a status to enum ibv_wc_status's value. wr's values are
// already ibv_wc's, but the mapping is spelled out so that a change in wr
// shows here, against the literals rc.c (and random.c) assert.
func wcStatus(s wr.Status) int {
	switch s {
	case wr.Success:
		return 0 // IBV_WC_SUCCESS
	case wr.LocLenErr:
		return 1
	case wr.LocQPOpErr:
		return 2
	case wr.LocEECOpErr:
		return 3
	case wr.LocProtErr:
		return 4
	case wr.WRFlushErr:
		return 5 // IBV_WC_WR_FLUSH_ERR
	case wr.MWBindErr:
		return 6
	case wr.BadRespErr:
		return 7
	case wr.LocAccessErr:
		return 8
	case wr.RemInvReqErr:
		return 9
	case wr.RemAccessErr:
		return 10
	case wr.RemOpErr:
		return 11
	case wr.RetryExcErr:
		return 12
	case wr.RNRRetryExcErr:
		return 13
	case wr.LocRDDViolErr:
		return 14
	case wr.RemInvRdReqErr:
		return 15
	case wr.RemAbortErr:
		return 16
	case wr.InvEECNErr:
		return 17
	case wr.InvEECStateErr:
		return 18
	case wr.FatalErr:
		return 19
	case wr.RespTimeoutErr:
		return 20
	case wr.GeneralErr:
		return 21 // IBV_WC_GENERAL_ERR
	case wr.TMErr:
		return 22
	case wr.TMRndvIncomplete:
		return 23
	}
	return 1000 + int(s) // no ibv_wc_status: shows as a difference
}

// wcOpcode maps a completion opcode to enum ibv_wc_opcode's value.
// (IBV_WC_ATOMIC_WRITE = 9, the tag-matching and driver opcodes have no
// wr counterpart; this scenario produces none of them.)
func wcOpcode(o wr.WCOpcode) int {
	switch o {
	case wr.WCSend:
		return 0 // IBV_WC_SEND
	case wr.WCRDMAWrite:
		return 1
	case wr.WCRDMARead:
		return 2
	case wr.WCCompSwap:
		return 3
	case wr.WCFetchAdd:
		return 4
	case wr.WCBindMW:
		return 5
	case wr.WCLocalInv:
		return 6
	case wr.WCTSO:
		return 7
	case wr.WCRecv:
		return 128 // IBV_WC_RECV
	case wr.WCRecvRDMAWithImm:
		return 129 // IBV_WC_RECV_RDMA_WITH_IMM
	}
	return 1000 + int(o)
}

// wcFlags maps completion flags to IBV_WC_* bits (enum ibv_wc_flags).
func wcFlags(f wr.WCFlags) uint32 {
	var v uint32
	if f&wr.WCGRH != 0 {
		v |= 1 // IBV_WC_GRH
	}
	if f&wr.WCWithImm != 0 {
		v |= 2 // IBV_WC_WITH_IMM
	}
	if f&wr.WCIPCsumOK != 0 {
		v |= 4 // IBV_WC_IP_CSUM_OK
	}
	if f&wr.WCWithInv != 0 {
		v |= 8 // IBV_WC_WITH_INV
	}
	if rest := f &^ (wr.WCGRH | wr.WCWithImm | wr.WCIPCsumOK | wr.WCWithInv); rest != 0 {
		v |= uint32(rest) << 16 // unknown: shows as a difference
	}
	return v
}

// wcImm returns imm_data as ibv_wc carries it (see the top comment).
func wcImm(c *wr.Completion) uint32 {
	if c.Flags&wr.WCWithInv != 0 {
		return c.Imm // invalidated_rkey: host order in ibv_wc too
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], c.Imm)
	return binary.NativeEndian.Uint32(b[:])
}

func emitWC(c *wr.Completion) {
	mark("wc wr_id=0x%x status=%d opcode=%d vendor_err=0x%x byte_len=%d imm=0x%x "+
		"qp_num=%d src_qp=%d wc_flags=0x%x pkey_index=%d slid=%d sl=%d dlid_path_bits=%d",
		c.ID, wcStatus(c.Status), wcOpcode(c.Opcode), c.VendorErr, c.ByteLen, wcImm(c),
		c.QPNum, c.SrcQP, wcFlags(c.Flags), c.PKeyIndex, c.SLID, c.SL,
		c.DLIDPathBits)
	if c.Status != wr.Success {
		qpFailed = true
	}
}

// ---- setup and teardown ----

func setup() {
	mark("step setup")

	// uverbs.Open covers ibv_get_device_list, the search for the name and
	// ibv_open_device.
	var err error
	ctx, err = uverbs.Open("mlx5_0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "random-go: open mlx5_0: %v\n", err)
		os.Exit(2)
	}

	// The GID: QueryGIDTable queries the device, each port, then the
	// whole table (rc.c makes the same calls); there is no single-entry
	// query like ibv_query_gid.
	ents, err := ctx.QueryGIDTable()
	if err != nil {
		fail("query_gid_table", err)
	}
	var dgid qp.GID
	found := false
	for _, e := range ents {
		if e.Port == ibPort && e.Index == gidIndex {
			dgid = e.GID
			found = true
		}
	}
	if !found {
		fail("gid_index_1", syscall.ENOENT)
	}

	pd, err = ctx.AllocPD()
	if err != nil {
		fail("alloc_pd", err)
	}

	access := wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic
	// mr.New allocates page-aligned zeroed memory and registers it
	// (rc.c: aligned_alloc, memset 0, ibv_reg_mr).
	if mr0, err = mr.New(pd, bufSize, access); err != nil {
		fail("reg_mr0", err)
	}
	if mr1, err = mr.New(pd, bufSize, access); err != nil {
		fail("reg_mr1", err)
	}
	buf0, buf1 = mr0.Bytes(), mr1.Bytes()
	for i := range buf0 {
		buf0[i] = byte(i*7 + 3)
	}

	if cq, err = ctx.CreateCQ(uverbs.CQAttr{CQE: cqSize}); err != nil {
		fail("create_cq", err)
	}

	q, err = pd.CreateQP(uverbs.QPInitAttr{
		Type:   qp.RC,
		SendCQ: cq,
		RecvCQ: cq,
		Caps: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4,
			MaxInlineData: 128},
		SignalAll: false,
	})
	if err != nil {
		fail("create_qp", err)
	}
	caps = q.Caps()
	mark("ret cap.max_send_wr=%d", caps.MaxSendWR)
	mark("ret cap.max_recv_wr=%d", caps.MaxRecvWR)
	mark("ret cap.max_send_sge=%d", caps.MaxSendSGE)
	mark("ret cap.max_recv_sge=%d", caps.MaxRecvSGE)
	mark("ret cap.max_inline_data=%d", caps.MaxInlineData)

	a := qp.Attr{
		State:         qp.StateInit,
		PKeyIndex:     0,
		PortNum:       ibPort,
		QPAccessFlags: wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic,
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		fail("modify_init", err)
	}

	a = qp.Attr{
		State:           qp.StateRTR,
		PathMTU:         qp.MTU1024,
		DestQPNum:       q.Num(),
		RQPSN:           0,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     12,
		AHAttr: qp.AHAttr{
			IsGlobal:  true,
			DGID:      dgid,
			SGIDIndex: gidIndex,
			HopLimit:  64,
			PortNum:   ibPort,
		},
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|
			qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|
			qp.AttrMinRNRTimer); err != nil {
		fail("modify_rtr", err)
	}

	a = qp.Attr{
		State:       qp.StateRTS,
		SQPSN:       0,
		Timeout:     14,
		RetryCnt:    7,
		RNRRetry:    7,
		MaxRdAtomic: 1,
	}
	if err := q.Modify(&a,
		qp.AttrState|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|
			qp.AttrSQPSN|qp.AttrMaxQPRdAtomic); err != nil {
		fail("modify_rts", err)
	}
}

func teardown() {
	mark("step teardown")
	// Move the QP to ERR first: QP.Close does that itself for a QP not in
	// RESET or ERR (so that outstanding requests flush, waiting for the
	// flush), which ibv_destroy_qp does not. Doing it explicitly on both
	// sides keeps the command sequences the same (Close then skips it).
	a := qp.Attr{State: qp.StateErr}
	if err := q.Modify(&a, qp.AttrState); err != nil {
		fail("modify_err", err)
	}
	if err := q.Close(); err != nil {
		fail("destroy_qp", err)
	}
	if err := cq.Close(); err != nil {
		fail("destroy_cq", err)
	}
	// Region.Close deregisters and frees (rc.c: ibv_dereg_mr each, then
	// free both).
	if err := mr0.Close(); err != nil {
		fail("dereg_mr0", err)
	}
	if err := mr1.Close(); err != nil {
		fail("dereg_mr1", err)
	}
	if err := pd.Close(); err != nil {
		fail("dealloc_pd", err)
	}
	if err := ctx.Close(); err != nil {
		fail("close_device", err)
	}
}

// ---- completions ----

var qpFailed bool // a poll returned an error completion: see the top comment

// pollOnce polls for up to batch completions and reports what it found.
func pollOnce(batch int) int {
	var wc [pollBatch]wr.Completion
	n, err := cq.Poll(wc[:batch])
	if err != nil {
		mark("ret poll_error=1")
		return 0
	}
	mark("poll n=%d", n)
	for i := range n {
		emitWC(&wc[i])
	}
	return n
}

// drain polls batch at a time until a poll finds nothing.
func drain(batch int) {
	for range maxPolls {
		if pollOnce(batch) == 0 {
			return
		}
	}
	mark("ret poll_timeout=%d", eTIMEDOUT)
}

// ---- the input ----

var (
	input    []byte
	inputPos int
)

// next returns the next byte of the input, 0 past its end.
func next() uint32 {
	if inputPos < len(input) {
		inputPos++
		return uint32(input[inputPos-1])
	}
	return 0
}

func next16() uint32 {
	hi := next()
	return hi<<8 | next()
}

// decodeHex sets input from s, keeping at most maxInput bytes, as
// random.c's decode_hex does.
func decodeHex(s string) error {
	if len(s)%2 != 0 {
		return hex.ErrLength
	}
	s = s[:min(len(s), 2*maxInput)]
	var err error
	input, err = hex.DecodeString(s)
	return err
}

// ---- work requests ----

// decodeSGE reads one SGE (3 bytes) in the buffer buf of the input's
// choice; inl selects the inline length encoding.
func decodeSGE(buf uint32, inl bool) wr.SGE {
	off := next16()
	l := next()
	var n uint32
	switch {
	case inl && l&0x80 != 0:
		n = (l & 0x7f) * 2
	case inl:
		n = l % 48
	case l&0x80 != 0:
		n = (l & 0x7f) * 64
	default:
		n = l
	}
	n = min(n, bufSize-off)
	m := mr0
	if buf != 0 {
		m = mr1
	}
	return m.SGE(int(off), int(n))
}

// opSend decodes and posts a list of n send WRs for op s. Its step is
// "s.send", or "s.send-refused" when a WR of the list is one the QP must
// refuse (see the top comment).
func opSend(s uint32, n int) {
	var sg [maxList][maxSGE]wr.SGE
	var w [maxList]wr.SendWR
	refused := false
	for i := range n {
		o, f := next(), next()
		op := opcodes[o%7]
		buf := o / 7 % 2
		flags := wr.SendFlags(f) & sendFlagsMask
		nsge := int(f>>4) % 5
		if f>>4 == 15 {
			nsge = 5
		}
		var total uint64
		for j := range nsge {
			sg[i][j] = decodeSGE(buf, flags&wr.Inline != 0)
			total += uint64(sg[i][j].Length)
		}
		r := uint64(next16())
		atomic := op == wr.OpAtomicCmpAndSwp || op == wr.OpAtomicFetchAdd
		if op == wr.OpRDMARead || atomic {
			flags &^= wr.Inline
		}
		if atomic {
			m := mr0
			if buf != 0 {
				m = mr1
			}
			var off uint64
			if nsge > 0 {
				off = sg[i][0].Addr - m.Addr()
			}
			sg[i][0] = m.SGE(int(off&^7), 8)
			nsge = 1
			total = 8
		}
		if nsge > int(caps.MaxSendSGE) || (flags&wr.Inline != 0 && total > uint64(caps.MaxInlineData)) {
			refused = true
		}
		total = min(total, bufSize)
		roff := r % (bufSize - total + 1)
		if atomic {
			roff &^= 7
		}
		w[i] = wr.SendWR{
			ID:     uint64(s)<<16 | uint64(i),
			SGList: sg[i][:nsge],
			Opcode: op,
			Flags:  flags,
		}
		if nsge == 0 {
			w[i].SGList = nil
		}
		if op == wr.OpSendWithImm || op == wr.OpRDMAWriteWithImm {
			w[i].Imm = 0xa5000000 | s<<8 | uint32(i) // host order; random.c: htonl
		}
		switch {
		case atomic:
			w[i].RemoteAddr, w[i].RKey = mr1.Addr()+roff, mr1.RKey
			if o&0x80 == 0 {
				w[i].CompareAdd = uint64(s)
			}
			if op == wr.OpAtomicCmpAndSwp {
				w[i].Swap = 0x0102030405060708 * uint64(i+1)
			}
		case op != wr.OpSend && op != wr.OpSendWithImm:
			w[i].RemoteAddr, w[i].RKey = mr1.Addr()+roff, mr1.RKey
		}
	}
	if refused {
		mark("step %d.send-refused", s)
	} else {
		mark("step %d.send", s)
	}
	_, err := q.PostSend(w[:n])
	mark("posted")
	if err != nil {
		mark("ret post_send=%d bad_wr_index=%d", errnoOf(err), badIndex(err))
	}
}

// badIndex is the index of the request a post refused, as C's bad_wr
// points at it; -1 when the error names none.
func badIndex(err error) int {
	var pe *uverbs.PostError
	if errors.As(err, &pe) {
		return pe.Index
	}
	return -1
}

// opRecv decodes and posts a list of n receive WRs for op s.
func opRecv(s uint32, n int) {
	var sg [maxList][maxSGE]wr.SGE
	var w [maxList]wr.RecvWR
	for i := range n {
		f := next()
		nsge := int(f&15) % 5
		if f&15 == 15 {
			nsge = 5
		}
		buf := f >> 4 & 1
		for j := range nsge {
			sg[i][j] = decodeSGE(buf, false)
		}
		w[i] = wr.RecvWR{ID: uint64(s)<<16 | (0x8000 + uint64(i)), SGList: sg[i][:nsge]}
		if nsge == 0 {
			w[i].SGList = nil
		}
	}
	if qpFailed {
		mark("ret recv_skipped=1")
		return
	}
	_, err := q.PostRecv(w[:n])
	mark("posted")
	if err != nil {
		mark("ret post_recv=%d bad_wr_index=%d", errnoOf(err), badIndex(err))
	}
}

// run decodes the input and performs its ops (see the top comment).
func run() {
	// Buffer 1 gets a pattern too (goscen leaves it zeroed), so that
	// inline data is never 64 bytes of zeros: mlx5cmp's device ends a run
	// of BlueFlame stores at an all-zero 64-byte block, and would show a
	// longer copy word by word, with raw addresses.
	for i := range buf1 {
		buf1[i] = byte(i*13 + 5)
	}
	wrs := 0
	for s := uint32(1); s <= maxOps && inputPos < len(input) && wrs < maxWRs; s++ {
		c := next()
		a := c / 8
		switch c % 8 {
		case 0, 1, 2:
			n := min(1+int(a%8), maxWRs-wrs)
			wrs += n
			opSend(s, n)
		case 3:
			n := min(1+int(a%4), maxWRs-wrs)
			wrs += n
			mark("step %d.recv", s)
			opRecv(s, n)
		case 4:
			mark("step %d.complete", s)
			if a == 0 {
				mark("complete")
			} else {
				mark("complete n=%d", a)
			}
		case 5:
			mark("step %d.error", s)
			mark("complete error=0x%02x", syndromes[a%13])
		case 6:
			mark("step %d.poll", s)
			pollOnce(1 + int(a%16))
		case 7:
			mark("step %d.drain", s)
			drain(1 + int(a%16))
		}
	}
	mark("step final")
	mark("complete")
	drain(pollBatch)
}

// ---- main ----

func main() {
	if len(os.Args) != 2 || decodeHex(os.Args[1]) != nil {
		fmt.Fprintln(os.Stderr, "usage: random-go HEX (the input, an even number of hex digits)")
		os.Exit(2)
	}
	setup()
	run()
	teardown()
	mark("end")
}
