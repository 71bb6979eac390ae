//go:build linux

package fake

import (
	"reflect"
	"unsafe"
)

// bytesOf views a uapi struct as the bytes the kernel copies: the target
// has this machine's layout and byte order (linux/amd64 or arm64).
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// fromBytes fills a T from b; a short b leaves the tail zero.
func fromBytes[T any](b []byte) *T {
	v := new(T)
	copy(bytesOf(v), b)
	return v
}

// structBytes returns the size of the struct typ points to and a function
// that decodes bytes into a new one.
func structBytes(typ any) (int, func([]byte) any) {
	t := reflect.TypeOf(typ).Elem()
	return int(t.Size()), func(b []byte) any {
		v := reflect.New(t)
		copy(unsafe.Slice((*byte)(v.UnsafePointer()), t.Size()), b)
		return v.Interface()
	}
}

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

func roundupPow2(v uint64) uint64 {
	r := uint64(1)
	for r < v {
		r <<= 1
	}
	return r
}
