// Package wr holds work requests, scatter-gather elements and completions:
// the values a program posts to a queue pair and polls from a completion
// queue. They mirror libibverbs' struct ibv_sge, ibv_send_wr, ibv_recv_wr and
// ibv_wc, with Go slices where the C structs have linked lists.
//
// The types carry no pointers into Go-managed memory that the device would
// follow: addresses are plain uint64 values inside registered memory
// regions, exactly as the hardware sees them. Posting therefore never
// allocates.
package wr

import (
	"errors"
	"fmt"
	"syscall"
)

// SGE is one scatter-gather element: a buffer inside a registered memory
// region, named by its address and the region's local key.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Opcode is the operation of a send work request (enum ibv_wr_opcode).
type Opcode uint32

// Send opcodes.
const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
	OpAtomicCmpAndSwp  Opcode = 5
	OpAtomicFetchAdd   Opcode = 6
	OpLocalInv         Opcode = 7
	OpBindMW           Opcode = 8
	OpSendWithInv      Opcode = 9
)

var opcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint32(o))
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	// Fence waits for earlier RDMA reads and atomics to complete first.
	Fence SendFlags = 1 << 0
	// Signaled asks for a completion even on a QP that signals only on demand.
	Signaled SendFlags = 1 << 1
	// Solicited sets the solicited-event bit for the receiver.
	Solicited SendFlags = 1 << 2
	// Inline copies the data into the work request: the buffers need not be
	// registered and may be reused as soon as the post returns.
	Inline SendFlags = 1 << 3
	// IPCsum asks the device to compute the IP checksum (raw packet QPs).
	IPCsum SendFlags = 1 << 4
)

// AddressHandle is the destination of a UD send: a *uverbs.AH.
type AddressHandle interface {
	// Dest returns where the handle sends; the zero AH once it is closed.
	Dest() AH
}

// AH is where a UD send goes, as the data path reads it: what
// uverbs.AH.Dest returns. It is opaque: only package uverbs makes one
// that names a destination, and a UD send whose AH names none (the zero
// AH, or one from an AddressHandle of the program's own) is refused with
// EINVAL.
type AH struct {
	// The provider's handle; internal/seal makes and reads it.
	h any
}

// SendWR is a send work request (struct ibv_send_wr). Which fields matter
// depends on Opcode:
//
//   - every opcode: ID, SGList (or the inline data it names), Flags;
//   - *WithImm: Imm;
//   - RDMA write and read: Remote, the peer's memory;
//   - atomics: Remote, CompareAdd, and Swap for compare-and-swap;
//     one 8-byte SGE receives the remote value as it was before;
//   - sends on UD QPs: AH, RemoteQPN, RemoteQKey;
//   - OpLocalInv and OpSendWithInv: Imm, the rkey to invalidate (as C's
//     union of imm_data and invalidate_rkey);
//   - OpBindMW: Bind, and no SGE.
type SendWR struct {
	ID     uint64 // returned as the completion's ID
	SGList []SGE
	Opcode Opcode
	Flags  SendFlags
	// Imm is the immediate data, in host byte order (sent big endian), or
	// the rkey OpLocalInv and OpSendWithInv invalidate.
	Imm uint32
	// Remote is the peer's memory an RDMA read, write or atomic targets
	// (wr.rdma and wr.atomic's remote_addr and rkey); the peer's
	// uverbs.MR.Remote gives it.
	Remote     Remote
	CompareAdd uint64
	Swap       uint64
	AH         AddressHandle
	RemoteQPN  uint32
	RemoteQKey uint32
	// RemoteSRQN is the XRC SRQ at the target that a send of an XRC QP
	// (qp.XRCSend) lands in (qp_type.xrc.remote_srqn): the number
	// uverbs.SRQ.Num returns there. Other QPs ignore it.
	RemoteSRQN uint32
	Bind       *BindInfo // OpBindMW's window and region
}

// BindInfo is what an OpBindMW work request binds (struct ibv_mw_bind_info
// with the window's keys): Length bytes at Addr of the region whose lkey
// is LKey become reachable by peers through the window's new rkey, with
// Access. A type 1 window is unbound by binding it with Length 0 (and no
// region).
type BindInfo struct {
	// MWRKey is the window's rkey now (uverbs.MW.RKey); NewRKey is the one
	// it has once bound: the same index (its top 24 bits), another key
	// (the low 8), as IncRKey makes it.
	MWRKey, NewRKey uint32
	LKey            uint32 // the region's lkey
	Addr, Length    uint64
	Access          Access // RemoteRead, RemoteWrite, RemoteAtomic
}

// IncRKey returns rkey with its key part, the low 8 bits, advanced
// (ibv_inc_rkey): a window's next rkey, which a peer holding the old one
// cannot guess from it.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID     uint64
	SGList []SGE
}

// Status is the outcome of a work request (enum ibv_wc_status).
type Status uint32

// Completion statuses.
const (
	Success          Status = 0
	LocLenErr        Status = 1
	LocQPOpErr       Status = 2
	LocEECOpErr      Status = 3
	LocProtErr       Status = 4
	WRFlushErr       Status = 5
	MWBindErr        Status = 6
	BadRespErr       Status = 7
	LocAccessErr     Status = 8
	RemInvReqErr     Status = 9
	RemAccessErr     Status = 10
	RemOpErr         Status = 11
	RetryExcErr      Status = 12
	RNRRetryExcErr   Status = 13
	LocRDDViolErr    Status = 14
	RemInvRdReqErr   Status = 15
	RemAbortErr      Status = 16
	InvEECNErr       Status = 17
	InvEECStateErr   Status = 18
	FatalErr         Status = 19
	RespTimeoutErr   Status = 20
	GeneralErr       Status = 21
	TMErr            Status = 22
	TMRndvIncomplete Status = 23
)

// statusNames are ibv_wc_status_str's texts.
var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"TM error", "TM software rendezvous",
}

// String returns the text ibv_wc_status_str gives.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// statusErrnos are the errnos a socket program would expect for each
// status (Status.Errno).
var statusErrnos = [...]syscall.Errno{
	Success:          0,
	LocLenErr:        syscall.EMSGSIZE,
	LocQPOpErr:       syscall.EINVAL,
	LocEECOpErr:      syscall.EINVAL,
	LocProtErr:       syscall.EFAULT,
	WRFlushErr:       syscall.ECANCELED,
	MWBindErr:        syscall.EINVAL,
	BadRespErr:       syscall.EPROTO,
	LocAccessErr:     syscall.EACCES,
	RemInvReqErr:     errRemoteIO,
	RemAccessErr:     syscall.EACCES,
	RemOpErr:         errRemoteIO,
	RetryExcErr:      syscall.ETIMEDOUT,
	RNRRetryExcErr:   syscall.ETIMEDOUT,
	LocRDDViolErr:    syscall.EINVAL,
	RemInvRdReqErr:   errRemoteIO,
	RemAbortErr:      syscall.ECONNABORTED,
	InvEECNErr:       syscall.EINVAL,
	InvEECStateErr:   syscall.EINVAL,
	FatalErr:         syscall.EIO,
	RespTimeoutErr:   syscall.ETIMEDOUT,
	GeneralErr:       syscall.EIO,
	TMErr:            syscall.EINVAL,
	TMRndvIncomplete: syscall.EIO,
}

// Errno is the errno a socket program would expect for a work request
// that ended with status s, 0 for Success. A *CompletionError unwraps to
// it, so errors.Is(err, syscall.ETIMEDOUT) tests for a peer that never
// answered. Several statuses share one errno; Status tells them apart.
//
//	status                                   errno
//	RetryExcErr, RNRRetryExcErr, RespTimeoutErr  ETIMEDOUT: the peer did not answer, or posted no receive, in time
//	RemAccessErr, LocAccessErr               EACCES: a key or its access rights do not allow the operation
//	LocProtErr                               EFAULT: a local buffer its key does not cover
//	LocLenErr                                EMSGSIZE: a message longer than the receive, or than the port allows
//	RemInvReqErr, RemOpErr, RemInvRdReqErr   EREMOTEIO: the peer refused or failed the request
//	RemAbortErr                              ECONNABORTED
//	BadRespErr                               EPROTO
//	WRFlushErr                               ECANCELED (and ErrFlushed)
//	FatalErr, GeneralErr, TMRndvIncomplete   EIO
//	the others, and unknown statuses         EINVAL, EIO for unknown
func (s Status) Errno() syscall.Errno {
	if int(s) < len(statusErrnos) {
		return statusErrnos[s]
	}
	return syscall.EIO
}

// ErrFlushed is what the error of a flushed work request (status
// WRFlushErr) matches: a request its queue pair never executed because the
// QP entered the error state, by a failed request before it, by the
// program's own move to ERR, or as it closed. It does not match
// net.ErrClosed or ECONNRESET: a flush is the consequence, not the cause,
// and the cause is the first completion of that QP with another status
// (or the program's own close). It also matches syscall.ECANCELED.
var ErrFlushed = errors.New("work request flushed: its queue pair is in the error state")

// WCOpcode says what a completion completes (enum ibv_wc_opcode). Receive
// opcodes have bit 7 set.
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCTSO:
		return "TSO"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint32(o))
}

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags.
const (
	WCGRH      WCFlags = 1 << 0 // a 40-byte GRH precedes the data of a UD receive
	WCWithImm  WCFlags = 1 << 1 // Imm holds immediate data
	WCIPCsumOK WCFlags = 1 << 2
	WCWithInv  WCFlags = 1 << 3 // Imm holds the invalidated rkey
)

// Completion is a work completion (struct ibv_wc).
type Completion struct {
	ID           uint64 // the work request's ID
	Status       Status
	Opcode       WCOpcode
	VendorErr    uint32
	ByteLen      uint32
	Imm          uint32 // immediate data (host byte order) or invalidated rkey, per Flags
	QPNum        uint32
	SrcQP        uint32
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	// Timestamp is when the device completed the work request, in cycles
	// of its free-running clock (ibv_wc_read_completion_ts), on a CQ
	// created with uverbs.CQAttr.Timestamps; zero on other CQs, and for
	// the flushed receives the library completes itself. The clock's
	// width is DeviceAttr.CompletionTimestampMask and its rate
	// DeviceAttr.HCACoreClock; uverbs.Context.TimestampTime converts it
	// to wall time where the device publishes its clock's parameters.
	Timestamp uint64
}

// Err returns nil for a successful completion and an error naming the
// status otherwise.
func (c *Completion) Err() error {
	if c.Status == Success {
		return nil
	}
	return &CompletionError{ID: c.ID, Status: c.Status, VendorErr: c.VendorErr}
}

// CompletionError is a work request that completed with an error status.
// It unwraps to the status's errno (Status.Errno), so errors.Is tests it as
// a socket error (errors.Is(err, syscall.ETIMEDOUT) when the peer never
// answered), and a flushed request's matches ErrFlushed; errors.As gets
// the Status for those who want it.
type CompletionError struct {
	ID        uint64
	Status    Status
	VendorErr uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("work request %d completed with status %q (%d, vendor error 0x%x)", e.ID, e.Status.String(), uint32(e.Status), e.VendorErr)
}

// Unwrap returns the status's errno, or nil for Success.
func (e *CompletionError) Unwrap() error {
	if errno := e.Status.Errno(); errno != 0 {
		return errno
	}
	return nil
}

// Is reports whether target is ErrFlushed and the request was flushed.
func (e *CompletionError) Is(target error) bool {
	return target == ErrFlushed && e.Status == WRFlushErr
}

// Access flags of memory regions and remote access (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	LocalWrite   Access = 1 << 0
	RemoteWrite  Access = 1 << 1
	RemoteRead   Access = 1 << 2
	RemoteAtomic Access = 1 << 3
	MWBind       Access = 1 << 4
	ZeroBased    Access = 1 << 5
	OnDemand     Access = 1 << 6
	HugeTLB      Access = 1 << 7
)
