package mlx5

import "unsafe"

// The device's own formats (the "PRM": the ConnectX programmer's reference
// manual), as rdma-core's providers/mlx5/mlx5dv.h and wqe.h publish them.
// The kernel ABI (create requests and responses) lives in internal/abi; what
// is here never crosses the system-call boundary: it is what the library
// writes into queue memory and reads back from it.

// Send WQE opcodes (the low byte of a control segment's opmod_idx_opcode,
// MLX5_OPCODE_*).
const (
	opNOP          = 0x00
	opSendInval    = 0x01
	opRDMAWrite    = 0x08
	opRDMAWriteImm = 0x09
	opSend         = 0x0a
	opSendImm      = 0x0b
	opTSO          = 0x0e
	opRDMARead     = 0x10
	opAtomicCS     = 0x11
	opAtomicFA     = 0x12
	opUMR          = 0x25
)

// Control segment fm_ce_se bits (MLX5_WQE_CTRL_*).
const (
	ctrlSolicited  = 1 << 1 // SE: solicited event at the responder
	ctrlCQUpdate   = 2 << 2 // CE=2: always write a CQE
	ctrlFence      = 4 << 5 // FM=4: wait for earlier reads and atomics
	ctrlSmallFence = 1 << 5 // FM=1: initiator small fence
)

// Segment sizes in bytes. A send WQE is built of 16-byte units ("ds",
// data segments in the PRM's wider sense) in 64-byte basic blocks (BBs).
const (
	sendWQEBB      = 64 // MLX5_SEND_WQE_BB
	sendWQEShift   = 6
	ctrlSegSize    = 16 // struct mlx5_wqe_ctrl_seg
	raddrSegSize   = 16 // struct mlx5_wqe_raddr_seg
	atomicSegSize  = 16 // struct mlx5_wqe_atomic_seg
	dataSegSize    = 16 // struct mlx5_wqe_data_seg
	datagramSize   = 48 // struct mlx5_wqe_datagram_seg (an address vector)
	inlineHdrSize  = 4  // struct mlx5_wqe_inline_seg
	srqNextSegSize = 16 // struct mlx5_wqe_srq_next_seg
	xrcSegSize     = 16 // struct mlx5_wqe_xrc_seg
	// The UMR segments a memory-window bind needs. rdma-core reserves
	// room for them in every RC/UC WQE even when no window is ever bound,
	// so the SQ has the same shape as its.
	umrCtrlSegSize  = 48 // struct mlx5_wqe_umr_ctrl_seg
	mkeyCtxSegSize  = 64 // struct mlx5_wqe_mkey_context_seg
	umrKLMSegSize   = 16 // struct mlx5_wqe_umr_klm_seg
	rwqeSigSize     = 16 // struct mlx5_rwqe_sig
	cqe64Size       = 64 // struct mlx5_cqe64
	cqe128Size      = 128
	atomicOperandSz = 8 // MLX5_ATOMIC_SIZE
)

// Data segment and inline segment markers.
const (
	invalidLKey  = 0x100      // MLX5_INVALID_LKEY: ends a receive scatter list
	inlineSeg    = 0x80000000 // MLX5_INLINE_SEG, in the inline byte count
	extendedUDAV = 0x80000000 // MLX5_EXTENDED_UD_AV, in the datagram dqp
)

// CQE opcodes (the high nibble of op_own, MLX5_CQE_*).
const (
	cqeReq        = 0
	cqeRespWrImm  = 1
	cqeRespSend   = 2
	cqeRespSendIm = 3
	cqeRespSendIn = 4
	cqeResizeCQ   = 5
	cqeNoPacket   = 6
	cqeSigErr     = 12
	cqeReqErr     = 13
	cqeRespErr    = 14
	cqeInvalid    = 15
)

// op_own bits besides the opcode.
const (
	cqeOwnerMask     = 1
	cqeSolicitedBit  = 1 << 1
	inlineScatter32  = 0x4 // MLX5_INLINE_SCATTER_32
	inlineScatter64  = 0x8 // MLX5_INLINE_SCATTER_64
	cqeFormatShift   = 2
	cqeOpcodeShift   = 4
	cqeFormatMask    = 3
	cqeInvalidOpOwn  = cqeInvalid << cqeOpcodeShift
	cqeQPNMask       = 0xffffff
	cqeSrqnUidxMask  = 0xffffff
	cqeConsIndexMask = 0xffffff
)

// Error CQE syndromes (MLX5_CQE_SYNDROME_*).
const (
	syndLocalLengthErr    = 0x01
	syndLocalQPOpErr      = 0x02
	syndLocalProtErr      = 0x04
	syndWRFlushErr        = 0x05
	syndMWBindErr         = 0x06
	syndBadRespErr        = 0x10
	syndLocalAccessErr    = 0x11
	syndRemoteInvalReqErr = 0x12
	syndRemoteAccessErr   = 0x13
	syndRemoteOpErr       = 0x14
	syndTransportRetryErr = 0x15
	syndRNRRetryErr       = 0x16
	syndRemoteAbortedErr  = 0x22
)

// Offsets inside a 64-byte CQE (struct mlx5_cqe64 and, for errors, struct
// mlx5_err_cqe, which overlays it).
const (
	cqeOffMLPath       = 17 // ml_path
	cqeOffSLID         = 22 // slid, be16
	cqeOffFlagsRQPN    = 24 // flags_rqpn, be32: sl<<24 | grh<<28 | source QPN
	cqeOffSrqnUidx     = 32 // srqn_uidx, be32
	cqeOffImmInvalPkey = 36 // imm_inval_pkey, be32
	cqeOffByteCnt      = 44 // byte_cnt, be32
	cqeOffTimestamp    = 48 // timestamp, be64: the device's clock when it wrote the CQE
	cqeOffSopDropQPN   = 56 // sop_drop_qpn, be32: WQE opcode<<24 | QPN
	cqeOffWQECounter   = 60 // wqe_counter, be16
	cqeOffSignature    = 62
	cqeOffOpOwn        = 63
	errOffVendorSynd   = 54 // mlx5_err_cqe.vendor_err_synd
	errOffSyndrome     = 55 // mlx5_err_cqe.syndrome
)

// CQ doorbell (MLX5_CQ_DOORBELL, MLX5_CQ_DB_REQ_NOT*), and the doorbell
// record slots: a CQ's record holds the consumer index and the arm word, a
// QP's the receive and send counters.
const (
	cqDoorbellOffset = 0x20
	cqDBReqNotSol    = 1 << 24
	cqDBReqNot       = 0 << 24
	cqSetCI          = 0 // MLX5_CQ_SET_CI
	cqArmDB          = 1 // MLX5_CQ_ARM_DB
	rcvDBR           = 0 // MLX5_RCV_DBR
	sndDBR           = 1 // MLX5_SND_DBR
)

// UAR layout (mlx5.h, mlx5-abi.h).
const (
	adapterPageSize      = 4096  // MLX5_ADAPTER_PAGE_SIZE: one UAR
	bfOffset             = 0x800 // MLX5_BF_OFFSET: first BlueFlame register in a UAR
	nonFPBfregsPerUAR    = 2     // MLX5_NUM_NON_FP_BFREGS_PER_UAR
	bfregsPerUAR         = 4     // NUM_BFREGS_PER_UAR
	maxUARs              = 1 << 8
	maxBfregs            = maxUARs * nonFPBfregsPerUAR
	defTotalUUARs        = 8 * nonFPBfregsPerUAR // MLX5_DEF_TOT_UUARS
	medBfregsThreshold   = 12                    // MLX5_MED_BFREGS_TSHOLD
	defLowLatencyUUARs   = 4                     // rdma-core's MLX5_NUM_LOW_LAT_UUARS default
	mmapCmdShift         = 8                     // MLX5_IB_MMAP_CMD_SHIFT
	mmapRegularPagesCmd  = 0                     // MLX5_MMAP_GET_REGULAR_PAGES_CMD
	defaultUIDX          = 0xffffff              // MLX5_IB_DEFAULT_UIDX: "no user index" (CQE version 0)
	cqeVersion1          = 1                     // MLX5_CQE_VERSION_V1
	qpcPageOffsetQuanta  = 64                    // MLX5_QPC_PAGE_OFFSET_QUANTA
	roceUDPEncapPortMin  = 0xc000                // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
	roceUDPEncapPortMax  = 0xffff
	grhFlowLabelMask     = 0x000fffff
	ethernetLLSize       = 6
	maxCQEntries         = 1 << 24
	defaultCacheLineSize = 64
)

// Big-endian accessors on raw queue memory: one byte swap (toBE*, which
// is free on big-endian machines) and one store or load of the full width.
// (encoding/binary's byte-at-a-time form compiles to the same when the
// compiler recognizes it, but falls back to single-byte stores when it
// knows some bytes of the value are zero.)

func putBE16(p unsafe.Pointer, v uint16) { *(*uint16)(p) = toBE16(v) }
func putBE32(p unsafe.Pointer, v uint32) { *(*uint32)(p) = toBE32(v) }
func putBE64(p unsafe.Pointer, v uint64) { *(*uint64)(p) = toBE64(v) }
func getBE16(p unsafe.Pointer) uint16    { return toBE16(*(*uint16)(p)) }
func getBE32(p unsafe.Pointer) uint32    { return toBE32(*(*uint32)(p)) }
func getBE64(p unsafe.Pointer) uint64    { return toBE64(*(*uint64)(p)) }

// beWord32 returns the value whose native in-memory bytes are v
// big-endian: what a doorbell record holds.
func beWord32(v uint32) uint32 { return toBE32(v) }

// publishRecord stores v big-endian in a doorbell record after the WQEs
// it publishes (storeRecord).
func publishRecord(rec *uint32, v uint32) { storeRecord(rec, beWord32(v)) }

// setRecord stores v big-endian in a doorbell record that publishes no
// data (storeRelease).
func setRecord(rec *uint32, v uint32) { storeRelease(rec, beWord32(v)) }

func at(p unsafe.Pointer, off uintptr) unsafe.Pointer { return unsafe.Add(p, off) }

func roundUpPow2(v uint32) uint32 {
	if v <= 1 {
		return 1
	}
	v--
	v |= v >> 1
	v |= v >> 2
	v |= v >> 4
	v |= v >> 8
	v |= v >> 16
	return v + 1
}

// ilog2 is rdma-core's ilog32(v-1) for powers of two: the shift of v.
func ilog2(v uint32) uint32 {
	var s uint32
	for v > 1 {
		v >>= 1
		s++
	}
	return s
}

func alignUp(v, a int) int { return (v + a - 1) / a * a }
