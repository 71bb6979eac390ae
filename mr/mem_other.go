//go:build !linux

package mr

import "math"

// physicalMemory is unknown here: no limit.
func physicalMemory() uint64 { return math.MaxUint64 }
