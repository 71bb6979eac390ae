package cm

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
		{"OptionLevelID", OptionLevelID, abi.RDMA_OPTION_ID},
		{"OptionLevelIB", OptionLevelIB, abi.RDMA_OPTION_IB},
		{"OptionIDTOS", OptionIDTOS, abi.RDMA_OPTION_ID_TOS},
		{"OptionIDReuseAddr", OptionIDReuseAddr, abi.RDMA_OPTION_ID_REUSEADDR},
		{"OptionIDAFOnly", OptionIDAFOnly, abi.RDMA_OPTION_ID_AFONLY},
		{"OptionIDAckTimeout", OptionIDAckTimeout, abi.RDMA_OPTION_ID_ACK_TIMEOUT},
		{"OptionIBPath", OptionIBPath, abi.RDMA_OPTION_IB_PATH},
		{"JoinFullMember", uint64(JoinFullMember), abi.RDMA_MC_JOIN_FLAG_FULLMEMBER},
		{"JoinSendOnlyFullMember", uint64(JoinSendOnlyFullMember), abi.RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER},
		{"PSIPoIB", uint64(PSIPoIB), abi.RDMA_PS_IPOIB},
		{"PSTCP", uint64(PSTCP), abi.RDMA_PS_TCP},
		{"PSUDP", uint64(PSUDP), abi.RDMA_PS_UDP},
		{"PSIB", uint64(PSIB), abi.RDMA_PS_IB},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, the kernel's is %#x", c.name, c.got, c.want)
		}
	}
}
