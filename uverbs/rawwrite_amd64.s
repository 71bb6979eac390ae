//go:build linux

#include "textflag.h"

// func rawWrite(fd int, p unsafe.Pointer, n int) (r int, errno unix.Errno)
TEXT ·rawWrite(SB), NOSPLIT, $0-40
	MOVQ	fd+0(FP), DI
	MOVQ	p+8(FP), SI
	MOVQ	n+16(FP), DX
	MOVL	$1, AX // SYS_write
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r+24(FP)
	NEGQ	AX
	MOVQ	AX, errno+32(FP)
	RET
ok:
	MOVQ	AX, r+24(FP)
	MOVQ	$0, errno+32(FP)
	RET
