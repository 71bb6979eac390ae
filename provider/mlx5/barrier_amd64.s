#include "textflag.h"

// x86-64 is TSO: stores to write-back memory become visible in program
// order, so udma_to_device_barrier is a compiler barrier only, which the
// call itself provides; the record is one MOVL.
TEXT ·storeRecord(SB), NOSPLIT, $0-12
	MOVQ rec+0(FP), AX
	MOVL raw+8(FP), BX
	MOVL BX, (AX)
	RET

// mmio_flush_writes / mmio_wc_start: SFENCE orders write-combining stores
// with all others and drains the WC buffers.
TEXT ·wcFlush(SB), NOSPLIT, $0-0
	SFENCE
	RET

// One 8-byte MOV to the UAR.
TEXT ·mmioWrite64(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// 64 bytes as eight 8-byte MOVs in ascending order (rdma-core's generic
// mmio_memcpy_x64, which x86-64 uses).
TEXT ·mmioCopy64(SB), NOSPLIT, $0-16
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ 0(SI), AX
	MOVQ AX, 0(DI)
	MOVQ 8(SI), AX
	MOVQ AX, 8(DI)
	MOVQ 16(SI), AX
	MOVQ AX, 16(DI)
	MOVQ 24(SI), AX
	MOVQ AX, 24(DI)
	MOVQ 32(SI), AX
	MOVQ AX, 32(DI)
	MOVQ 40(SI), AX
	MOVQ AX, 40(DI)
	MOVQ 48(SI), AX
	MOVQ AX, 48(DI)
	MOVQ 56(SI), AX
	MOVQ AX, 56(DI)
	RET

// The record (MOVL; TSO orders it after the WQE stores), SFENCE, the
// doorbell (MOVQ), SFENCE.
TEXT ·ringDoorbell(SB), NOSPLIT, $0-32
	MOVQ rec+0(FP), AX
	MOVL raw+8(FP), BX
	MOVQ addr+16(FP), CX
	MOVQ v+24(FP), DX
	MOVL BX, (AX)
	SFENCE
	MOVQ DX, (CX)
	SFENCE
	RET

// The record, SFENCE, eight MOVQs to the BlueFlame register, SFENCE.
TEXT ·ringBlueFlame(SB), NOSPLIT, $0-32
	MOVQ rec+0(FP), AX
	MOVL raw+8(FP), BX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVL BX, (AX)
	SFENCE
	MOVQ 0(SI), AX
	MOVQ AX, 0(DI)
	MOVQ 8(SI), AX
	MOVQ AX, 8(DI)
	MOVQ 16(SI), AX
	MOVQ AX, 16(DI)
	MOVQ 24(SI), AX
	MOVQ AX, 24(DI)
	MOVQ 32(SI), AX
	MOVQ AX, 32(DI)
	MOVQ 40(SI), AX
	MOVQ AX, 40(DI)
	MOVQ 48(SI), AX
	MOVQ AX, 48(DI)
	MOVQ 56(SI), AX
	MOVQ AX, 56(DI)
	SFENCE
	RET

// storeRelease: under x86-64's TSO a plain store already has release
// order.
TEXT ·storeRelease(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET
