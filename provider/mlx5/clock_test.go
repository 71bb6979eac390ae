package mlx5

import (
	"errors"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// TestTimestampToNSVectors converts timestamps as mlx5dv_ts_to_ns does
// (zvectors_test.go, from rdma-core's mlx5dv.h).
func TestTimestampToNSVectors(t *testing.T) {
	if len(tsToNSVectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range tsToNSVectors {
		if got := v.info.toNS(v.ts); got != v.ns {
			t.Errorf("%+v: timestamp %#x is %d ns, want %d", v.info, v.ts, got, v.ns)
		}
	}
}

// TestClock reads the model's clock pages through the context: the core
// clock register, and timestamps converted with the clock info page, as
// the kernel's mlx5_ib maps them.
func TestClock(t *testing.T) {
	h := newHCA(t)
	h.clock = true
	c := h.openContext()
	want := []int64{clockMmapOffset(abi.MLX5_IB_MMAP_CORE_CLOCK, 0, h.pageSize), clockMmapOffset(abi.MLX5_IB_MMAP_CLOCK_INFO, abi.MLX5_IB_CLOCK_INFO_V1, h.pageSize)}
	if got := h.clockMmaps(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("clock pages mapped at %#x, want %#x", got, want)
	}

	for _, v := range []uint64{0x0000000100000002, 0xfedcba9876543210, 0} {
		h.setCoreClock(v)
		got, err := c.ReadClock()
		if err != nil || got != v {
			t.Errorf("clock %#x: read %#x, %v", v, got, err)
		}
	}

	v := tsToNSVectors[len(tsToNSVectors)/2]
	h.setClockInfo(v.info, 2)
	ns, err := c.TimestampNS(v.ts)
	if err != nil || ns != v.ns {
		t.Errorf("timestamp %#x: %d ns, %v; want %d", v.ts, ns, err, v.ns)
	}

	// The kernel never finishes its update: EBUSY, not a hang.
	h.setClockInfo(v.info, abi.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
	if _, err := c.TimestampNS(v.ts); !errors.Is(err, unix.EBUSY) {
		t.Errorf("clock info being updated: %v, want EBUSY", err)
	}
	h.setClockInfo(v.info, 4)

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadClock(); !errors.Is(err, errClosed) {
		t.Errorf("ReadClock after Close: %v", err)
	}
	if _, err := c.TimestampNS(1); !errors.Is(err, errClosed) {
		t.Errorf("TimestampNS after Close: %v", err)
	}
}

// TestClockAbsent: a kernel that offers no clock pages (rdma-core then
// maps none) makes the clock calls fail with EOPNOTSUPP.
func TestClockAbsent(t *testing.T) {
	h := newHCA(t)
	c := h.openContext()
	if got := h.clockMmaps(); len(got) != 0 {
		t.Fatalf("clock pages mapped at %#x without the kernel offering them", got)
	}
	if _, err := c.ReadClock(); !errors.Is(err, unix.EOPNOTSUPP) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadClock: %v", err)
	}
	if _, err := c.TimestampNS(1); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("TimestampNS: %v", err)
	}
}

// TestClockConcurrentUpdate converts while a writer rewrites the clock
// info page as the kernel does (sign odd while writing): every answer is
// one of the two consistent conversions, never a mix.
func TestClockConcurrentUpdate(t *testing.T) {
	h := newHCA(t)
	h.clock = true
	c := h.openContext()
	a, b := tsToNSVectors[0], tsToNSVectors[len(tsToNSVectors)-1]
	b.info.lastCycles = a.info.lastCycles // the same timestamp in both
	nsA, nsB := a.info.toNS(a.ts), b.info.toNS(a.ts)
	if nsA == nsB {
		t.Fatal("the two clock infos convert alike")
	}
	h.setClockInfo(a.info, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := (*abi.Mlx5IbClockInfo)(unsafe.Pointer(&h.clockInfo[0]))
		sign := uint32(0)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ci := a.info
			if i%2 == 1 {
				ci = b.info
			}
			atomic.StoreUint32(&p.Sign, sign|abi.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING)
			writeClockInfo(p, ci)
			sign += 2
			atomic.StoreUint32(&p.Sign, sign)
		}
	}()
	for range 20000 {
		ns, err := c.TimestampNS(a.ts)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			t.Fatal(err)
		}
		if err == nil && ns != nsA && ns != nsB {
			close(stop)
			<-done
			t.Fatalf("converted to %d, neither %d nor %d", ns, nsA, nsB)
		}
	}
	close(stop)
	<-done
}

// writeClockInfo stores ci into the page's fields, atomically each, as
// the kernel's writer does between its sign updates.
func writeClockInfo(p *abi.Mlx5IbClockInfo, ci clockInfo) {
	atomic.StoreUint64(&p.Nsec, ci.nsec)
	atomic.StoreUint64(&p.Cycles, ci.lastCycles)
	atomic.StoreUint64(&p.Frac, ci.frac)
	atomic.StoreUint32(&p.Mult, ci.mult)
	atomic.StoreUint32(&p.Shift, ci.shift)
	atomic.StoreUint64(&p.Mask, ci.mask)
}
