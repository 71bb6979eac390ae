//go:build linux

#include "textflag.h"

// func rawWrite(fd int, p unsafe.Pointer, n int) (r int, errno unix.Errno)
TEXT ·rawWrite(SB), NOSPLIT, $0-40
	MOVD	fd+0(FP), R0
	MOVD	p+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	$64, R8 // SYS_write
	SVC
	CMN	$4095, R0
	BCC	ok
	MOVD	$-1, R4
	MOVD	R4, r+24(FP)
	NEG	R0, R0
	MOVD	R0, errno+32(FP)
	RET
ok:
	MOVD	R0, r+24(FP)
	MOVD	ZR, errno+32(FP)
	RET
