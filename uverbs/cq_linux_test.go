package uverbs_test

import (
	"testing"

	"github.com/rdmago/rdma/uverbs"
)

// TestAsyncPreemptOff reads GODEBUG as the runtime does: the last setting
// of a name wins, any integer but 0 turns preemption signals off, and a
// value that is not an integer changes nothing.
func TestAsyncPreemptOff(t *testing.T) {
	for _, tc := range []struct {
		godebug string
		want    bool
	}{
		{"", false},
		{"asyncpreemptoff=1", true},
		{"asyncpreemptoff=0", false},
		{"gctrace=1,asyncpreemptoff=1", true},
		{"asyncpreemptoff=1,asyncpreemptoff=0", false},
		{"asyncpreemptoff=0,asyncpreemptoff=2", true},
		{"asyncpreemptoff=1,asyncpreemptoff=x", true},
		{"xasyncpreemptoff=1", false},
		{"asyncpreemptoff", false},
	} {
		if got := uverbs.AsyncPreemptOff(tc.godebug); got != tc.want {
			t.Errorf("asyncPreemptOff(%q) = %v, want %v", tc.godebug, got, tc.want)
		}
	}
}
