package uverbs

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// extProvider is a provider context with extended CQs and a clock: it
// records what the core asked of it.
type extProvider struct {
	asked   []provider.CQAttr // NewCQ's are recorded with Timestamp false
	clock   uint64
	clockOK error
}

func (p *extProvider) NewCQ(cqe int) (provider.Builder[provider.CQ], error) {
	return p.NewCQEx(provider.CQAttr{CQE: cqe})
}

func (p *extProvider) NewCQEx(attr provider.CQAttr) (provider.Builder[provider.CQ], error) {
	p.asked = append(p.asked, attr)
	return extCQBuilder{}, nil
}

func (p *extProvider) NewQP(provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	return nil, unix.EOPNOTSUPP
}

func (p *extProvider) NewSRQ(provider.SRQInitAttr) (provider.Builder[provider.SRQ], error) {
	return nil, unix.EOPNOTSUPP
}
func (p *extProvider) NewAH(qp.AHAttr) (provider.Builder[provider.AH], error) {
	return nil, unix.EOPNOTSUPP
}
func (p *extProvider) Close() error { return nil }

func (p *extProvider) ReadClock() (uint64, error) { return p.clock, p.clockOK }

func (p *extProvider) TimestampNS(ts uint64) (uint64, error) { return ts + 1000, p.clockOK }

type extCQBuilder struct{}

func (extCQBuilder) Udata() (in, out []byte) { return nil, nil }
func (extCQBuilder) Abort()                  {}
func (extCQBuilder) Finish(provider.Created) (provider.CQ, error) {
	return extCQ{}, nil
}

type extCQ struct{}

func (extCQ) Poll([]wr.Completion) int { return 0 }
func (extCQ) ReqNotify(bool) error     { return nil }
func (extCQ) Close() error             { return nil }

// cqKernel is rxeLikeKernel that creates and destroys CQs.
func cqKernel(t testing.TB) *fakeKernel {
	k := rxeLikeKernel(t)
	next := uint64(3)
	k.handle(abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE, func(c *fakeCall) error {
		cqe := uint32(15)
		c.setData(abi.UVERBS_ATTR_CREATE_CQ_HANDLE, next)
		next++
		return c.out(abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, bytesOf(&cqe))
	})
	k.handle(abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_DESTROY, func(c *fakeCall) error {
		var resp abi.IbUverbsDestroyCqResp
		return c.out(abi.UVERBS_ATTR_DESTROY_CQ_RESP, bytesOf(&resp))
	})
	return k
}

// lastCreateCQ returns the last CQ create command the kernel saw.
func lastCreateCQ(t *testing.T, k *fakeKernel) (fakeCall, bool) {
	t.Helper()
	calls, _ := k.snapshot()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Object == abi.UVERBS_OBJECT_CQ && calls[i].Method == abi.UVERBS_METHOD_CQ_CREATE {
			return calls[i], true
		}
	}
	return fakeCall{}, false
}

// TestCreateCQTimestampsABI: a CQ with timestamps is the create command
// with UVERBS_ATTR_CREATE_CQ_FLAGS carrying IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
// a 32-bit inline value the kernel must know (mandatory), as libibverbs'
// ibv_icmd_create_cq sends it; a plain CQ sends no flags at all; the
// provider is asked for an extended CQ with timestamps.
func TestCreateCQTimestampsABI(t *testing.T) {
	k := cqKernel(t)
	c := fakeContext(t, k)
	p := &extProvider{}
	c.prov, c.res.prov = p, p

	for _, ts := range []bool{false, true} {
		cq, err := c.CreateCQ(CQAttr{CQE: 8, Timestamps: ts})
		if err != nil {
			t.Fatalf("timestamps %v: %v", ts, err)
		}
		call, ok := lastCreateCQ(t, k)
		if !ok {
			t.Fatal("no CQ create command")
		}
		a, _, has := call.attr(abi.UVERBS_ATTR_CREATE_CQ_FLAGS)
		switch {
		case !ts && has:
			t.Errorf("plain CQ sent flags %+v", a)
		case ts && !has:
			t.Errorf("CQ with timestamps sent no flags: %+v", call.Attrs)
		case ts && (a.Len != 4 || a.Data != abi.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION || a.Flags&abi.UVERBS_ATTR_F_MANDATORY == 0):
			t.Errorf("flags attribute %+v; want 4 bytes inline, %#x, mandatory", a, abi.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION)
		}
		if got := p.asked[len(p.asked)-1]; got != (provider.CQAttr{CQE: 8, Timestamp: ts}) {
			t.Errorf("provider asked for %+v", got)
		}
		if err := cq.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCreateCQTimestampsRXE: rxe's provider has no timestamps, and says
// so before the kernel sees anything, with an error a program can probe.
func TestCreateCQTimestampsRXE(t *testing.T) {
	k := cqKernel(t)
	c := fakeContext(t, k)
	_, err := c.CreateCQ(CQAttr{CQE: 8, Timestamps: true})
	if !errors.Is(err, unix.EOPNOTSUPP) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("rxe CQ with timestamps: %v; want EOPNOTSUPP", err)
	}
	if call, ok := lastCreateCQ(t, k); ok {
		t.Errorf("the kernel saw %+v", call)
	}
	if _, err := c.QueryRTValues(); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("QueryRTValues on rxe: %v", err)
	}
	if _, err := c.TimestampTime(1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("TimestampTime on rxe: %v", err)
	}
}

// TestClockAPI: QueryRTValues and TimestampTime ask the provider's clock,
// pass its errors on with the errno, and answer ErrClosed after Close.
func TestClockAPI(t *testing.T) {
	c := fakeContext(t, rxeLikeKernel(t))
	p := &extProvider{clock: 0x123456789}
	c.prov, c.res.prov = p, p
	v, err := c.QueryRTValues()
	if err != nil || v.RawClock != p.clock {
		t.Errorf("QueryRTValues: %+v, %v", v, err)
	}
	const ns = 1_700_000_000_123_456_789
	tm, err := c.TimestampTime(ns - 1000)
	if err != nil || !tm.Equal(time.Unix(0, ns)) {
		t.Errorf("TimestampTime: %v, %v; want %v", tm, err, time.Unix(0, ns))
	}
	// Reading the clock and converting timestamps sit next to polling:
	// they allocate nothing either.
	if a := testing.AllocsPerRun(100, func() {
		c.QueryRTValues()
		c.TimestampTime(ns)
	}); a != 0 {
		t.Errorf("QueryRTValues and TimestampTime allocate %.1f times per call", a)
	}
	p.clockOK = unix.EBUSY
	if _, err := c.TimestampTime(1); !errors.Is(err, unix.EBUSY) {
		t.Errorf("TimestampTime with the clock busy: %v", err)
	}
	if _, err := c.QueryRTValues(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("QueryRTValues with the clock busy: %v", err)
	}
	c.Close()
	if _, err := c.QueryRTValues(); !errors.Is(err, ErrClosed) {
		t.Errorf("QueryRTValues after Close: %v", err)
	}
	if _, err := c.TimestampTime(1); !errors.Is(err, ErrClosed) {
		t.Errorf("TimestampTime after Close: %v", err)
	}
	var nilCtx *Context
	if _, err := nilCtx.QueryRTValues(); err == nil {
		t.Error("QueryRTValues on a nil context succeeded")
	}
}
