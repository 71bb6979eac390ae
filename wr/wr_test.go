package wr

import (
	"errors"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rdmago/rdma/internal/seal"
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

func TestCompletionErrorIs(t *testing.T) {
	if err := (&Completion{Status: Success}).Err(); err != nil {
		t.Fatalf("Success: %v", err)
	}
	for s := LocLenErr; s <= TMRndvIncomplete+1; s++ {
		err := (&Completion{ID: 9, Status: s}).Err()
		var ce *CompletionError
		if !errors.As(err, &ce) || ce.Status != s || ce.ID != 9 {
			t.Errorf("status %d: errors.As gives %+v", s, ce)
		}
		if s.Errno() == 0 || !errors.Is(err, s.Errno()) {
			t.Errorf("status %v: %v does not match its errno %v", s, err, s.Errno())
		}
		if errors.Is(err, ErrFlushed) != (s == WRFlushErr) {
			t.Errorf("status %v: errors.Is(err, ErrFlushed) = %v", s, errors.Is(err, ErrFlushed))
		}
	}
	for s, want := range map[Status]syscall.Errno{
		RetryExcErr: syscall.ETIMEDOUT, RNRRetryExcErr: syscall.ETIMEDOUT, RemAccessErr: syscall.EACCES,
		LocProtErr: syscall.EFAULT, LocLenErr: syscall.EMSGSIZE, WRFlushErr: syscall.ECANCELED, 99: syscall.EIO,
	} {
		if err := (&Completion{Status: s}).Err(); !errors.Is(err, want) {
			t.Errorf("status %v: %v does not match %v", s, err, want)
		}
	}
	if err := (&Completion{Status: WRFlushErr}).Err(); errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a flush matches net.ErrClosed or ECONNRESET: %v", err)
	}
}

// AH's layout is what internal/seal relies on to make and read one: a
// single field of type any.
func TestAHLayout(t *testing.T) {
	ty := reflect.TypeFor[AH]()
	if ty.NumField() != 1 || ty.Field(0).Type != reflect.TypeFor[any]() || ty.Field(0).Offset != 0 || ty.Size() != unsafe.Sizeof(any(nil)) {
		t.Fatalf("wr.AH is %v: internal/seal needs exactly one field, of type any", ty)
	}
	var ah AH
	ah.h = 42
	if seal.Value(&ah) != 42 || seal.NewAH[AH]("x").h != "x" {
		t.Fatal("internal/seal does not read or make wr.AH")
	}
}
