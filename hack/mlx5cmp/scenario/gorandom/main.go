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
// teardown are goscen's (package scen's), so the shared divergences apply.
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
//	          most scen.BufSize - offset.
//	      r = 2 bytes (hi, lo): the remote offset in buf1 (rkey mr1),
//	          r % (scen.BufSize - total + 1), total the SGEs' summed length.
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
//	    scen.MaxPolls polls), each reported.
//
// At the end: step "final", "complete", a drain of scen.PollBatch, then the
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
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/rdmago/rdma/hack/mlx5cmp/scenario/scen"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

const (
	maxOps   = 64
	maxWRs   = 64 // below max_send_wr (85) and max_recv_wr (64): no post overflows
	maxSGE   = 5  // one over the QP's max_send_sge and max_recv_sge
	maxList  = 8
	maxInput = 4096 // bytes kept; a run reads fewer (maxOps + maxWRs * 19)
)

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

// ---- completions ----

var qpFailed bool // a poll returned an error completion: see the top comment

// pollOnce polls for up to batch completions and reports what it found.
func pollOnce(batch int) int {
	var wc [scen.PollBatch]wr.Completion
	n, err := scen.CQ.Poll(wc[:batch])
	if err != nil {
		scen.Mark("ret poll_error=1")
		return 0
	}
	scen.Mark("poll n=%d", n)
	for i := range n {
		scen.EmitWC(&wc[i])
		if wc[i].Status != wr.Success {
			qpFailed = true
		}
	}
	return n
}

// drain polls batch at a time until a poll finds nothing.
func drain(batch int) {
	for range scen.MaxPolls {
		if pollOnce(batch) == 0 {
			return
		}
	}
	scen.Mark("ret poll_timeout=%d", scen.ETIMEDOUT)
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
	n = min(n, scen.BufSize-off)
	m := scen.MR0
	if buf != 0 {
		m = scen.MR1
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
			m := scen.MR0
			if buf != 0 {
				m = scen.MR1
			}
			var off uint64
			if nsge > 0 {
				off = sg[i][0].Addr - m.Addr()
			}
			sg[i][0] = m.SGE(int(off&^7), 8)
			nsge = 1
			total = 8
		}
		if nsge > int(scen.Caps.MaxSendSGE) || (flags&wr.Inline != 0 && total > uint64(scen.Caps.MaxInlineData)) {
			refused = true
		}
		total = min(total, scen.BufSize)
		roff := r % (scen.BufSize - total + 1)
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
			w[i].Remote.Addr, w[i].Remote.RKey = scen.MR1.Addr()+roff, scen.MR1.RKey()
			if o&0x80 == 0 {
				w[i].CompareAdd = uint64(s)
			}
			if op == wr.OpAtomicCmpAndSwp {
				w[i].Swap = 0x0102030405060708 * uint64(i+1)
			}
		case op != wr.OpSend && op != wr.OpSendWithImm:
			w[i].Remote.Addr, w[i].Remote.RKey = scen.MR1.Addr()+roff, scen.MR1.RKey()
		}
	}
	if refused {
		scen.Mark("step %d.send-refused", s)
	} else {
		scen.Mark("step %d.send", s)
	}
	_, err := scen.QP.PostSend(w[:n])
	scen.Mark("posted")
	if err != nil {
		scen.Mark("ret post_send=%d bad_wr_index=%d", scen.ErrnoOf(err), badIndex(err))
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
		scen.Mark("ret recv_skipped=1")
		return
	}
	_, err := scen.QP.PostRecv(w[:n])
	scen.Mark("posted")
	if err != nil {
		scen.Mark("ret post_recv=%d bad_wr_index=%d", scen.ErrnoOf(err), badIndex(err))
	}
}

// run decodes the input and performs its ops (see the top comment).
func run() {
	// Buffer 1 gets a pattern too (goscen leaves it zeroed), so that
	// inline data is never 64 bytes of zeros: mlx5cmp's device ends a run
	// of BlueFlame stores at an all-zero 64-byte block, and would show a
	// longer copy word by word, with raw addresses.
	for i := range scen.Buf1 {
		scen.Buf1[i] = byte(i*13 + 5)
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
			scen.Mark("step %d.recv", s)
			opRecv(s, n)
		case 4:
			scen.Mark("step %d.complete", s)
			if a == 0 {
				scen.Mark("complete")
			} else {
				scen.Mark("complete n=%d", a)
			}
		case 5:
			scen.Mark("step %d.error", s)
			scen.Mark("complete error=0x%02x", syndromes[a%13])
		case 6:
			scen.Mark("step %d.poll", s)
			pollOnce(1 + int(a%16))
		case 7:
			scen.Mark("step %d.drain", s)
			drain(1 + int(a%16))
		}
	}
	scen.Mark("step final")
	scen.Mark("complete")
	drain(scen.PollBatch)
}

// ---- main ----

func main() {
	scen.Prog, scen.Args = "random-go", "HEX"
	if len(os.Args) != 2 || decodeHex(os.Args[1]) != nil {
		fmt.Fprintln(os.Stderr, "usage: random-go HEX (the input, an even number of hex digits)")
		os.Exit(2)
	}
	scen.Setup()
	run()
	scen.Teardown()
	scen.Mark("end")
}
