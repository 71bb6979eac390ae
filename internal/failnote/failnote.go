// Package failnote lets this module's providers report the QPs of failed
// completions from inside their poll, where the status is at hand, so
// that uverbs need not pass over every polled completion again to find
// them (a tenth of an mlx5 poll's instructions per completion,
// docs/performance.md). A provider's CQ type registers a setter; uverbs
// installs its note on each CQ it creates. CQs of providers registered
// from outside the module have no setter, and uverbs keeps its own pass
// for them.
package failnote

// setters are the providers' setters, each reporting whether cq is of
// its type (and then installing fn on it).
var setters []func(cq any, fn func(qpn uint32)) bool

// For registers the setter of a provider's CQ type T, whose note field
// note returns. Providers call it from init.
func For[T any](note func(T) *func(qpn uint32)) {
	setters = append(setters, func(cq any, fn func(uint32)) bool {
		c, ok := cq.(T)
		if ok {
			*note(c) = fn
		}
		return ok
	})
}

// Install has cq's provider call fn with the QP number of each failed
// completion its Poll returns, before Poll returns, and reports whether
// a provider took it. It is called once, before cq is polled.
func Install(cq any, fn func(qpn uint32)) bool {
	for _, set := range setters {
		if set(cq, fn) {
			return true
		}
	}
	return false
}
