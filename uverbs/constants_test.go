package uverbs

import (
	"testing"

	"github.com/rdmago/rdma/internal/abi"
)

// The exported constants are literals, so that go doc shows their values;
// they must stay the kernel's.
func TestConstantsAreTheKernels(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"AdvicePrefetch", uint64(AdvicePrefetch), abi.IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH},
		{"AdvicePrefetchWrite", uint64(AdvicePrefetchWrite), abi.IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE},
		{"AdvicePrefetchNoFault", uint64(AdvicePrefetchNoFault), abi.IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT},
		{"AdviseFlush", uint64(AdviseFlush), abi.IB_UVERBS_ADVISE_MR_FLAG_FLUSH},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, the kernel's is %#x", c.name, c.got, c.want)
		}
	}
}
