#include "textflag.h"

// udma_to_device_barrier: DSB ST (option 0b1110) completes earlier stores
// before later ones, for the device as an observer too; then one STRW.
TEXT ·storeRecord(SB), NOSPLIT, $0-12
	MOVD rec+0(FP), R0
	MOVWU raw+8(FP), R1
	DSB $14
	MOVW R1, (R0)
	RET

// udma_from_device_barrier: DSB LD (option 0b1101) completes earlier
// loads (the owner byte) before later ones.
TEXT ·fromDeviceBarrier(SB), NOSPLIT, $0-0
	DSB $13
	RET

// mmio_flush_writes / mmio_wc_start: DSB ST, as rdma-core uses on aarch64.
TEXT ·wcFlush(SB), NOSPLIT, $0-0
	DSB $14
	RET

// One 8-byte STR to the UAR.
TEXT ·mmioWrite64(SB), NOSPLIT, $0-16
	MOVD addr+0(FP), R0
	MOVD v+8(FP), R1
	MOVD R1, (R0)
	RET

// 64 bytes with one four-register vector load and one four-register
// vector store (rdma-core uses vld4q/vst4q for the same single 64-byte
// store in ascending order).
TEXT ·mmioCopy64(SB), NOSPLIT, $0-16
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	VLD1 (R1), [V0.D2, V1.D2, V2.D2, V3.D2]
	VST1 [V0.D2, V1.D2, V2.D2, V3.D2], (R0)
	RET

// DSB ST, the record (STRW), DSB ST, the doorbell (STR), DSB ST.
TEXT ·ringDoorbell(SB), NOSPLIT, $0-32
	MOVD rec+0(FP), R0
	MOVWU raw+8(FP), R1
	MOVD addr+16(FP), R2
	MOVD v+24(FP), R3
	DSB $14
	MOVW R1, (R0)
	DSB $14
	MOVD R3, (R2)
	DSB $14
	RET

// DSB ST, the record, DSB ST, one 64-byte vector copy, DSB ST.
TEXT ·ringBlueFlame(SB), NOSPLIT, $0-32
	MOVD rec+0(FP), R0
	MOVWU raw+8(FP), R1
	MOVD dst+16(FP), R2
	MOVD src+24(FP), R3
	DSB $14
	MOVW R1, (R0)
	DSB $14
	VLD1 (R3), [V0.D2, V1.D2, V2.D2, V3.D2]
	VST1 [V0.D2, V1.D2, V2.D2, V3.D2], (R2)
	DSB $14
	RET

// storeRelease: STLRW, a store-release.
TEXT ·storeRelease(SB), NOSPLIT, $0-12
	MOVD p+0(FP), R0
	MOVWU v+8(FP), R1
	STLRW R1, (R0)
	RET
