//go:build linux && amd64

package main

import "fmt"

// regions names addresses in a target's memory. Two processes place their
// buffers at different addresses, and libmlx5 and rdmago lay out doorbell
// records differently, so a transcript never shows an address as a number:
// an address inside a known region (a registered MR, a CQ's or QP's buffer)
// is that region and an offset; any other is named by the order in which
// it first appeared, which is the same in two runs of drivers that do the
// same things in the same order.
type regions struct {
	known []region
	seen  map[uint64]string
	keys  map[uint32]string
}

type region struct {
	name         string
	base, length uint64
}

func newRegions() *regions {
	return &regions{seen: map[uint64]string{}, keys: map[uint32]string{}}
}

// add names [base, base+length). A later region wins where two overlap:
// memory registered again after a deregistration is the new MR's.
func (r *regions) add(name string, base, length uint64) {
	g := region{name, base, length}
	for i := len(r.known) - 1; i >= 0; i-- {
		if r.known[i] == g {
			// Already known: move it to the end, where it wins.
			r.known = append(append(r.known[:i:i], r.known[i+1:]...), g)
			return
		}
	}
	r.known = append(r.known, g)
}

func (r *regions) addKey(name string, key uint32) { r.keys[key] = name }

func (r *regions) addr(a uint64) string {
	for i := len(r.known) - 1; i >= 0; i-- {
		k := r.known[i]
		if a >= k.base && a < k.base+k.length {
			return fmt.Sprintf("%s+%#x", k.name, a-k.base)
		}
	}
	if a == 0 {
		return "0"
	}
	return firstSeen(&r.seen, "addr", a)
}

func (r *regions) key(k uint32) string {
	if n, ok := r.keys[k]; ok {
		return n
	}
	return fmt.Sprintf("%#x", k)
}
