//go:build linux

package fake

import (
	"slices"
	"testing"
)

// TestAllocBfreg: the static bfregs go as mlx5_ib's alloc_bfreg hands
// them out with libmlx5's default request (16 bfregs, 4 of them low
// latency): the low-latency ones (12 to 15) first, one QP each, then the
// least used medium one (1 to 11), lowest first; a freed bfreg is taken
// again; and with a v0 request every QP shares bfreg 0.
func TestAllocBfreg(t *testing.T) {
	ctx := &ucontext{lowLat: 4, bfregV2: true, bfregUse: make([]uint32, 16)}
	var got []uint32
	for range 4 + 11 + 2 {
		got = append(got, ctx.allocBfreg())
	}
	want := []uint32{12, 13, 14, 15, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2}
	if !slices.Equal(got, want) {
		t.Fatalf("bfregs %v, want %v", got, want)
	}
	f := &File{ctx: ctx}
	f.freeBfreg(&QP{bfreg: 13 + 1})
	f.freeBfreg(&QP{bfreg: 5 + 1})
	if n := ctx.allocBfreg(); n != 13 {
		t.Errorf("after freeing low-latency bfreg 13, got %d", n)
	}
	if n := ctx.allocBfreg(); n != 5 {
		t.Errorf("after freeing medium bfreg 5, got %d, want it (the least used)", n)
	}

	v0 := &ucontext{lowLat: 4, bfregUse: make([]uint32, 16)}
	for range 3 {
		if n := v0.allocBfreg(); n != 0 {
			t.Fatalf("v0 request: bfreg %d, want 0", n)
		}
	}
}
