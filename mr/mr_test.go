package mr

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestAlloc(t *testing.T) {
	m, err := Alloc(5000)
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bytes()
	if len(b) != 5000 || uintptr(unsafe.Pointer(&b[0]))%uintptr(unix.Getpagesize()) != 0 {
		t.Fatalf("got %d bytes at %p; want 5000, page-aligned", len(b), &b[0])
	}
	for _, c := range b {
		if c != 0 {
			t.Fatal("memory not zeroed")
		}
	}
	b[4999] = 1 // writable to the end
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
	if m.Bytes() != nil {
		t.Fatal("Bytes after Free")
	}
	if _, err := Alloc(0); err == nil {
		t.Fatal("Alloc(0) succeeded")
	}
}
