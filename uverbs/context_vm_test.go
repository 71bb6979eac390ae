package uverbs_test

import (
	"errors"
	"testing"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceCloseContextFirst closes a context while its objects are still
// open: they report ErrClosed afterwards, and closing them is harmless.
func TestDeviceCloseContextFirst(t *testing.T) {
	name := testenv.RequireDevice(t)
	ctx, err := uverbs.Open(name)
	rdmatest.Must(t, err)
	pd, err := ctx.AllocPD()
	rdmatest.Must(t, err)
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 8})
	rdmatest.Must(t, err)
	q, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: qp.Caps{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	rdmatest.Must(t, err)
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Poll(make([]wr.Completion, 1)); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("Poll after the context closed: %v", err)
	}
	if _, err := q.PostRecv([]wr.RecvWR{{ID: 1}}); !errors.Is(err, uverbs.ErrClosed) {
		t.Errorf("PostRecv after the context closed: %v", err)
	}
	for what, err := range map[string]error{"QP": q.Close(), "CQ": cq.Close(), "PD": pd.Close()} {
		if err != nil {
			t.Errorf("closing the %s after its context: %v", what, err)
		}
	}
}
