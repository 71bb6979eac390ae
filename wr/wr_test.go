package wr

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func TestStatusStrings(t *testing.T) {
	// ibv_wc_status_str's texts, which tools print.
	for s, want := range map[Status]string{
		Success: "success", LocProtErr: "local protection error", WRFlushErr: "Work Request Flushed Error",
		RemAccessErr: "remote access error", TMRndvIncomplete: "TM software rendezvous", 99: "unknown",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d) = %q, want %q", s, got, want)
		}
	}
}

func TestCompletionErr(t *testing.T) {
	ok := Completion{ID: 1}
	if ok.Err() != nil {
		t.Fatal("successful completion has an error")
	}
	bad := Completion{ID: 7, Status: RemAccessErr, VendorErr: 0x88}
	var ce *CompletionError
	if err := bad.Err(); !errors.As(err, &ce) || ce.Status != RemAccessErr || !strings.Contains(err.Error(), "remote access error") {
		t.Fatalf("Err() = %v", err)
	}
}

// SGE must keep the layout of struct ibv_sge and struct rxe_sge, which
// providers copy it into.
func TestSGELayout(t *testing.T) {
	var s SGE
	if unsafe.Sizeof(s) != 16 || unsafe.Offsetof(s.Length) != 8 || unsafe.Offsetof(s.LKey) != 12 {
		t.Fatalf("SGE layout: size %d, length at %d, lkey at %d", unsafe.Sizeof(s), unsafe.Offsetof(s.Length), unsafe.Offsetof(s.LKey))
	}
}

func TestOpcodeStrings(t *testing.T) {
	if OpRDMAWriteWithImm.String() != "RDMA_WRITE_WITH_IMM" || WCRecvRDMAWithImm.String() != "RECV_RDMA_WITH_IMM" || Opcode(99).String() != "Opcode(99)" {
		t.Error("opcode names")
	}
}
