//go:build amd64 || arm64

package mlx5

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"
)

// The assembly's stores land where, and only where, their docs say, with
// the values given: on amd64, and on arm64 under qemu-user in make test
// (make test-unit-arm64), where barrier_arm64.s executes. What this cannot
// show is ordering against a device: see docs/mlx5.md.
func TestBarrierStores(t *testing.T) {
	t.Logf("%s assembly", runtime.GOARCH)
	var recs [3]uint32
	storeRecord(&recs[1], 0x11223344)
	storeRelease(&recs[2], 0x55667788)
	if recs != [3]uint32{0, 0x11223344, 0x55667788} {
		t.Errorf("storeRecord, storeRelease: %#x", recs)
	}

	var words [3]uint64
	mmioWrite64(unsafe.Pointer(&words[1]), 0x0102030405060708)
	if words != [3]uint64{0, 0x0102030405060708, 0} {
		t.Errorf("mmioWrite64: %#x", words)
	}

	var src [64]byte
	for i := range src {
		src[i] = byte(i + 1)
	}
	// 16-byte aligned as a BlueFlame register is, with a guard on each side.
	var dst [96]byte
	off := 16 - int(uintptr(unsafe.Pointer(&dst[0]))%16)
	mmioCopy64(unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[0]))
	checkCopy := func(what string) {
		t.Helper()
		if !bytes.Equal(dst[off:off+64], src[:]) || bytes.Count(dst[:off], []byte{0}) != off || bytes.Count(dst[off+64:], []byte{0}) != len(dst)-off-64 {
			t.Errorf("%s: % x", what, dst)
		}
	}
	checkCopy("mmioCopy64")

	recs, words = [3]uint32{}, [3]uint64{}
	ringDoorbell(&recs[1], 0xaabbccdd, unsafe.Pointer(&words[1]), 0x1122334455667788)
	if recs != [3]uint32{0, 0xaabbccdd, 0} || words != [3]uint64{0, 0x1122334455667788, 0} {
		t.Errorf("ringDoorbell: record %#x, doorbell %#x", recs, words)
	}

	recs, dst = [3]uint32{}, [96]byte{}
	ringBlueFlame(&recs[1], 0x01020304, unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[0]))
	if recs != [3]uint32{0, 0x01020304, 0} {
		t.Errorf("ringBlueFlame: record %#x", recs)
	}
	checkCopy("ringBlueFlame")

	fromDeviceBarrier() // no memory effect: it must only return
	wcFlush()
}
