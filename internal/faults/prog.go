package faults

import "github.com/cilium/ebpf/asm"

// Where the headers start in a RoCEv2 frame over IPv4 without IP options:
// Ethernet (14 bytes), IPv4 (20), UDP (8), then the 12-byte BTH.
const (
	offEtherType = 12
	offIPVerIHL  = 14
	offIPProto   = 14 + 9
	offUDPCsum   = 34 + 6
	offUDPDport  = 34 + 2
	offBTH       = 42
	offOpcode    = offBTH
	offDestQP    = offBTH + 5 // 3 bytes, big endian
	offPSN       = offBTH + 9 // 3 bytes, big endian
	// A MAD to QP1: BTH, DETH (8 bytes), then the MAD header, whose
	// attribute id is at byte 16.
	offMADAttr = offBTH + 12 + 8 + 16
	minLen     = offBTH + 12
)

const (
	xdpDrop = 1
	xdpPass = 2
	tcOK    = 0 // TC_ACT_OK
	tcShot  = 2 // TC_ACT_SHOT
)

// hook is where the program runs: the receive path's XDP, or TC on egress.
// The two differ in their context (struct xdp_md, struct __sk_buff: where
// the packet's data and data_end are) and their verdicts.
type hook struct {
	data, dataEnd int16
	drop, pass    int32
}

var (
	xdpHook = hook{data: 0, dataEnd: 4, drop: xdpDrop, pass: xdpPass}
	// struct __sk_buff: data at 76, data_end at 80.
	tcHook = hook{data: 76, dataEnd: 80, drop: tcShot, pass: tcOK}
)

// program returns the program for hook h. Registers: R6 the policy (the context
// until the lookups), R7 data, R8 data_end, R9 the counters; the callee-saved
// ones, so they survive helper calls. Every packet access is checked against
// data_end right before, as the verifier wants. IPv4 with options and IPv6
// are passed untouched (rxe on the VM pair sends neither).
func program(h hook, policyFD, statsFD int) asm.Instructions {
	R0, R1, R2, R3, R4 := asm.R0, asm.R1, asm.R2, asm.R3, asm.R4
	R6, R7, R8, R9, RFP := asm.R6, asm.R7, asm.R8, asm.R9, asm.R10
	inc := func(off int16) asm.Instructions {
		ins := asm.StoreXAdd(R9, R1, asm.DWord)
		ins.Offset = off
		return asm.Instructions{asm.Mov.Imm(R1, 1), ins}
	}
	// be24 loads the 3-byte big-endian field at off into R2 (uses R4).
	be24 := func(off int16) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(R2, R7, off, asm.Byte), asm.LSh.Imm(R2, 16),
			asm.LoadMem(R4, R7, off+1, asm.Byte), asm.LSh.Imm(R4, 8), asm.Or.Reg(R2, R4),
			asm.LoadMem(R4, R7, off+2, asm.Byte), asm.Or.Reg(R2, R4),
		}
	}
	lookup := func(fd int) asm.Instructions {
		return asm.Instructions{
			asm.LoadMapPtr(R1, fd), asm.Mov.Reg(R2, RFP), asm.Add.Imm(R2, -4),
			asm.FnMapLookupElem.Call(),
		}
	}
	var p asm.Instructions
	add := func(ins ...asm.Instruction) { p = append(p, ins...) }
	addI := func(ins asm.Instructions) { p = append(p, ins...) }

	add(
		asm.Mov.Reg(R6, R1),
		asm.LoadMem(R7, R6, h.data, asm.Word),
		asm.LoadMem(R8, R6, h.dataEnd, asm.Word),
		asm.Mov.Reg(R2, R7), asm.Add.Imm(R2, minLen), asm.JGT.Reg(R2, R8, "pass"),
		// Loads are in host (little-endian) order: 0x0800 reads as 0x0008.
		asm.LoadMem(R2, R7, offEtherType, asm.Half), asm.JNE.Imm(R2, 0x0008, "pass"),
		asm.LoadMem(R2, R7, offIPVerIHL, asm.Byte), asm.JNE.Imm(R2, 0x45, "pass"),
		asm.LoadMem(R2, R7, offIPProto, asm.Byte), asm.JNE.Imm(R2, 17, "pass"),
		asm.LoadMem(R2, R7, offUDPDport, asm.Half), asm.JNE.Imm(R2, 0xb712, "pass"), // 4791
		asm.StoreImm(RFP, -4, 0, asm.Word),
	)
	addI(lookup(statsFD))
	add(asm.JEq.Imm(R0, 0, "pass"), asm.Mov.Reg(R9, R0))
	addI(inc(statSeen))
	addI(lookup(policyFD))
	add(
		asm.JEq.Imm(R0, 0, "pass"), asm.Mov.Reg(R6, R0),
		asm.LoadMem(R3, R6, polFlags, asm.Word),
		asm.Mov.Reg(R2, R3), asm.And.Imm(R2, flagEnabled), asm.JEq.Imm(R2, 0, "pass"),

		asm.Mov.Reg(R2, R3), asm.And.Imm(R2, flagOpcode), asm.JEq.Imm(R2, 0, "qpn"),
		asm.LoadMem(R2, R7, offOpcode, asm.Byte), asm.LoadMem(R4, R6, polOpcode, asm.Word),
		asm.JNE.Reg(R2, R4, "pass"),

		asm.Mov.Reg(R2, R3).WithSymbol("qpn"), asm.And.Imm(R2, flagSkipQP1), asm.JEq.Imm(R2, 0, "qpn2"),
	)
	addI(be24(offDestQP))
	add(
		asm.JEq.Imm(R2, 1, "pass"),
		asm.Mov.Reg(R2, R3).WithSymbol("qpn2"), asm.And.Imm(R2, flagQPN), asm.JEq.Imm(R2, 0, "psn"),
	)
	addI(be24(offDestQP))
	add(
		asm.LoadMem(R4, R6, polQPN, asm.Word), asm.JNE.Reg(R2, R4, "pass"),

		asm.Mov.Reg(R2, R3).WithSymbol("psn"), asm.And.Imm(R2, flagPSN), asm.JEq.Imm(R2, 0, "attr"),
	)
	addI(be24(offPSN))
	add(
		asm.LoadMem(R4, R6, polPSNFirst, asm.Word), asm.JLT.Reg(R2, R4, "pass"),
		asm.LoadMem(R4, R6, polPSNLast, asm.Word), asm.JGT.Reg(R2, R4, "pass"),

		asm.Mov.Reg(R2, R3).WithSymbol("attr"), asm.And.Imm(R2, flagAttr), asm.JEq.Imm(R2, 0, "matched"),
		asm.Mov.Reg(R2, R7), asm.Add.Imm(R2, offMADAttr+2), asm.JGT.Reg(R2, R8, "pass"),
		asm.LoadMem(R2, R7, offMADAttr, asm.Half), asm.LoadMem(R4, R6, polAttr, asm.Word),
		asm.JNE.Reg(R2, R4, "pass"),

		asm.Mov.Imm(R1, 1).WithSymbol("matched"),
	)
	matched := asm.StoreXAdd(R9, R1, asm.DWord)
	matched.Offset = statMatched
	add(
		matched,
		// Every Nth: the program's own match counter, in the policy map
		// (the program runs on one CPU at a time per receive queue, and
		// the pair's NICs have one queue).
		asm.Mov.Reg(R2, R3), asm.And.Imm(R2, flagEvery), asm.JEq.Imm(R2, 0, "prob"),
		asm.LoadMem(R2, R6, polCount, asm.Word), asm.Add.Imm(R2, 1), asm.StoreMem(R6, polCount, R2, asm.Word),
		asm.LoadMem(R4, R6, polEvery, asm.Word), asm.JEq.Imm(R4, 0, "prob"),
		asm.Mod.Reg(R2, R4), asm.JNE.Imm(R2, 0, "pass"),

		asm.Mov.Reg(R2, R3).WithSymbol("prob"), asm.And.Imm(R2, flagProb), asm.JEq.Imm(R2, 0, "limit"),
		asm.FnGetPrandomU32.Call(),
		asm.LoadMem(R4, R6, polProb, asm.Word), asm.JGE.Reg(R0, R4, "pass"),
		asm.LoadMem(R3, R6, polFlags, asm.Word), // the call clobbered R3

		asm.Mov.Reg(R2, R3).WithSymbol("limit"), asm.And.Imm(R2, flagLimit), asm.JEq.Imm(R2, 0, "act"),
		asm.LoadMem(R2, R6, polActed, asm.Word), asm.LoadMem(R4, R6, polLimit, asm.Word),
		asm.JGE.Reg(R2, R4, "pass"),

		asm.LoadMem(R2, R6, polActed, asm.Word).WithSymbol("act"), asm.Add.Imm(R2, 1),
		asm.StoreMem(R6, polActed, R2, asm.Word),
		asm.Mov.Reg(R2, R3), asm.And.Imm(R2, flagCorrupt), asm.JNE.Imm(R2, 0, "corrupt"),
	)
	addI(inc(statDropped))
	add(
		asm.Mov.Imm(R0, h.drop), asm.Return(),

		// Corrupt: flip the byte at BTH+offset (offset masked below 1024 so
		// the verifier can bound the pointer), and clear the UDP checksum
		// (0 is "none" in IPv4) so that the packet gets past UDP to rxe,
		// whose ICRC check is what must catch it.
		asm.LoadMem(R2, R6, polCorrupt, asm.Word).WithSymbol("corrupt"), asm.And.Imm(R2, 1023),
		asm.Add.Imm(R2, offBTH), asm.Mov.Reg(R1, R7), asm.Add.Reg(R1, R2),
		asm.Mov.Reg(R4, R1), asm.Add.Imm(R4, 1), asm.JGT.Reg(R4, R8, "pass"),
		asm.LoadMem(R2, R1, 0, asm.Byte), asm.Xor.Imm(R2, 0xff), asm.StoreMem(R1, 0, R2, asm.Byte),
		asm.StoreImm(R7, offUDPCsum, 0, asm.Half),
	)
	addI(inc(statCorrupted))
	add(
		asm.Mov.Imm(R0, h.pass).WithSymbol("pass"), asm.Return(),
	)
	return p
}
