package uverbs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceSRQShared serves two connected QPs from one SRQ and checks the
// limit event.
func TestDeviceSRQShared(t *testing.T) {
	ctx, pd := rdmatest.OpenPD(t)
	gidIndex, gid := rdmatest.RoCEv2GID(t, ctx)
	srq, err := pd.CreateSRQ(uverbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	buf, err := mr.New(pd, 1<<16, rdmatest.AllAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	caps := qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	var senders, receivers [2]*uverbs.QP
	for i := range senders {
		if senders[i], err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps}); err != nil {
			t.Fatal(err)
		}
		defer senders[i].Close()
		if receivers[i], err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, SRQ: srq, Caps: caps}); err != nil {
			t.Fatal(err)
		}
		defer receivers[i].Close()
		rdmatest.ConnectQPs(t, senders[i], receivers[i], gidIndex, gid)
	}
	if _, err := receivers[0].PostRecv([]wr.RecvWR{{ID: 1}}); err == nil {
		t.Error("posting a receive to a QP that uses an SRQ was accepted")
	}
	recvs := make([]wr.RecvWR, 8)
	for i := range recvs {
		recvs[i] = wr.RecvWR{ID: uint64(100 + i), SGList: []wr.SGE{buf.SGE(1024*(i+1), 1024)}}
	}
	if _, err := srq.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(uverbs.SRQAttr{Limit: 4}, uverbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		copy(buf.Bytes()[i*8:], fmt.Sprintf("msg%d....", i))
		if _, err := senders[i%2].PostSend([]wr.SendWR{{ID: uint64(i), Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{buf.SGE(i*8, 8)}}}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := rdmatest.WaitWC(t, cq, 10)
	byQP := map[uint32]int{}
	for _, c := range wcs {
		if c.Status != wr.Success {
			t.Fatalf("completion %+v: %v", c, c.Status)
		}
		if c.Opcode == wr.WCRecv {
			byQP[c.QPNum]++
			slot := int(c.ID - 100)
			if got := buf.Bytes()[1024*(slot+1) : 1024*(slot+1)+3]; string(got) != "msg" {
				t.Errorf("receive %d holds %q", c.ID, got)
			}
		}
	}
	if byQP[receivers[0].Num()] != 3 || byQP[receivers[1].Num()] != 2 {
		t.Errorf("receives per QP %v; want 3 on QP %d and 2 on QP %d", byQP, receivers[0].Num(), receivers[1].Num())
	}
	// 3 receives are left, fewer than the limit of 4: the event fires.
	ectx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ctx.GetAsyncEvent(ectx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != uverbs.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("async event %v; want SRQ limit reached on our SRQ", ev)
	}
	if a, err := srq.Query(); err != nil || a.Limit != 0 {
		t.Errorf("SRQ after its limit event: %+v, %v; want the limit disarmed (0)", a, err)
	}
	// A QP on an SRQ that enters the error state reports its last WQE.
	// rxe raises the event since Linux 6.x (measured: absent on 6.1,
	// present on 6.12 and 7.2).
	t.Run("LastWQEReached", func(t *testing.T) {
		if !rdmatest.KernelAtLeast(t, 6, 12) {
			t.Skipf("rxe on Linux %s does not raise IBV_EVENT_QP_LAST_WQE_REACHED (measured on 6.12 and later)", rdmatest.KernelRelease(t))
		}
		errAttr := qp.Attr{State: qp.StateErr}
		if err := receivers[1].Modify(errAttr, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		ev, err := ctx.GetAsyncEvent(ectx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != uverbs.EventQPLastWQEReached || ev.QP != receivers[1] {
			t.Fatalf("async event %v; want last WQE reached on QP %d", ev, receivers[1].Num())
		}
	})
}
