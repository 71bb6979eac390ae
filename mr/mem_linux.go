package mr

import (
	"math"

	"golang.org/x/sys/unix"
)

// physicalMemory is the machine's RAM and swap, or no limit when unknown.
func physicalMemory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return math.MaxUint64
	}
	return (uint64(si.Totalram) + uint64(si.Totalswap)) * uint64(si.Unit)
}
