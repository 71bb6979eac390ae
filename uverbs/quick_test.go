package uverbs

import (
	"testing"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// cpuTestDriver is the test provider marked provider.CPUBound, as rxe is.
const cpuTestDriver = 0x7e58

func init() { drivers[cpuTestDriver] = cpuDriver{} }

type cpuDriver struct{ testDriver }

func (cpuDriver) NewContext(provider.Kernel) (provider.Builder[provider.Context], error) {
	return testBuilder[provider.Context]{v: cpuProvider{}}, nil
}

type cpuProvider struct{ testProvider }

func (cpuProvider) CPUBound() {}

// On a software device (provider.CPUBound) creating CQs, QPs and SRQs and
// modifying QPs and SRQs are raw system calls; destroys and memory
// registration, which wait on other work, are ordinary ones, as is every
// command of any other device.
func TestQuickCommands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		driver uint32
		quick  bool
	}{
		{"software", cpuTestDriver, true},
		{"hardware", xrcTestDriver, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, c := newTestKernel(t, tc.driver)
			pd := allocPD(t, c)
			cq, err := c.CreateCQ(CQAttr{CQE: 4})
			if err != nil {
				t.Fatal(err)
			}
			srq, err := pd.CreateSRQ(SRQAttr{MaxWR: 4, MaxSGE: 1})
			if err != nil {
				t.Fatal(err)
			}
			q, err := pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq,
				Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			// The fake kernel refuses both modifies; the calls are what
			// matters here.
			q.Modify(qp.Attr{State: qp.StateInit, PortNum: 1, QPAccessFlags: wr.RemoteWrite},
				qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags)
			srq.Modify(SRQAttr{Limit: 1}, SRQLimit)
			mr, err := pd.RegMR(make([]byte, 64), wr.LocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []interface{ Close() error }{mr, q, srq, cq} {
				if err := o.Close(); err != nil {
					t.Fatal(err)
				}
			}

			calls, _ := k.snapshot()
			seen := map[string]bool{}
			for _, call := range calls {
				name, quick := "", false
				switch [2]uint16{call.Object, call.Method} {
				case [2]uint16{abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE}:
					name, quick = "create CQ", true
				case [2]uint16{abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_CREATE}:
					name, quick = "create SRQ", true
				case [2]uint16{abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE}:
					name, quick = "create QP", true
				case [2]uint16{abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE}:
					switch cmd, _, _ := call.attr(abi.UVERBS_ATTR_WRITE_CMD); cmd.Data {
					case abi.IB_USER_VERBS_CMD_MODIFY_QP:
						name, quick = "modify QP", true
					case abi.IB_USER_VERBS_CMD_MODIFY_SRQ:
						name, quick = "modify SRQ", true
					case abi.IB_USER_VERBS_CMD_REG_MR:
						name = "reg MR"
					}
				case [2]uint16{abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_DESTROY}:
					name = "destroy QP"
				case [2]uint16{abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_DESTROY}:
					name = "destroy CQ"
				}
				if name != "" {
					seen[name] = true
				}
				if want := quick && tc.quick; call.Quick != want {
					t.Errorf("object %d method %d (%s): raw system call %v, want %v", call.Object, call.Method, name, call.Quick, want)
				}
			}
			for _, name := range []string{"create CQ", "create SRQ", "create QP", "modify QP", "modify SRQ", "reg MR", "destroy QP", "destroy CQ"} {
				if !seen[name] {
					t.Errorf("no %s call", name)
				}
			}
		})
	}
}
