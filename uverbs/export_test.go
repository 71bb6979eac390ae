package uverbs

// CollectUntil is waitFor for the device tests, in package uverbs_test,
// which see the identifiers this package's test files export.
var CollectUntil = waitFor

// CreateCQKernelFlags is CreateCQ that sends the create flags attr asks
// for even where the provider lacks them, so that a device test sees
// what the kernel itself answers.
func CreateCQKernelFlags(c *Context, attr CQAttr) (*CQ, error) { return c.createCQ(attr, true) }

// HandleOf is a PD's kernel handle, which the device tests log.
func HandleOf(pd *PD) uint32 { return pd.handle }

// DirectMiss is the channel's count of direct waits that found no event
// at their first read (which decides whether a wait reads first).
func DirectMiss(ch *CompChannel) uint8 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.directMiss
}

// DirectSleeping reports whether a GetEventDirect sleeps with no bound.
func DirectSleeping(ch *CompChannel) bool { return ch.sleeper.Load() != 0 }

// DirectUnbounded says whether direct sleeps may have no bound here.
var DirectUnbounded = directUnbounded

// AsyncPreemptOff is the GODEBUG reading that keeps direct sleeps bounded.
var AsyncPreemptOff = asyncPreemptOff
