package cmsock

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// woken reports whether direction dir has a wake waiting for it.
func woken(w *Waiter, dir int) bool {
	select {
	case <-w.wake[dir]:
		return true
	default:
		return false
	}
}

func TestWaiterHoldAlone(t *testing.T) {
	var w Waiter
	w.Init(nil, true, 2)
	if !w.Hold(0) {
		t.Fatal("Hold of a free channel reported false")
	}
	w.Release()
	if woken(&w, 0) || woken(&w, 1) {
		t.Error("Release with nobody waiting left a wake behind")
	}
	if !w.Hold(1) {
		t.Fatal("Hold after Release reported false")
	}
	w.Release()
}

// TestWaiterHoldTakesTurns: a caller that finds the channel held sleeps
// until the holder lets go, whenever it came; none is left asleep.
func TestWaiterHoldTakesTurns(t *testing.T) {
	var w Waiter
	w.Init(nil, true, 2)
	const rounds = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside := 0
	for dir := range 2 {
		wg.Go(func() {
			for held := 0; held < rounds; {
				if !w.Hold(dir) {
					continue
				}
				mu.Lock()
				inside++
				if inside != 1 {
					t.Errorf("%d holders at once", inside)
				}
				inside--
				mu.Unlock()
				// Let the other caller run while this one holds,
				// so that it finds the channel held.
				runtime.Gosched()
				held++
				w.Release()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a caller slept through the holder's Release")
	}
}

func TestWaiterKick(t *testing.T) {
	var w Waiter
	w.Init(nil, false, 3)
	g := w.Kicks()
	w.Kick()
	if w.Kicks() != g+1 {
		t.Errorf("Kicks after Kick = %d, want %d", w.Kicks(), g+1)
	}
	for dir := range 3 {
		if !woken(&w, dir) {
			t.Errorf("Kick did not wake direction %d", dir)
		}
	}
	// WaitEvent after a kick since g returns at once, without an event.
	if w.WaitEvent(g) {
		t.Error("WaitEvent reported an event after a kick")
	}
	// A sleeper wakes on a kick that comes while it sleeps.
	slept := make(chan struct{})
	go func() { w.Sleep(1); close(slept) }()
	w.Kick()
	select {
	case <-slept:
	case <-time.After(time.Minute):
		t.Fatal("Kick did not wake a sleeper")
	}
}
