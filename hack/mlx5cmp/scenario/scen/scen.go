//go:build linux && amd64

// Package scen holds what mlx5cmp's Go scenario programs (goscen,
// gorandom, gobench) share: the markers, the common setup and teardown
// (two registered buffers, one CQ, one RC QP connected to itself) and the
// completion lines, on rdmago's mlx5 provider through the module's public
// packages only (uverbs, qp, wr, mr).
//
// Its C twin is hack/mlx5cmp/scenario/common.c, which the C programs
// (rc.c, random.c, bench.c) share: the same calls in the same order, the
// same markers. Change one and you must change the other; the functions
// have the same names (in Go case) and order in both, so they can be
// compared by eye.
package scen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// The marker descriptor, the common setup's sizes and numbers (common.h's
// enum).
const (
	MarkFD    = 899
	BufSize   = 64 * 1024
	CQSize    = 256
	PollBatch = 16
	MaxPolls  = 100
	IBPort    = 1
	GIDIndex  = 1
	UDQKey    = 0x11111111
)

// ETIMEDOUT, as common.c checks it against <errno.h>.
const ETIMEDOUT = 110

// Prog and Args are the program's name in messages ("scenario-go") and
// its arguments as the message of a missing marker descriptor shows them
// ("SCENARIO"); each program sets them first.
var Prog, Args string

// The objects of the common setup.
var (
	Ctx        *uverbs.Context
	PD         *uverbs.PD
	Buf0, Buf1 []byte
	MR0, MR1   *mr.Region
	CQ         *uverbs.CQ
	QP         *uverbs.QP
	Caps       qp.Caps // as granted
	DGID       qp.GID  // port 1's GID 1: every QP's destination
	// NewQPSRQ, when set, is the SRQ NewQP's QP receives from.
	NewQPSRQ *uverbs.SRQ
)

// ---- markers ----

// Mark writes one marker line to MarkFD. Outside mlx5cmp the descriptor
// does not exist: say so and exit 2.
func Mark(format string, args ...any) {
	MarkBytes([]byte(fmt.Sprintf(format, args...)))
}

// MarkBytes writes one marker line that is already bytes: gobench's timed
// rounds' markers, which must not allocate.
func MarkBytes(line []byte) {
	n, err := syscall.Write(MarkFD, line)
	if err != nil || n != len(line) {
		if err == syscall.EBADF {
			fmt.Fprintf(os.Stderr, "%s: marker descriptor %d does not exist: run me under mlx5cmp (mlx5cmp run ... -- %s %s)\n", Prog, MarkFD, Prog, Args)
		} else {
			fmt.Fprintf(os.Stderr, "%s: marker write: %v (%d of %d bytes)\n", Prog, err, n, len(line))
		}
		os.Exit(2)
	}
}

// ErrnoOf returns the errno err wraps: 0 for nil, -1 for an error that
// wraps none.
func ErrnoOf(err error) int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// Fail reports an unexpected failure of call name with err, then exits 1.
func Fail(name string, err error) {
	Mark("ret %s=%d", name, ErrnoOf(err))
	fmt.Fprintf(os.Stderr, "%s: %s: %v\n", Prog, name, err)
	os.Exit(1)
}

// ---- completions ----

// WCStatus maps a status to enum ibv_wc_status's value. wr's values are
// already ibv_wc's, but the mapping is spelled out so that a change in wr
// shows here, against the literals common.c asserts.
func WCStatus(s wr.Status) int {
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

// WCOpcode maps a completion opcode to enum ibv_wc_opcode's value.
// (IBV_WC_ATOMIC_WRITE = 9, the tag-matching and driver opcodes have no
// wr counterpart; the scenarios produce none of them.)
func WCOpcode(o wr.WCOpcode) int {
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

// WCFlags maps completion flags to IBV_WC_* bits (enum ibv_wc_flags).
func WCFlags(f wr.WCFlags) uint32 {
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

// WCImm returns imm_data as ibv_wc carries it (see goscen's top comment).
func WCImm(c *wr.Completion) uint32 {
	if c.Flags&wr.WCWithInv != 0 {
		return c.Imm // invalidated_rkey: host order in ibv_wc too
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], c.Imm)
	return binary.NativeEndian.Uint32(b[:])
}

// EmitWC marks one completion: ibv_wc's fields, with ibv_wc's numeric
// values.
func EmitWC(c *wr.Completion) {
	Mark("wc wr_id=0x%x status=%d opcode=%d vendor_err=0x%x byte_len=%d imm=0x%x "+
		"qp_num=%d src_qp=%d wc_flags=0x%x pkey_index=%d slid=%d sl=%d dlid_path_bits=%d",
		c.ID, WCStatus(c.Status), WCOpcode(c.Opcode), c.VendorErr, c.ByteLen, WCImm(c),
		c.QPNum, c.SrcQP, WCFlags(c.Flags), c.PKeyIndex, c.SLID, c.SL,
		c.DLIDPathBits)
}

// ---- setup and teardown ----

// NewQP creates an RC, UC or UD QP on CQ c with the setup's capabilities
// and takes it to RTS, an RC or UC QP connected to itself (the device
// loops it back). With report set it records the granted capabilities in
// Caps and marks them. Each type is given only the attributes it takes
// (ib_modify_qp_is_ok): UC remote write access and no RDMA read/atomic or
// retry attributes; UD a Q_Key at INIT and nothing but the state (and the
// SQ PSN) after. NewQPSRQ adjusts the creation.
func NewQP(typ qp.Type, c *uverbs.CQ, report bool) *uverbs.QP {
	rc, ud := typ == qp.RC, typ == qp.UD
	nq, err := PD.CreateQP(uverbs.QPInitAttr{
		Type:   typ,
		SendCQ: c,
		RecvCQ: c,
		SRQ:    NewQPSRQ,
		Caps: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4,
			MaxInlineData: 128},
		SignalAll: false,
	})
	if err != nil {
		Fail("create_qp", err)
	}
	if report {
		Caps = nq.Caps()
		Mark("ret cap.max_send_wr=%d", Caps.MaxSendWR)
		Mark("ret cap.max_recv_wr=%d", Caps.MaxRecvWR)
		Mark("ret cap.max_send_sge=%d", Caps.MaxSendSGE)
		Mark("ret cap.max_recv_sge=%d", Caps.MaxRecvSGE)
		Mark("ret cap.max_inline_data=%d", Caps.MaxInlineData)
	}

	a := qp.Attr{
		State:         qp.StateInit,
		PKeyIndex:     0,
		PortNum:       IBPort,
		QPAccessFlags: wr.RemoteWrite,
		QKey:          UDQKey,
	}
	if rc {
		a.QPAccessFlags |= wr.RemoteRead | wr.RemoteAtomic
	}
	mask := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags
	if ud {
		mask = qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey
	}
	if err := nq.Modify(a, mask); err != nil {
		Fail("modify_init", err)
	}

	a = qp.Attr{
		State:           qp.StateRTR,
		PathMTU:         qp.MTU1024,
		DestQPNum:       nq.Num(),
		RQPSN:           0,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     12,
		AHAttr: qp.AHAttr{
			IsGlobal:  true,
			DGID:      DGID,
			SGIDIndex: GIDIndex,
			HopLimit:  64,
			PortNum:   IBPort,
		},
	}
	mask = qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	if rc {
		mask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	}
	if ud {
		mask = qp.AttrState
	}
	if err := nq.Modify(a, mask); err != nil {
		Fail("modify_rtr", err)
	}

	a = qp.Attr{
		State:       qp.StateRTS,
		SQPSN:       0,
		Timeout:     14,
		RetryCnt:    7,
		RNRRetry:    7,
		MaxRdAtomic: 1,
	}
	mask = qp.AttrState | qp.AttrSQPSN
	if rc {
		mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	if err := nq.Modify(a, mask); err != nil {
		Fail("modify_rts", err)
	}
	return nq
}

// DestroyQP moves x to ERR, then destroys it. QP.Close does that itself
// for a QP not in RESET or ERR (so that outstanding requests flush,
// waiting for the flush), which ibv_destroy_qp does not. Doing it
// explicitly on both sides keeps the command sequences the same (Close
// then skips it).
func DestroyQP(x *uverbs.QP) {
	a := qp.Attr{State: qp.StateErr}
	if err := x.Modify(a, qp.AttrState); err != nil {
		Fail("modify_err", err)
	}
	if err := x.Close(); err != nil {
		Fail("destroy_qp", err)
	}
}

// Setup opens mlx5_0, finds port 1's GID 1, allocates a PD, two buffers
// of BufSize registered with every access (buffer 0 filled with
// (i * 7 + 3) & 0xff, buffer 1 zeroed), a CQ of CQSize and an RC QP
// connected to itself, whose granted capabilities it marks.
func Setup() {
	Mark("step setup")

	// uverbs.Open covers ibv_get_device_list, the search for the name and
	// ibv_open_device.
	var err error
	Ctx, err = uverbs.Open("mlx5_0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: open mlx5_0: %v\n", Prog, err)
		os.Exit(2)
	}

	// The GID: QueryGIDTable queries the device, each port, then the
	// whole table (common.c makes the same calls); there is no
	// single-entry query like ibv_query_gid.
	ents, err := Ctx.QueryGIDTable()
	if err != nil {
		Fail("query_gid_table", err)
	}
	found := false
	for _, e := range ents {
		if e.Port == IBPort && e.Index == GIDIndex {
			DGID = e.GID
			found = true
		}
	}
	if !found {
		Fail("gid_index_1", syscall.ENOENT)
	}

	PD, err = Ctx.AllocPD()
	if err != nil {
		Fail("alloc_pd", err)
	}

	access := wr.LocalWrite | wr.RemoteWrite | wr.RemoteRead | wr.RemoteAtomic
	// mr.New allocates page-aligned zeroed memory and registers it
	// (common.c: aligned_alloc, memset 0, ibv_reg_mr).
	if MR0, err = mr.New(PD, BufSize, access); err != nil {
		Fail("reg_mr0", err)
	}
	if MR1, err = mr.New(PD, BufSize, access); err != nil {
		Fail("reg_mr1", err)
	}
	Buf0, Buf1 = MR0.Bytes(), MR1.Bytes()
	for i := range Buf0 {
		Buf0[i] = byte(i*7 + 3)
	}

	if CQ, err = Ctx.CreateCQ(uverbs.CQAttr{CQE: CQSize}); err != nil {
		Fail("create_cq", err)
	}

	QP = NewQP(qp.RC, CQ, true)
}

// Teardown destroys the setup's objects, the QP moved to ERR first
// (DestroyQP).
func Teardown() {
	Mark("step teardown")
	DestroyQP(QP)
	if err := CQ.Close(); err != nil {
		Fail("destroy_cq", err)
	}
	// Region.Close deregisters and frees (common.c: ibv_dereg_mr each,
	// then free both).
	if err := MR0.Close(); err != nil {
		Fail("dereg_mr0", err)
	}
	if err := MR1.Close(); err != nil {
		Fail("dereg_mr1", err)
	}
	if err := PD.Close(); err != nil {
		Fail("dealloc_pd", err)
	}
	if err := Ctx.Close(); err != nil {
		Fail("close_device", err)
	}
}
