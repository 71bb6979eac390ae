//go:build linux && amd64

package main

// The device side of the fake adapter. The kernel side (package fake)
// answers commands; this file acts as the HCA does between them: when the
// scenario says it has posted, it reads what the driver wrote (the new
// WQEs, the doorbell record, the stores to the UAR pages) and records it;
// when the scenario asks for completion, it executes the posted requests
// on the target's memory and writes CQEs as the PRM lays them out: RC and
// UC loop back to the QP's destination QP, UD goes where the WQE's address
// vector says with a GRH first, and a QP on an SRQ takes the WQE at the
// head of the SRQ's free list. It also records the CQs' arm words. Both
// drivers meet the same device, so any difference in the transcript is a
// difference in what the drivers wrote or how they read what was written.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

var be = binary.BigEndian

// Objects as the device sees them, taken from the fake kernel's tables.
type dQP struct {
	key            string // q0, q1, ... in creation order
	qpn, uidx      uint32
	typ            string // "rc", "uc", "ud"
	sq, rq         uint64 // ring start addresses in the target
	sqCnt, rqCnt   uint32 // WQEBBs; receive WQEs
	rqShift        uint   // log2 of a receive WQE's size
	db             uint64 // doorbell record
	sendCQ, recvCQ *dCQ
	peer           uint32 // RC/UC: the destination QP number
	srq            bool
	srqp           *dSRQ  // the SRQ its receives come from
	lastRecv       uint16 // the index of the receive WQE consumed last
	sqSeen, sqDone uint32 // WQEBB counters: recorded, executed
	rqSeen, rqDone uint32 // receive counters
	pendingErr     uint8  // the next executed request fails with this syndrome
	failed         bool
	mem            remoteMem // the memory of the process that owns it
	kicked         bool      // a doorbell named it since it last caught up (pair_linux.go)
	xrcdn          uint32    // an XRC receive QP's domain
}

type dCQ struct {
	key  string
	cqn  uint32
	buf  uint64
	size uint32 // CQE size: 64 or 128
	ncqe uint32 // entries, a power of two
	db   uint64
	pi   uint32 // the device's producer counter
	arm  uint32 // the doorbell record's arm word as last recorded
	mem  remoteMem
}

// dSRQ is a shared receive queue: a ring of WQEs linked into a free list
// by their next segments (struct mlx5_wqe_srq_next_seg). The driver posts
// at the head of the list and links completed WQEs back at its tail; the
// device consumes from the head, so both follow the same links.
type dSRQ struct {
	key        string
	srqn       uint32
	buf, db    uint64
	cnt        uint32
	shift      uint
	postHead   uint16 // where the driver posts next, as the links say
	seen, done uint32 // receives recorded and consumed
	head       uint16 // the next WQE the device consumes
	mem        remoteMem
	// An XRC SRQ's domain, CQ and user index (MLX5_IB_DEFAULT_UIDX
	// under CQE version 0); cq is nil for a basic SRQ.
	xrcdn uint32
	cq    *dCQ
	uidx  uint32
}

type dMR struct {
	addr, length uint64
	lkey, rkey   uint32
	pid          int // the process whose memory it registers
}

// PRM constants (the mlx5 Programmer's Reference Manual, as mlx5dv.h and
// the kernel's mlx5_ib use them).
const (
	wqeBB = 64

	opRDMAWrite    = 0x08
	opRDMAWriteImm = 0x09
	opSend         = 0x0a
	opSendImm      = 0x0b
	opRDMARead     = 0x10
	opAtomicCS     = 0x11
	opAtomicFA     = 0x12

	ctrlCQUpdate = 0x08

	inlineBit   = 0x80000000
	invalidLKey = 0x100

	cqeReq        = 0x0
	cqeRespWrImm  = 0x1
	cqeRespSend   = 0x2
	cqeRespSendIm = 0x3
	cqeReqErr     = 0xd
	cqeRespErr    = 0xe

	// enum mlx5_cqe_syndrome (mlx5dv.h); the ones the device itself
	// raises. Any other a scenario asks for with "complete error=".
	syndLocalLengthErr    = 0x01
	syndLocalQPOpErr      = 0x02
	syndLocalProtErr      = 0x04
	syndWRFlushErr        = 0x05
	syndRemoteInvalReqErr = 0x12
	syndRemoteAccessErr   = 0x13
	syndRemoteOpErr       = 0x14
	syndRNRRetryErr       = 0x16

	vendorSynd = 0x32 // what the device reports beside a syndrome; a constant of this model

	// The 64-byte CQE (struct mlx5_cqe64 and mlx5_err_cqe in mlx5dv.h).
	cqeOffFlagsRQPN    = 24 // flags_rqpn
	cqeOffSrqnUidx     = 32 // srqn_uidx: CQE version 1 puts the QP's user index here
	cqeOffImmInvalPkey = 36
	cqeOffByteCnt      = 44
	cqeOffTimestamp    = 48
	cqeOffSopDropQPN   = 56
	cqeOffWQECounter   = 60
	cqeOffOpOwn        = 63
	errOffVendorSynd   = 54
	errOffSyndrome     = 55
)

type device struct {
	kern  kernelTables
	out   *transcript
	names *regions
	qps   map[uint32]*dQP // by QPN
	cqs   map[uint32]*dCQ
	srqs  map[uint32]*dSRQ // by SRQN; made by sync
	clock uint64
	uh    map[uint64]string // user handles by order of appearance
	fds   map[uint64]string // descriptor numbers by order of appearance
	// waitRNR: a send that finds no receive waits for one (a requester
	// with an infinite RNR retry count) instead of failing. The paired
	// runs (pair_linux.go) set it; the scenarios' steps want the error.
	waitRNR bool
	// traffic counts what each process's queues did, by pid.
	traffic map[int]*traffic
}

// traffic is what one process's queues did on the device.
type traffic struct {
	executed      int    // send-queue requests executed
	received      int    // messages landed on its receive queues
	bytesReceived uint64 // their payloads
}

func (d *device) count(pid int) *traffic {
	if d.traffic == nil {
		d.traffic = map[int]*traffic{}
	}
	t := d.traffic[pid]
	if t == nil {
		t = &traffic{}
		d.traffic[pid] = t
	}
	return t
}

// kernelTables is what the device reads of the kernel's objects.
type kernelTables interface {
	qps() []*dQP
	cqs() []*dCQ
	mrs() []dMR
	uarPages() []uarPage // the UAR pages of every open device file, in allocation order

	srqs() []*dSRQ
	qpSRQN(qpn uint32) uint32 // the SRQ a QP receives from
}

// uarPage is one UAR page as the supervisor's mapping of the device file
// shows it.
type uarPage struct {
	name string
	mem  []byte
}

func (d *device) sync() {
	for _, c := range d.kern.cqs() {
		if old, ok := d.cqs[c.cqn]; ok && old.buf == c.buf {
			continue
		}
		d.cqs[c.cqn] = c
	}
	if d.srqs == nil {
		d.srqs = map[uint32]*dSRQ{}
	}
	for _, s := range d.kern.srqs() {
		if old, ok := d.srqs[s.srqn]; ok && old.buf == s.buf {
			continue
		}
		if s.cq != nil {
			s.cq = d.cqs[s.cq.cqn]
		}
		d.srqs[s.srqn] = s
	}
	for _, q := range d.kern.qps() {
		if old, ok := d.qps[q.qpn]; ok && old.sq == q.sq {
			old.peer = q.peer
			continue
		}
		// An XRC send QP has no receive CQ, an XRC receive QP no CQ.
		if q.sendCQ != nil {
			q.sendCQ = d.cqs[q.sendCQ.cqn]
		}
		if q.recvCQ != nil {
			q.recvCQ = d.cqs[q.recvCQ.cqn]
		}
		if q.srq {
			q.srqp = d.srqs[d.kern.qpSRQN(q.qpn)]
		}
		d.qps[q.qpn] = q
	}
}

// posted records what the driver wrote since the last snapshot: for each
// QP whose doorbell record moved, the new WQEs decoded; the doorbell
// record; the stores to the UAR pages.
func (d *device) posted(out *transcript) error {
	d.sync()
	for _, q := range d.sortedQPs() {
		if q.db == 0 {
			continue // an XRC receive QP: no queues
		}
		var rec [8]byte
		if err := q.mem.ReadAt(rec[:], q.db); err != nil {
			return fmt.Errorf("QP %#x doorbell record: %w", q.qpn, err)
		}
		rcv, snd := be.Uint32(rec[0:]), be.Uint32(rec[4:])
		if uint16(rcv) != uint16(q.rqSeen) {
			out.line("%s dbrec.recv %#x", q.key, rcv)
			for uint16(q.rqSeen) != uint16(rcv) {
				w := make([]byte, 1<<q.rqShift)
				idx := q.rqSeen & (q.rqCnt - 1)
				if err := q.mem.ReadAt(w, q.rq+uint64(idx)<<q.rqShift); err != nil {
					return err
				}
				out.line("%s rwqe[%d] %s", q.key, idx, d.renderRecv(w))
				q.rqSeen++
			}
		}
		if uint16(snd) != uint16(q.sqSeen) {
			out.line("%s dbrec.send %#x", q.key, snd)
			for uint16(q.sqSeen) != uint16(snd) {
				w, err := d.readWQE(q, q.sqSeen)
				if err != nil {
					return err
				}
				idx := q.sqSeen & (q.sqCnt - 1)
				out.line("%s wqe[%d] %s", q.key, idx, d.renderWQE(q, w))
				q.sqSeen += uint32(len(w)+wqeBB-1) / wqeBB
			}
		}
	}
	// The receives posted to each SRQ: the doorbell record counts them;
	// each took the WQE at the head of the free list.
	for _, s := range d.sortedSRQs() {
		var rec [4]byte
		if err := s.mem.ReadAt(rec[:], s.db); err != nil {
			return fmt.Errorf("SRQ %#x doorbell record: %w", s.srqn, err)
		}
		cnt := be.Uint32(rec[:])
		if uint16(cnt) == uint16(s.seen) {
			continue
		}
		out.line("%s dbrec %#x", s.key, cnt)
		for uint16(s.seen) != uint16(cnt) {
			w := make([]byte, 1<<s.shift)
			idx := uint32(s.postHead) & (s.cnt - 1)
			if err := s.mem.ReadAt(w, s.buf+uint64(idx)<<s.shift); err != nil {
				return err
			}
			out.line("%s wqe[%d] next{%x} %s", s.key, idx, w[:16], d.renderRecv(w[16:]))
			s.postHead = be.Uint16(w[2:])
			s.seen++
		}
	}
	// The CQs' arm words (the doorbell record's second word, which
	// arming writes before its UAR doorbell), when they moved.
	for _, c := range d.sortedCQs() {
		var rec [4]byte
		if err := c.mem.ReadAt(rec[:], c.db+4); err != nil {
			return fmt.Errorf("CQ %#x doorbell record: %w", c.cqn, err)
		}
		if arm := be.Uint32(rec[:]); arm != c.arm {
			out.line("%s dbrec.arm %#x", c.key, arm)
			c.arm = arm
		}
	}
	// The stores to the UAR pages since the last snapshot. A register is
	// write-only to the driver, so clearing the page after reading it
	// changes nothing the driver can see and makes every store visible.
	for _, p := range d.kern.uarPages() {
		d.renderUAR(p, out)
		clear(p.mem)
	}
	return nil
}

// renderUAR records the stores to one UAR page: each run of written
// 64-byte blocks once. A run whose first word is a control segment of a
// known QP and that holds more than that word is a BlueFlame copy, decoded
// as the WQE it copies (its addresses named); a lone first word is the
// doorbell; anything else is shown word by word.
func (d *device) renderUAR(p uarPage, out *transcript) {
	const block = 64
	nonzero := func(b []byte) bool {
		for _, c := range b {
			if c != 0 {
				return true
			}
		}
		return false
	}
	for off := 0; off < len(p.mem); {
		if !nonzero(p.mem[off : off+block]) {
			off += block
			continue
		}
		end := off + block
		for end < len(p.mem) && nonzero(p.mem[end:end+block]) {
			end += block
		}
		w1 := be.Uint32(p.mem[off+4:])
		_, known := d.qps[w1>>8]
		ds := int(w1&0x3f) * 16
		if known && off+ds > end && off+ds <= len(p.mem) {
			// A BlueFlame copy may hold a block of zeros (inline data
			// of zeros): the control segment says how long it is.
			end = off + (ds+block-1)/block*block
		}
		run := p.mem[off:end]
		switch {
		case known && !nonzero(run[8:]):
			out.line("%s+%#x doorbell %x", p.name, off, run[:8])
		case known && ds > 0 && ds <= len(run):
			out.line("%s+%#x bf %s", p.name, off, d.renderWQE(d.qps[w1>>8], run[:ds]))
			if nonzero(run[ds:]) {
				out.line("%s+%#x bf-tail %x", p.name, off+ds, run[ds:])
			}
		default:
			for i := 0; i < len(run); i += 8 {
				if nonzero(run[i : i+8]) {
					out.line("%s+%#x %x", p.name, off+i, run[i:i+8])
				}
			}
		}
		off = end
	}
}

// readWQE gathers the WQE at WQEBB counter c, following the ring past its
// end, by the size its control segment gives.
func (d *device) readWQE(q *dQP, c uint32) ([]byte, error) {
	idx := c & (q.sqCnt - 1)
	var ctrl [16]byte
	if err := q.mem.ReadAt(ctrl[:], q.sq+uint64(idx)*wqeBB); err != nil {
		return nil, err
	}
	ds := be.Uint32(ctrl[4:]) & 0x3f
	if ds == 0 {
		ds = 1
	}
	out := make([]byte, ds*16)
	end := uint64(q.sqCnt) * wqeBB
	for off := uint64(0); off < uint64(len(out)); off += 16 {
		pos := (uint64(idx)*wqeBB + off) % end
		if err := q.mem.ReadAt(out[off:off+16], q.sq+pos); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// renderWQE decodes a send WQE segment by segment. Addresses are named by
// region; everything else is shown as the driver wrote it.
func (d *device) renderWQE(q *dQP, w []byte) string {
	var sb strings.Builder
	w0, w1 := be.Uint32(w[0:]), be.Uint32(w[4:])
	opcode := uint8(w0)
	fmt.Fprintf(&sb, "ctrl{opmod=%#x idx=%d op=%#x qpn=%s ds=%d sig=%#x dci=%#x fm_ce_se=%#x imm=%#x}",
		w0>>24, uint16(w0>>8), opcode, d.qpName(w1>>8), w1&0x3f, w[8], be.Uint16(w[9:]), w[11], be.Uint32(w[12:]))
	rest := w[16:]
	if q.typ == "xrc_send" && len(rest) >= 16 {
		// struct mlx5_wqe_xrc_seg: the target's XRC SRQ.
		fmt.Fprintf(&sb, " xrc{srqn=%#x rsvd=%x}", be.Uint32(rest), rest[4:16])
		rest = rest[16:]
	}
	if q.typ == "rc" || q.typ == "uc" || q.typ == "xrc_send" {
		switch opcode {
		case opRDMAWrite, opRDMAWriteImm, opRDMARead:
			if len(rest) >= 16 {
				fmt.Fprintf(&sb, " raddr{%s rkey=%s rsvd=%x}", d.names.addr(be.Uint64(rest)), d.names.key(be.Uint32(rest[8:])), rest[12:16])
				rest = rest[16:]
			}
		case opAtomicCS, opAtomicFA:
			if len(rest) >= 32 {
				fmt.Fprintf(&sb, " raddr{%s rkey=%s rsvd=%x} atomic{%#x %#x}", d.names.addr(be.Uint64(rest)), d.names.key(be.Uint32(rest[8:])), rest[12:16],
					be.Uint64(rest[16:]), be.Uint64(rest[24:]))
				rest = rest[32:]
			}
		}
	}
	if q.typ == "ud" && len(rest) >= 48 {
		fmt.Fprintf(&sb, " av{%x}", rest[:48])
		rest = rest[48:]
	}
	if len(rest) >= 4 && be.Uint32(rest)&inlineBit != 0 {
		n := be.Uint32(rest) &^ inlineBit
		fmt.Fprintf(&sb, " inline{n=%d", n)
		if int(n)+4 <= len(rest) {
			fmt.Fprintf(&sb, " %x", rest[4:4+n])
			fmt.Fprintf(&sb, " pad=%x", rest[4+n:])
		} else {
			fmt.Fprintf(&sb, " truncated %x", rest[4:])
		}
		sb.WriteString("}")
		return sb.String()
	}
	for ; len(rest) >= 16; rest = rest[16:] {
		fmt.Fprintf(&sb, " data{n=%d lkey=%s %s}", be.Uint32(rest), d.names.key(be.Uint32(rest[4:])), d.names.addr(be.Uint64(rest[8:])))
	}
	if len(rest) > 0 {
		fmt.Fprintf(&sb, " tail{%x}", rest)
	}
	return sb.String()
}

func (d *device) renderRecv(w []byte) string {
	var sb strings.Builder
	for ; len(w) >= 16; w = w[16:] {
		n, key, addr := be.Uint32(w), be.Uint32(w[4:]), be.Uint64(w[8:])
		if key == invalidLKey {
			fmt.Fprintf(&sb, "end{n=%d addr=%#x}", n, addr)
			break
		}
		fmt.Fprintf(&sb, "data{n=%d lkey=%s %s} ", n, d.names.key(key), d.names.addr(addr))
	}
	return strings.TrimSpace(sb.String())
}

func (d *device) qpName(qpn uint32) string {
	if q, ok := d.qps[qpn]; ok {
		return q.key
	}
	return fmt.Sprintf("%#x", qpn)
}

// sortedSRQs returns the live SRQs in the kernel's order.
func (d *device) sortedSRQs() []*dSRQ {
	var out []*dSRQ
	for _, s := range d.kern.srqs() {
		if ds, ok := d.srqs[s.srqn]; ok {
			out = append(out, ds)
		}
	}
	return out
}

// sortedCQs returns the live CQs in the kernel's order.
func (d *device) sortedCQs() []*dCQ {
	var out []*dCQ
	for _, c := range d.kern.cqs() {
		if dc, ok := d.cqs[c.cqn]; ok {
			out = append(out, dc)
		}
	}
	return out
}

func (d *device) sortedQPs() []*dQP {
	var out []*dQP
	for _, q := range d.kern.qps() {
		if dq, ok := d.qps[q.qpn]; ok {
			out = append(out, dq)
		}
	}
	return out
}

// complete executes every recorded request (or n of them) and writes the
// completions. "error=SYND" makes the next request fail with that
// syndrome: the first request of the first QP that has one recorded (so
// that a QP with nothing posted does not carry the error into a later
// step).
func (d *device) complete(args string) error {
	d.sync()
	limit := -1
	var synd uint8
	for _, f := range strings.Fields(args) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.ParseUint(v, 0, 32)
		if err != nil {
			return fmt.Errorf("complete %s: %w", args, err)
		}
		switch k {
		case "n":
			limit = int(n)
		case "error":
			synd = uint8(n)
		default:
			return fmt.Errorf("complete: unknown argument %q", f)
		}
	}
	for _, q := range d.sortedQPs() {
		if synd != 0 && q.sqDone != q.sqSeen {
			q.pendingErr, synd = synd, 0
		}
		for q.sqDone != q.sqSeen && limit != 0 {
			if err := d.step(q); err != nil {
				return err
			}
			if limit > 0 {
				limit--
			}
		}
	}
	return nil
}

// step executes the request at q's execution counter and moves the
// counter past it, unless the request waits for a receive (errRNR).
func (d *device) step(q *dQP) error {
	w, err := d.readWQE(q, q.sqDone)
	if err != nil {
		return err
	}
	if err := d.execute(q, w); err != nil {
		return err
	}
	q.sqDone += uint32(len(w)+wqeBB-1) / wqeBB
	d.count(q.mem.pid).executed++
	return nil
}

// errRNR is a request that found no receive posted, on a device that
// waits for one (waitRNR) as an RC requester with an infinite RNR retry
// count does, instead of failing it.
var errRNR = errors.New("no receive posted")

// sendOp is a parsed send WQE.
type sendOp struct {
	opcode       uint8
	fmCeSe       uint8
	imm          uint32
	wqeIdx       uint16
	raddr        uint64
	rkey         uint32
	swapAdd, cmp uint64
	inline       []byte
	gather       [][3]uint64 // length, lkey, addr
	av           []byte      // UD: the datagram segment (struct mlx5_wqe_av)
	xrcSRQN      uint32      // XRC: the target's SRQ
}

// The address vector of a UD WQE (struct mlx5_wqe_av, 48 bytes).
const (
	avOffDQP      = 8  // dqp_dct: the destination QP number, bit 31 "extended"
	avOffTClass   = 24 // tclass
	avOffHopLimit = 25
	avOffGIDFL    = 26 // grh_gid_fl: the flow label (low 20 bits)
	avOffRGID     = 32
	avSize        = 48
	grhSize       = 40 // what a UD receive gets before the payload
)

func parseWQE(q *dQP, w []byte) sendOp {
	op := sendOp{opcode: uint8(be.Uint32(w)), wqeIdx: uint16(be.Uint32(w) >> 8), fmCeSe: w[11], imm: be.Uint32(w[12:])}
	rest := w[16:]
	if q.typ == "xrc_send" && len(rest) >= 16 {
		op.xrcSRQN = be.Uint32(rest) & 0xffffff
		rest = rest[16:]
	}
	if q.typ == "rc" || q.typ == "uc" || q.typ == "xrc_send" {
		switch op.opcode {
		case opRDMAWrite, opRDMAWriteImm, opRDMARead:
			op.raddr, op.rkey = be.Uint64(rest), be.Uint32(rest[8:])
			rest = rest[16:]
		case opAtomicCS, opAtomicFA:
			op.raddr, op.rkey = be.Uint64(rest), be.Uint32(rest[8:])
			op.swapAdd, op.cmp = be.Uint64(rest[16:]), be.Uint64(rest[24:])
			rest = rest[32:]
		}
	}
	if q.typ == "ud" && len(rest) >= avSize {
		op.av = append([]byte{}, rest[:avSize]...)
		rest = rest[avSize:]
	}
	if len(rest) >= 4 && be.Uint32(rest)&inlineBit != 0 {
		n := be.Uint32(rest) &^ inlineBit
		if int(n)+4 <= len(rest) {
			op.inline = rest[4 : 4+n]
		}
		op.inline = append([]byte{}, op.inline...)
		return op
	}
	for ; len(rest) >= 16; rest = rest[16:] {
		op.gather = append(op.gather, [3]uint64{uint64(be.Uint32(rest)), uint64(be.Uint32(rest[4:])), be.Uint64(rest[8:])})
	}
	return op
}

// mr finds the region a key names that holds [addr, addr+n) in the
// memory of process pid.
func (d *device) mr(key uint32, addr, n uint64, remote bool, pid int) bool {
	for _, m := range d.kern.mrs() {
		k := m.lkey
		if remote {
			k = m.rkey
		}
		if k == key && m.pid == pid && addr >= m.addr && addr+n <= m.addr+m.length {
			return true
		}
	}
	return false
}

func (d *device) gatherData(q *dQP, op *sendOp) ([]byte, uint8, error) {
	if op.inline != nil {
		return op.inline, 0, nil
	}
	var data []byte
	for _, g := range op.gather {
		if !d.mr(uint32(g[1]), g[2], g[0], false, q.mem.pid) {
			return nil, syndLocalProtErr, nil
		}
		b := make([]byte, g[0])
		if err := q.mem.ReadAt(b, g[2]); err != nil {
			return nil, 0, err
		}
		data = append(data, b...)
	}
	return data, 0, nil
}

func (d *device) execute(q *dQP, w []byte) error {
	op := parseWQE(q, w)
	if q.failed {
		return d.reqCQE(q, &op, 0, syndWRFlushErr)
	}
	if q.pendingErr != 0 {
		s := q.pendingErr
		q.pendingErr = 0
		q.failed = true
		return d.reqCQE(q, &op, 0, s)
	}
	synd, n, err := d.perform(q, &op)
	if err != nil {
		return err
	}
	if synd != 0 {
		q.failed = true
		return d.reqCQE(q, &op, 0, synd)
	}
	if op.fmCeSe&ctrlCQUpdate != 0 {
		return d.reqCQE(q, &op, n, 0)
	}
	return nil
}

// receiver is the QP whose receive queue a message of q's lands on: the
// destination QP, or for an XRC send QP, its XRC receive QP receiving
// into the XRC SRQ the request names (xrcTarget). nil: none.
func (d *device) receiver(q *dQP, op *sendOp) *dQP {
	if q.typ == "xrc_send" {
		return d.xrcTarget(q, op.xrcSRQN)
	}
	return d.qps[q.peer]
}

// xrcTarget is the receiving side of an XRC request: the XRC receive QP
// q is connected to, as it receives into the XRC SRQ srqn, which must be
// in that QP's domain. Its receives take the SRQ's WQEs and complete on
// the SRQ's CQ, with the SRQ's user index (CQE version 1) or number
// (version 0) in srqn_uidx and the receive QP's number in sop_drop_qpn.
func (d *device) xrcTarget(q *dQP, srqn uint32) *dQP {
	tgt, s := d.qps[q.peer], d.srqs[srqn]
	if tgt == nil || tgt.typ != "xrc_recv" || s == nil || s.cq == nil || s.xrcdn != tgt.xrcdn {
		return nil
	}
	return &dQP{key: tgt.key, qpn: tgt.qpn, uidx: s.uidx, typ: tgt.typ, recvCQ: s.cq, srq: true, srqp: s, mem: s.mem}
}

// responder is the memory an RC or UC request's remote address is in:
// the destination QP's process, or q's own when it has none the device
// knows.
func (d *device) responder(q *dQP) remoteMem {
	if p := d.qps[q.peer]; p != nil {
		return p.mem
	}
	return q.mem
}

// perform moves the data of one request and returns an error syndrome (0
// for success) and the byte count a requester CQE reports.
func (d *device) perform(q *dQP, op *sendOp) (uint8, uint32, error) {
	rmem := d.responder(q)
	switch op.opcode {
	case opSend, opSendImm:
		data, synd, err := d.gatherData(q, op)
		if err != nil || synd != 0 {
			return synd, 0, err
		}
		if q.typ == "ud" {
			return 0, 0, d.deliverUD(q, data, op)
		}
		dst := d.receiver(q, op)
		if dst == nil {
			return syndRemoteOpErr, 0, nil
		}
		resp := uint8(cqeRespSend)
		if op.opcode == opSendImm {
			resp = cqeRespSendIm
		}
		s, err := d.deliver(q, dst, data, resp, op)
		return s, 0, err
	case opRDMAWrite, opRDMAWriteImm:
		data, synd, err := d.gatherData(q, op)
		if err != nil || synd != 0 {
			return synd, 0, err
		}
		if !d.mr(op.rkey, op.raddr, uint64(len(data)), true, rmem.pid) {
			return syndRemoteAccessErr, 0, nil
		}
		if err := rmem.WriteAt(data, op.raddr); err != nil {
			return 0, 0, err
		}
		if op.opcode == opRDMAWriteImm {
			dst := d.receiver(q, op)
			if dst == nil {
				return syndRemoteOpErr, 0, nil
			}
			s, err := d.deliver(q, dst, nil, cqeRespWrImm, op)
			return s, 0, err
		}
		return 0, 0, nil
	case opRDMARead:
		var n uint64
		for _, g := range op.gather {
			n += g[0]
		}
		if !d.mr(op.rkey, op.raddr, n, true, rmem.pid) {
			return syndRemoteAccessErr, 0, nil
		}
		src := make([]byte, n)
		if err := rmem.ReadAt(src, op.raddr); err != nil {
			return 0, 0, err
		}
		for _, g := range op.gather {
			if !d.mr(uint32(g[1]), g[2], g[0], false, q.mem.pid) {
				return syndLocalProtErr, 0, nil
			}
			if err := q.mem.WriteAt(src[:g[0]], g[2]); err != nil {
				return 0, 0, err
			}
			src = src[g[0]:]
		}
		return 0, uint32(n), nil
	case opAtomicCS, opAtomicFA:
		if len(op.gather) != 1 || op.gather[0][0] != 8 {
			return syndLocalLengthErr, 0, nil
		}
		if !d.mr(uint32(op.gather[0][1]), op.gather[0][2], 8, false, q.mem.pid) {
			return syndLocalProtErr, 0, nil
		}
		if op.raddr&7 != 0 || !d.mr(op.rkey, op.raddr, 8, true, rmem.pid) {
			return syndRemoteAccessErr, 0, nil
		}
		var remote [8]byte
		if err := rmem.ReadAt(remote[:], op.raddr); err != nil {
			return 0, 0, err
		}
		// Remote memory holds big-endian words: the model's choice.
		old := be.Uint64(remote[:])
		if err := q.mem.WriteAt(remote[:], op.gather[0][2]); err != nil {
			return 0, 0, err
		}
		nv, write := old+op.swapAdd, true
		if op.opcode == opAtomicCS {
			nv, write = op.swapAdd, old == op.cmp
		}
		if write {
			be.PutUint64(remote[:], nv)
			if err := rmem.WriteAt(remote[:], op.raddr); err != nil {
				return 0, 0, err
			}
		}
		return 0, 8, nil
	}
	return syndLocalQPOpErr, 0, nil
}

// deliverUD sends a datagram: to the QP the address vector names, if it
// is a UD QP, else nowhere (a datagram to no one is dropped; the sender
// completes either way). The receive gets a GRH built from the address
// vector before the payload. The Q_Key is not checked: the device does
// not see the QPs' attributes.
func (d *device) deliverUD(src *dQP, data []byte, op *sendOp) error {
	if len(op.av) < avSize {
		return nil
	}
	dst := d.qps[be.Uint32(op.av[avOffDQP:])&0xffffff]
	if dst == nil || dst.typ != "ud" {
		return nil
	}
	var grh [grhSize]byte
	gid := op.av[avOffRGID : avOffRGID+16]
	v4 := string(gid[:12]) == "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff"
	if v4 {
		// RoCE v2 over IPv4: the IPv4 header in the GRH's last 20 bytes.
		h := grh[20:]
		h[0], h[1] = 0x45, op.av[avOffTClass]
		be.PutUint16(h[2:], uint16(20+8+12+len(data)+4)) // IP, UDP, BTH, DETH, ICRC
		h[8], h[9] = op.av[avOffHopLimit], 17
		copy(h[12:16], gid[12:]) // source: the model loops back
		copy(h[16:20], gid[12:])
	} else {
		be.PutUint32(grh[0:], 6<<28|uint32(op.av[avOffTClass])<<20|be.Uint32(op.av[avOffGIDFL:])&0xfffff)
		be.PutUint16(grh[4:], uint16(len(data)))
		grh[6], grh[7] = 0x1b, op.av[avOffHopLimit]
		copy(grh[8:24], gid) // source: the model loops back
		copy(grh[24:40], gid)
	}
	// flags_rqpn: the GRH-present bits (29:28), and for RoCE the packet
	// type in bits 25:24 as mlx5_ib reads it (0 RoCE v1, 2 RoCE v2 IPv4).
	flags := uint32(1) << 28
	if v4 {
		flags |= 2 << 24
	}
	resp := uint8(cqeRespSend)
	if op.opcode == opSendImm {
		resp = cqeRespSendIm
	}
	_, err := d.deliverFlags(src, dst, append(grh[:], data...), resp, op, flags)
	if errors.Is(err, errRNR) {
		// An unreliable datagram with no receive waiting is dropped.
		return nil
	}
	return err
}

// deliver lands a message on dst's receive queue: its next receive WQE's
// scatter list takes the data, and a responder CQE reports it.
func (d *device) deliver(src, dst *dQP, data []byte, respOp uint8, op *sendOp) (uint8, error) {
	return d.deliverFlags(src, dst, data, respOp, op, 0)
}

// deliverFlags is deliver with the upper bits of the responder CQE's
// flags_rqpn word.
func (d *device) deliverFlags(src, dst *dQP, data []byte, respOp uint8, op *sendOp, flags uint32) (uint8, error) {
	mem := dst.mem
	rnr := func() (uint8, error) {
		if d.waitRNR {
			return 0, errRNR
		}
		return syndRNRRetryErr, nil
	}
	var w []byte
	if dst.srq {
		// The WQE at the head of the SRQ's free list; its next segment
		// names the new head.
		s := dst.srqp
		if s == nil {
			return syndRemoteOpErr, nil
		}
		var rec [4]byte
		if err := mem.ReadAt(rec[:], s.db); err != nil {
			return 0, err
		}
		if uint16(be.Uint32(rec[:])) == uint16(s.done) {
			return rnr()
		}
		idx := uint32(s.head) & (s.cnt - 1)
		w = make([]byte, 1<<s.shift)
		if err := mem.ReadAt(w, s.buf+uint64(idx)<<s.shift); err != nil {
			return 0, err
		}
		s.head = be.Uint16(w[2:])
		s.done++
		w = w[16:]
		dst.lastRecv = uint16(idx)
	} else {
		var rec [4]byte
		if err := mem.ReadAt(rec[:], dst.db); err != nil {
			return 0, err
		}
		if uint16(be.Uint32(rec[:])) == uint16(dst.rqDone) {
			return rnr()
		}
		idx := dst.rqDone & (dst.rqCnt - 1)
		w = make([]byte, 1<<dst.rqShift)
		if err := mem.ReadAt(w, dst.rq+uint64(idx)<<dst.rqShift); err != nil {
			return 0, err
		}
		dst.rqDone++
		dst.lastRecv = uint16(dst.rqDone - 1)
	}
	left := data
	for seg := w; len(seg) >= 16 && len(left) > 0; seg = seg[16:] {
		n, key, addr := be.Uint32(seg), be.Uint32(seg[4:]), be.Uint64(seg[8:])
		if key == invalidLKey {
			break
		}
		k := min(uint64(n), uint64(len(left)))
		if !d.mr(key, addr, k, false, mem.pid) {
			return syndRemoteOpErr, d.respCQE(dst, src, cqeRespErr, syndLocalProtErr, op, 0, 0)
		}
		if err := mem.WriteAt(left[:k], addr); err != nil {
			return 0, err
		}
		left = left[k:]
	}
	if len(left) > 0 {
		return syndRemoteInvalReqErr, d.respCQE(dst, src, cqeRespErr, syndLocalLengthErr, op, 0, 0)
	}
	n := uint32(len(data))
	if respOp == cqeRespWrImm {
		n = 0
		for _, g := range op.gather {
			n += uint32(g[0])
		}
		if op.inline != nil {
			n = uint32(len(op.inline))
		}
	}
	t := d.count(mem.pid)
	t.received++
	t.bytesReceived += uint64(len(data))
	return 0, d.respCQE(dst, src, respOp, 0, op, n, flags)
}

func (d *device) reqCQE(q *dQP, op *sendOp, byteCnt uint32, synd uint8) error {
	opcode := uint8(cqeReq)
	if synd != 0 {
		opcode = cqeReqErr
	}
	return d.push(q.sendCQ, opcode, func(c []byte) {
		be.PutUint32(c[cqeOffSopDropQPN:], uint32(op.opcode)<<24|q.qpn)
		be.PutUint32(c[cqeOffSrqnUidx:], srqnUIdx(q, false))
		be.PutUint16(c[cqeOffWQECounter:], op.wqeIdx)
		be.PutUint32(c[cqeOffByteCnt:], byteCnt)
		if synd != 0 {
			c[errOffSyndrome] = synd
			c[errOffVendorSynd] = vendorSynd
		}
	})
}

func (d *device) respCQE(dst, src *dQP, opcode, synd uint8, op *sendOp, byteCnt, flags uint32) error {
	return d.push(dst.recvCQ, opcode, func(c []byte) {
		be.PutUint32(c[cqeOffSopDropQPN:], dst.qpn)
		be.PutUint32(c[cqeOffSrqnUidx:], srqnUIdx(dst, true))
		// The index of the receive WQE consumed (every caller has just
		// recorded it in lastRecv), as the device writes it: libmlx5
		// since rdma-core 55 (commit 7e8db6fbd) takes a receive's wr_id
		// from this field rather than from its own RQ tail, and an SRQ
		// receive's from it always.
		be.PutUint16(c[cqeOffWQECounter:], dst.lastRecv)
		be.PutUint32(c[cqeOffByteCnt:], byteCnt)
		if synd != 0 {
			c[errOffSyndrome] = synd
			c[errOffVendorSynd] = vendorSynd
			return
		}
		be.PutUint32(c[cqeOffFlagsRQPN:], flags|src.qpn)
		if opcode == cqeRespSendIm || opcode == cqeRespWrImm {
			be.PutUint32(c[cqeOffImmInvalPkey:], op.imm)
		}
	})
}

// srqnUIdx is the srqn_uidx of a CQE on q's behalf. With CQE version 1
// the device writes the QP's user index. With version 0 the kernel gives
// the QP none (MLX5_IB_DEFAULT_UIDX, 0xffffff) and the device writes the
// SRQ's number for a receive from an SRQ and 0 for anything else: libmlx5
// (mlx5_parse_cqe) then finds the QP by sop_drop_qpn and takes a non-zero
// srqn as "this receive came from that SRQ".
func srqnUIdx(q *dQP, recv bool) uint32 {
	if q.uidx != 0xffffff {
		return q.uidx
	}
	if recv && q.srqp != nil {
		return q.srqp.srqn
	}
	return 0
}

// push writes one CQE at the CQ's producer counter: the body first, then
// the op_own byte with the owner bit of the pass, as the device does. It
// refuses to overrun the ring: the consumer counter is the CQ's doorbell
// record's.
func (d *device) push(cq *dCQ, opcode uint8, fill func([]byte)) error {
	mem := cq.mem
	var rec [4]byte
	if err := mem.ReadAt(rec[:], cq.db); err != nil {
		return err
	}
	ci := be.Uint32(rec[:]) & 0xffffff
	if (cq.pi-ci)&0xffffff >= cq.ncqe {
		return fmt.Errorf("%s overrun: producer %d, consumer %d, %d entries", cq.key, cq.pi, ci, cq.ncqe)
	}
	e := make([]byte, cq.size)
	c := e[cq.size-64:]
	d.clock += 1000
	be.PutUint64(c[cqeOffTimestamp:], d.clock)
	fill(c)
	var owner uint8
	if cq.pi&cq.ncqe != 0 {
		owner = 1
	}
	c[cqeOffOpOwn] = opcode<<4 | owner
	addr := cq.buf + uint64(cq.pi&(cq.ncqe-1))*uint64(cq.size)
	// The body, then the byte that hands the entry to the driver.
	if err := mem.WriteAt(e[:cq.size-1], addr); err != nil {
		return err
	}
	if err := mem.WriteAt(e[cq.size-1:], addr+uint64(cq.size-1)); err != nil {
		return err
	}
	cq.pi++
	return nil
}
