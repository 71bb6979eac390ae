//go:build race

package cm

// raceEnabled: built with the race detector, whose bookkeeping of locks
// and channels allocates, so allocation counts are not checked.
const raceEnabled = true
