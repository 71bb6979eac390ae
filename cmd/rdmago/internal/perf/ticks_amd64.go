package perf

// ticks reads the time-stamp counter, as perftest's get_cycles does: a
// handful of instructions where the runtime's clock (a vDSO call on the
// system stack) takes well over a hundred, twice per message in a
// bandwidth run's stamps. Stamps are turned into nanoseconds once the
// measured loop is over (perfRun.nanos).
func ticks() uint64

// haveTicks: stamps are counter ticks, to be scaled.
const haveTicks = true
