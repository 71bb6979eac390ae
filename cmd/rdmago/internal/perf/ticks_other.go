//go:build !amd64

package perf

import "time"

var monoBase = time.Now()

// ticks is the monotonic clock in nanoseconds where no counter instruction
// is wired up.
func ticks() uint64 { return uint64(time.Since(monoBase)) }

// haveTicks: stamps are already nanoseconds.
const haveTicks = false
