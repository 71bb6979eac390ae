package mr_test

import (
	"fmt"
	"log"
	"os"
	"unsafe"

	"github.com/rdmago/rdma/mr"
)

// Page-aligned, zeroed memory, before any device is involved. Registering
// it (uverbs.PD.RegMR, or mr.New for allocation and registration at once)
// needs a device.
func ExampleAlloc() {
	m, err := mr.Alloc(10000)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	b := m.Bytes()
	start := uintptr(unsafe.Pointer(&b[0]))
	fmt.Println(len(b), b[0], b[len(b)-1], start%uintptr(os.Getpagesize()) == 0)
	m.Close()
	fmt.Println(m.Bytes() == nil)
	// Output:
	// 10000 0 0 true
	// true
}
