package provider_test

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/wr"
	"golang.org/x/sys/unix"
)

// A provider checks the total length of a send's gather list before it
// writes the request: the device would send the sum modulo 2^32.
func ExampleSGLength() {
	n, err := provider.SGLength([]wr.SGE{{Addr: 0x1000, Length: 64}, {Addr: 0x2000, Length: 4032}})
	fmt.Println(n, err)
	_, err = provider.SGLength([]wr.SGE{{Addr: 0x1000, Length: 1 << 31}, {Addr: 0x2000, Length: 1 << 31}})
	fmt.Println(errors.Is(err, unix.EINVAL))
	// Output:
	// 4096 <nil>
	// true
}

// An inline send names its data by address only; a provider probes it so
// that a bad address is an error, not a fault that ends the process.
func ExampleProbeInline() {
	data := []byte("inline payload")
	addr := uint64(uintptr(unsafe.Pointer(&data[0])))
	fmt.Println(provider.ProbeInline([]wr.SGE{{Addr: addr, Length: uint32(len(data))}}))
	runtime.KeepAlive(data)
	err := provider.ProbeInline([]wr.SGE{{Addr: 8, Length: 16}})
	fmt.Println(errors.Is(err, unix.EFAULT))
	// Output:
	// <nil>
	// true
}
