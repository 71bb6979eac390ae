//go:build amd64 || arm64

package mlx5

import "unsafe"

// The orderings the data path needs between the CPU and the device, as
// rdma-core's util/udma_barrier.h names them. Go's sync/atomic orders
// memory between goroutines, not against a PCIe device reading host
// memory or a write-combining UAR mapping, so these are written in
// assembly (barrier_amd64.s, barrier_arm64.s). Each is a function call
// the compiler cannot move loads or stores across.

// storeRecord is how a producer hands work to the device through a
// doorbell record: udma_to_device_barrier, which makes every store before
// it (the WQEs) visible to the device before any store after it, then raw
// (the record's new value, already big-endian) at rec with one 32-bit
// store. The device reads the record with 4-byte reads, so the store must
// never be split, as the compiler may split a Go store of a value whose
// upper bytes it knows are zero.
//
//go:noescape
func storeRecord(rec *uint32, raw uint32)

// storeRelease stores v at p with one 32-bit store with release order:
// the loads and stores before it are done before it is visible (a MOV on
// amd64, STLRW on arm64). It writes records the device reads that publish
// no data (a CQ's consumer index, its arm word), and releases spinLocks.
//
//go:noescape
func storeRelease(p *uint32, v uint32)

// wcFlush (mmio_flush_writes, which is also mmio_wc_start) orders stores
// to write-combining memory (a UAR, a BlueFlame register) with every other
// store and pushes the CPU's write-combining buffers out, so that one
// doorbell reaches the device as its own PCIe write, in order.
//
//go:noescape
func wcFlush()

// mmioWrite64 stores v at addr with one 64-bit store (a doorbell), never
// split or merged by the compiler.
//
//go:noescape
func mmioWrite64(addr unsafe.Pointer, v uint64)

// ringDoorbell is a send queue's doorbell in one call: the doorbell
// record (storeRecord of raw at rec), wcFlush, the 8-byte doorbell v at
// addr (mmioWrite64), wcFlush.
//
//go:noescape
func ringDoorbell(rec *uint32, raw uint32, addr unsafe.Pointer, v uint64)

// ringBlueFlame is the same with a one-block WQE copied from src to the
// BlueFlame register at dst (mmioCopy64) as the doorbell.
//
//go:noescape
func ringBlueFlame(rec *uint32, raw uint32, dst, src unsafe.Pointer)

// mmioCopy64 copies 64 bytes from src to dst (a BlueFlame register) with
// stores in ascending address order, as rdma-core's mmio_memcpy_x64 does.
//
//go:noescape
func mmioCopy64(dst, src unsafe.Pointer)
