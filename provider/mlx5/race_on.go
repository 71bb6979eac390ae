//go:build race

package mlx5

// raceEnabled: built with the race detector. Work request IDs are written
// by a post and read by a poll under different locks, ordered only
// through the device, which the detector cannot see; in race builds they
// go through sync/atomic so the detector sees an edge.
const raceEnabled = true
