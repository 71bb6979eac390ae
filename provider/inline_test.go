package provider

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/wr"
)

func TestSGLength(t *testing.T) {
	if n, err := SGLength([]wr.SGE{{Length: 10}, {Length: 20}}); n != 30 || err != nil {
		t.Fatalf("SGLength = %d, %v; want 30", n, err)
	}
	// The sum the issue found sent as 16 bytes: 0xfffffff0 + 0x20.
	if _, err := SGLength([]wr.SGE{{Length: 0xfffffff0}, {Length: 0x20}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("lengths past 2^32: %v, want EINVAL", err)
	}
}

func TestProbeInline(t *testing.T) {
	buf := make([]byte, 3*4096)
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if err := ProbeInline([]wr.SGE{{Addr: addr, Length: uint32(len(buf))}, {Addr: addr + 5, Length: 0}}); err != nil {
		t.Fatalf("readable memory: %v", err)
	}
	gone := testenv.UnmappedAddr(t)
	// A page mapped without read access.
	none, err := unix.Mmap(-1, 0, 4096, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(none)
	noRead := uint64(uintptr(unsafe.Pointer(&none[0])))
	for _, tc := range []struct {
		name string
		sges []wr.SGE
	}{
		{"nil address", []wr.SGE{{Addr: 0, Length: 8}}},
		{"low address", []wr.SGE{{Addr: 0x10, Length: 8}}},
		{"unmapped", []wr.SGE{{Addr: addr, Length: 8}, {Addr: gone, Length: 8}}},
		{"tail unmapped", []wr.SGE{{Addr: gone - 4, Length: 8}}},
		{"no read access", []wr.SGE{{Addr: noRead, Length: 1}}},
		{"wraps", []wr.SGE{{Addr: ^uint64(0) - 2, Length: 8}}},
	} {
		if err := ProbeInline(tc.sges); !errors.Is(err, unix.EFAULT) {
			t.Errorf("%s: %v, want EFAULT", tc.name, err)
		}
	}
}
