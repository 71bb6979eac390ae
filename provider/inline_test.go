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
	for name, sges := range unreadable(t, addr) {
		if err := ProbeInline(sges); !errors.Is(err, unix.EFAULT) {
			t.Errorf("%s: %v, want EFAULT", name, err)
		}
	}
}

func TestCopyInline(t *testing.T) {
	src := []byte("0123456789abcdefghij")
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	dst := make([]byte, 32)
	n, err := CopyInline(unsafe.Pointer(&dst[0]), []wr.SGE{{Addr: addr + 10, Length: 6}, {Addr: addr, Length: 0}, {Addr: addr + 2, Length: 3}})
	if n != 9 || err != nil || string(dst[:n]) != "abcdef234" || dst[n] != 0 {
		t.Fatalf("CopyInline = %d, %v; dst %q", n, err, dst)
	}
	for name, sges := range unreadable(t, addr) {
		if n, err := CopyInline(unsafe.Pointer(&dst[0]), sges); n != 0 || !errors.Is(err, unix.EFAULT) {
			t.Errorf("%s: %d, %v; want 0, EFAULT", name, n, err)
		}
	}
}

// unreadable returns inline SGE lists that name memory a read faults on (or
// that wraps), each after a readable SGE at addr where it has two.
func unreadable(t *testing.T, addr uint64) map[string][]wr.SGE {
	gone := testenv.UnmappedAddr(t)
	// A page mapped without read access.
	none, err := unix.Mmap(-1, 0, 4096, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(none) })
	noRead := uint64(uintptr(unsafe.Pointer(&none[0])))
	return map[string][]wr.SGE{
		"nil address":    {{Addr: 0, Length: 8}},
		"low address":    {{Addr: 0x10, Length: 8}},
		"unmapped":       {{Addr: addr, Length: 8}, {Addr: gone, Length: 8}},
		"tail unmapped":  {{Addr: gone - 4, Length: 8}},
		"no read access": {{Addr: noRead, Length: 1}},
		"wraps":          {{Addr: ^uint64(0) - 2, Length: 8}},
	}
}
