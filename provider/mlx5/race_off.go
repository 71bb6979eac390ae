//go:build !race

package mlx5

const raceEnabled = false

// retired returns the ID and head count of the WQE at BB idx (masked).
// (Without the race build's atomics, which would put completeSend over
// the inliner's budget.)
func (sq *sendQueue) retired(idx uint32) (uint64, uint32) {
	r := sq.recordAt(idx & (sq.wqeCnt - 1))
	return r.id, r.head
}
