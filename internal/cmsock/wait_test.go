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
	if !w.Hold(0, w.Reaps()) {
		t.Fatal("Hold of a free channel reported false")
	}
	w.Release()
	if woken(&w, 0) || woken(&w, 1) {
		t.Error("Release with nobody waiting left a wake behind")
	}
	if !w.Hold(1, w.Reaps()) {
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
				if !w.Hold(dir, w.Reaps()) {
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
	if w.WaitEvent(g, false) {
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

// TestWaiterReapedNotSleptThrough: a caller that finds the channel held
// does not sleep when a poll reaped since it read Reaps (the holder may
// have polled past what it waits for, let go before it counted itself a
// sleeper, and gone back to the channel), and one that sleeps wakes when a
// poll reaps.
func TestWaiterReapedNotSleptThrough(t *testing.T) {
	var w Waiter
	w.Init(nil, true, 2)
	if !w.Hold(0, w.Reaps()) {
		t.Fatal("Hold of a free channel reported false")
	}
	// The writer polled before the reader's reap, and comes to the
	// channel after it.
	seen := w.Reaps()
	w.Reaped()
	if woken(&w, 1) {
		t.Fatal("Reaped with nobody asleep left a wake behind")
	}
	done := make(chan bool, 1)
	// returns waits for the Hold under way to report false.
	returns := func(what string) {
		t.Helper()
		select {
		case held := <-done:
			if held {
				t.Fatal("Hold took a held channel")
			}
		case <-time.After(time.Minute):
			t.Fatal(what)
		}
	}
	go func() { done <- w.Hold(1, seen) }()
	returns("Hold slept through a reap since the caller's poll")

	// A caller asleep in Hold wakes when a poll reaps, while the
	// holder still holds.
	go func() { done <- w.Hold(1, w.Reaps()) }()
	for w.sleepers.Load() == 0 {
		runtime.Gosched()
	}
	w.Reaped()
	returns("a sleeper slept through a reap")
	w.Release()
}
