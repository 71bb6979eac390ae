package uverbs

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// AllocMW sends IB_USER_VERBS_CMD_ALLOC_MW with the PD's handle and the
// type, and keeps the kernel's rkey; Close sends UVERBS_METHOD_MW_DESTROY
// once; a window dropped without Close is deallocated by its cleanup; a
// closed window never reaches the kernel again.
func TestMemoryWindowABI(t *testing.T) {
	k, c := objectContext(t)
	pd := allocPD(t, c)
	defer pd.Close()
	mw, err := pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	if mw.Type() != MWType2 || mw.RKey() != mw.handle<<8|0x42 {
		t.Errorf("window %v, rkey %#x; want type 2 and the kernel's rkey %#x", mw.Type(), mw.RKey(), mw.handle<<8|0x42)
	}
	mw.SetRKey(wr.IncRKey(mw.RKey()))
	if mw.RKey() != mw.handle<<8|0x43 {
		t.Errorf("rkey %#x after SetRKey(IncRKey)", mw.RKey())
	}
	if _, err := pd.AllocMW(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("AllocMW(0): %v; want EINVAL", err)
	}
	destroys := func() int {
		n := 0
		calls, _ := k.snapshot()
		for _, c := range calls {
			if c.Object == abi.UVERBS_OBJECT_MW && c.Method == abi.UVERBS_METHOD_MW_DESTROY {
				n++
			}
		}
		return n
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := destroys(); n != 1 {
		t.Errorf("%d MW destroys after two Closes, want 1", n)
	}
	var q *QP
	if err := q.BindMW(mw, 1, 0, nil, 0, 0, 0); err == nil {
		t.Error("BindMW of a closed window through a nil QP succeeded")
	}
	func() {
		mw1, err := pd.AllocMW(MWType1)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.BindMW(mw1, 1, 0, nil, 0, 0, 0); !errors.Is(err, errNil) {
			t.Errorf("BindMW through a nil QP: %v", err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); destroys() < 2 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := destroys(); n != 2 {
		t.Errorf("a window dropped without Close: %d destroys, want 2", n)
	}
}
