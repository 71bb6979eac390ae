package cm_test

import (
	"net/netip"
	"testing"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// bindID makes a synchronous ID bound to vmAddr, which binds it to rxe0.
func bindID(t testing.TB) *cm.ID {
	t.Helper()
	id, err := cm.CreateID(nil, nil, cm.PSTCP)
	must(t, err)
	if err := id.BindAddr(netip.AddrPortFrom(vmAddr, 0)); err != nil {
		id.Destroy()
		t.Fatal(err)
	}
	return id
}

// TestDeviceVerbsOutliveIDs: a PD and CQ made on an ID's device context,
// as cmtime and cmatose make them, stay valid after the last ID on the
// device is destroyed, and serve the next ID's QP; so does the shared PD.
func TestDeviceVerbsOutliveIDs(t *testing.T) {
	testCtx(t)
	id := bindID(t)
	vctx := id.Verbs()
	shared := id.PD()
	pd, err := vctx.AllocPD()
	must(t, err)
	defer pd.Close()
	cq, err := vctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	must(t, err)
	defer cq.Close()
	destroy(t, id) // the last ID on rxe0

	buf := alloc(t, 4096)
	m, err := pd.RegMR(buf, wr.LocalWrite)
	if err != nil {
		t.Fatalf("RegMR on a PD of the device context after the last ID went: %v", err)
	}
	must(t, m.Close())
	m, err = shared.RegMR(buf, wr.LocalWrite)
	if err != nil {
		t.Fatalf("RegMR on the shared PD after the last ID went: %v", err)
	}
	must(t, m.Close())

	id2 := bindID(t)
	defer destroy(t, id2)
	if id2.Verbs() != vctx || id2.PD() != shared {
		t.Errorf("the next ID on the device got another context or PD")
	}
	err = id2.CreateQP(pd, uverbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: defaultCaps})
	if err != nil {
		t.Fatalf("CreateQP with the kept PD and CQ: %v", err)
	}
	if q := id2.QP(); q.State() != qp.StateInit {
		t.Errorf("QP in %v", q.State())
	}
	must(t, id2.DestroyQP())
}
