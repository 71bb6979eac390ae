//go:build !amd64 && !arm64

package mlx5

import (
	"sync/atomic"
	"unsafe"
)

// On architectures without hand-written barriers the data path falls back
// to Go's sequentially consistent atomics, which order CPU memory but are
// not known to order write-combining MMIO. This is unproven: the provider
// is meant for amd64 and arm64 (see docs/mlx5.md).

var fence atomic.Uint32

func storeRecord(rec *uint32, raw uint32) {
	fence.Add(0)
	atomic.StoreUint32(rec, raw)
}

func storeRelease(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
func fromDeviceBarrier()               { fence.Add(0) }
func wcFlush()                         { fence.Add(0) }

func mmioWrite64(addr unsafe.Pointer, v uint64) { atomic.StoreUint64((*uint64)(addr), v) }

func mmioCopy64(dst, src unsafe.Pointer) {
	for i := uintptr(0); i < 64; i += 8 {
		atomic.StoreUint64((*uint64)(unsafe.Add(dst, i)), *(*uint64)(unsafe.Add(src, i)))
	}
}

func ringDoorbell(rec *uint32, raw uint32, addr unsafe.Pointer, v uint64) {
	storeRecord(rec, raw)
	wcFlush()
	mmioWrite64(addr, v)
	wcFlush()
}

func ringBlueFlame(rec *uint32, raw uint32, dst, src unsafe.Pointer) {
	storeRecord(rec, raw)
	wcFlush()
	mmioCopy64(dst, src)
	wcFlush()
}
