package uverbs_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// TestDeviceCQTimestamps probes for completion timestamps as a program
// does, through the device's completion timestamp mask. A device without
// them (rxe) must refuse a CQ with timestamps with an error matching
// errors.ErrUnsupported, and so must the kernel itself when the provider's
// check is bypassed; reading or converting its clock is refused alike.
// A device with them completes a send and a receive on timestamped CQs,
// the timestamps within the clock's mask, and converts them to wall time.
func TestDeviceCQTimestamps(t *testing.T) {
	r := rdmatest.NewPair(t, qp.RC, qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	attr, err := r.Ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("completion timestamp mask %#x, core clock %d kHz", attr.CompletionTimestampMask, attr.HCACoreClock)
	if attr.CompletionTimestampMask == 0 {
		_, err := r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Timestamps: true})
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("CQ with timestamps on a device without them: %v; want EOPNOTSUPP", err)
		}
		// What the kernel answers when asked directly, as a provider that
		// did not check would ask it.
		cq, err := uverbs.CreateCQKernelFlags(r.Ctx, uverbs.CQAttr{CQE: 8, Timestamps: true})
		if err == nil {
			cq.Close()
			t.Error("the kernel made a CQ with timestamps on a device without them")
		} else if !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("the kernel's answer to a CQ with timestamps: %v; want EOPNOTSUPP", err)
		} else {
			t.Logf("the kernel refuses: %v", err)
		}
		if _, err := r.Ctx.QueryRTValues(); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("QueryRTValues: %v; want EOPNOTSUPP", err)
		}
		if _, err := r.Ctx.TimestampTime(1); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("TimestampTime: %v; want EOPNOTSUPP", err)
		}
		// The refusal left the context working: a plain CQ still serves.
		rdmatest.Must(t, postSendRecv(t, r, r.A.CQ, r.B.CQ))
		t.Skip("the device has no completion timestamps (mask 0): refusals checked")
	}

	cqa, err := r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cqa.Close()
	cqb, err := r.Ctx.CreateCQ(uverbs.CQAttr{CQE: 8, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cqb.Close()
	rdmatest.Must(t, postSendRecv(t, r, cqa, cqb))
}

// postSendRecv sends 16 bytes from r's A to B over new QPs on sendCQ and
// recvCQ, and checks both completions; on timestamped CQs it checks their
// timestamps against the device's clock.
func postSendRecv(t *testing.T, r *rdmatest.Pair, sendCQ, recvCQ *uverbs.CQ) error {
	t.Helper()
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	a, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: sendCQ, RecvCQ: sendCQ, Caps: caps})
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := r.PD.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: recvCQ, RecvCQ: recvCQ, Caps: caps})
	if err != nil {
		return err
	}
	defer b.Close()
	rdmatest.ConnectQPs(t, a, b, r.GIDIndex, r.GID)
	if _, err := b.PostRecv([]wr.RecvWR{{ID: 2, SGList: []wr.SGE{r.B.Buf.SGE(0, 64)}}}); err != nil {
		return err
	}
	if _, err := a.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{r.A.Buf.SGE(0, 16)}}}); err != nil {
		return err
	}
	s := rdmatest.WaitWC(t, sendCQ, 1)[0]
	rc := rdmatest.WaitWC(t, recvCQ, 1)[0]
	rdmatest.WantOK(t, s, 1, wr.WCSend)
	rdmatest.WantOK(t, rc, 2, wr.WCRecv)
	attr, err := r.Ctx.QueryDevice()
	if err != nil {
		return err
	}
	if attr.CompletionTimestampMask == 0 {
		if s.Timestamp != 0 || rc.Timestamp != 0 {
			t.Errorf("timestamps on a device without them: %+v, %+v", s, rc)
		}
		return nil
	}
	now, err := r.Ctx.QueryRTValues()
	if err != nil {
		return err
	}
	for _, c := range []wr.Completion{s, rc} {
		if c.Timestamp == 0 || c.Timestamp&^attr.CompletionTimestampMask != 0 {
			t.Errorf("completion %d: timestamp %#x, mask %#x", c.ID, c.Timestamp, attr.CompletionTimestampMask)
		}
		// The clock read after both completions is past them, within
		// half its range (the mask wraps).
		if d := (now.RawClock - c.Timestamp) & attr.CompletionTimestampMask; d > attr.CompletionTimestampMask/2 {
			t.Errorf("completion %d at %#x, after the clock read %#x", c.ID, c.Timestamp, now.RawClock)
		}
		wall, err := r.Ctx.TimestampTime(c.Timestamp)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Logf("no clock info to convert timestamps: %v", err)
			continue
		}
		if err != nil {
			return err
		}
		// A sanity bound, not a timing one: the conversion lands on
		// today, not in another epoch.
		if d := time.Since(wall); d < -time.Hour || d > time.Hour {
			t.Errorf("completion %d: timestamp %#x is %v, now %v", c.ID, c.Timestamp, wall, time.Now())
		}
	}
	return nil
}
