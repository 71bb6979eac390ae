// Package seal carries a provider's address handle from package uverbs to
// the providers' data path through wr.SendWR without exporting how.
// wr.AH is an opaque value: a struct whose one unexported field holds the
// provider's handle. Only NewAH makes one with something in it and only
// Value reads it; a program outside the module can neither, so it cannot
// forge a destination, and go doc shows nothing of the mechanism. Both are
// generic over the struct so that this package need not import wr, and
// both work through the struct's layout, which wr's tests pin: a single
// field of type any.
package seal

import "unsafe"

// NewAH returns a T (wr.AH) holding v.
func NewAH[T any](v any) T {
	var t T
	*(*any)(unsafe.Pointer(&t)) = v
	return t
}

// Value returns what the T (wr.AH) at p holds.
func Value[T any](p *T) any { return *(*any)(unsafe.Pointer(p)) }
