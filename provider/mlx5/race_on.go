//go:build race

package mlx5

import "sync/atomic"

// raceEnabled: built with the race detector. Work request IDs are written
// by a post and read by a poll under different locks, ordered only
// through the device, which the detector cannot see; in race builds they
// go through sync/atomic so the detector sees an edge.
const raceEnabled = true

// retired returns the ID and head count of the WQE at BB idx (masked).
func (sq *sendQueue) retired(idx uint32) (uint64, uint32) {
	r := sq.recordAt(idx & (sq.wqeCnt - 1))
	return atomic.LoadUint64(&r.id), atomic.LoadUint32(&r.head)
}
