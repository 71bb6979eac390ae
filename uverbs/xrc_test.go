package uverbs

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// The XRC verbs against the fake kernel: each command as the kernel
// decodes it (ib_uverbs_open_xrcd, UVERBS_METHOD_XRCD_DESTROY,
// UVERBS_METHOD_SRQ_CREATE of type XRC, UVERBS_METHOD_QP_CREATE of types
// XRC_INI and XRC_TGT, ib_uverbs_open_qp), on a device of a test
// provider that accepts XRC (rxe and mlx5 refuse it), and the refusals a
// program probes for.

// xrcTestDriver is a driver id no kernel uses, for testProvider.
const xrcTestDriver = 0x7e57

func init() { drivers[xrcTestDriver] = testDriver{} }

// testDriver is a provider with no driver data whose objects record posts.
type testDriver struct{}

func (testDriver) Name() string                  { return "test" }
func (testDriver) FormatFWVer(raw uint64) string { return "" }
func (testDriver) NewContext(provider.Kernel) (provider.Builder[provider.Context], error) {
	return testBuilder[provider.Context]{v: testProvider{}}, nil
}

type testBuilder[T any] struct {
	v    T
	seen *provider.Created // what Finish got, when not nil
}

func (testBuilder[T]) Udata() (in, out []byte) { return nil, nil }
func (b testBuilder[T]) Finish(c provider.Created) (T, error) {
	if b.seen != nil {
		*b.seen = c
	}
	return b.v, nil
}
func (testBuilder[T]) Abort() {}

type testProvider struct{}

// lastQPAttr and lastSRQAttr are what the test provider was last asked to
// lay out.
var (
	lastQPAttr  provider.QPInitAttr
	lastSRQAttr provider.SRQInitAttr
	lastSRQ     provider.Created
)

func (testProvider) NewCQ(int) (provider.Builder[provider.CQ], error) {
	return testBuilder[provider.CQ]{v: testCQ{}}, nil
}
func (testProvider) NewQP(a provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	lastQPAttr = a
	return testBuilder[provider.QP]{v: &postRecorder{}}, nil
}
func (testProvider) NewSRQ(a provider.SRQInitAttr) (provider.Builder[provider.SRQ], error) {
	lastSRQAttr = a
	return testBuilder[provider.SRQ]{v: testSRQ{}, seen: &lastSRQ}, nil
}
func (testProvider) NewAH(qp.AHAttr) (provider.Builder[provider.AH], error) {
	return nil, unix.EOPNOTSUPP
}
func (testProvider) Close() error { return nil }

type testCQ struct{}

func (testCQ) Poll([]wr.Completion) int { return 0 }
func (testCQ) ReqNotify(bool) error     { return nil }
func (testCQ) Close() error             { return nil }

type testSRQ struct{}

func (testSRQ) PostRecv(wrs []wr.RecvWR) (int, error) { return len(wrs), nil }
func (testSRQ) Close() error                          { return nil }

// xrcKernel is objectKernel with the XRC commands, CQ, SRQ and QP
// creation and destruction, checking each as the kernel would. openXRCD
// answers OPEN_XRCD's request.
type xrcKernel struct {
	*fakeKernel
	handles  uint32
	xrcds    map[uint32]bool
	destroys []uint16 // the objects destroyed, in order
	openXRCD func(req abi.IbUverbsOpenXrcd) error
	openQP   abi.IbUverbsOpenQp
}

func newXRCKernel(t *testing.T) (*xrcKernel, *Context) { return newTestKernel(t, xrcTestDriver) }

// newTestKernel is newXRCKernel with a context for the test provider
// registered under driver.
func newTestKernel(t *testing.T, driver uint32) (*xrcKernel, *Context) {
	k := &xrcKernel{fakeKernel: objectKernel(t), handles: 100, xrcds: map[uint32]bool{}}
	pdWrite := k.handlers[[2]uint16{abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE}]
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE, func(c *fakeCall) error {
		cmd, _, _ := c.attr(abi.UVERBS_ATTR_WRITE_CMD)
		switch cmd.Data {
		case abi.IB_USER_VERBS_CMD_OPEN_XRCD:
			var req abi.IbUverbsOpenXrcd
			in := c.in(abi.UVERBS_ATTR_CORE_IN)
			if len(in) != int(unsafe.Sizeof(req)) {
				t.Errorf("OPEN_XRCD request of %d bytes, want %d", len(in), unsafe.Sizeof(req))
				return unix.EINVAL
			}
			copy(bytesOf(&req), in)
			if k.openXRCD != nil {
				if err := k.openXRCD(req); err != nil {
					return err
				}
			}
			k.handles++
			k.xrcds[k.handles] = true
			resp := abi.IbUverbsOpenXrcdResp{Xrcd_handle: k.handles}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&resp))
		case abi.IB_USER_VERBS_CMD_OPEN_QP:
			in := c.in(abi.UVERBS_ATTR_CORE_IN)
			if len(in) != int(unsafe.Sizeof(k.openQP)) {
				t.Errorf("OPEN_QP request of %d bytes, want %d", len(in), unsafe.Sizeof(k.openQP))
				return unix.EINVAL
			}
			copy(bytesOf(&k.openQP), in)
			if !k.xrcds[k.openQP.Pd_handle] || k.openQP.Qp_type != abi.IB_UVERBS_QPT_XRC_TGT {
				return unix.EINVAL
			}
			k.handles++
			resp := abi.IbUverbsCreateQpResp{Qp_handle: k.handles, Qpn: k.openQP.Qpn}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&resp))
		}
		return pdWrite(c)
	})
	k.handle(abi.UVERBS_OBJECT_XRCD, abi.UVERBS_METHOD_XRCD_DESTROY, func(c *fakeCall) error {
		a, _, ok := c.attr(abi.UVERBS_ATTR_DESTROY_XRCD_HANDLE)
		if !ok || !k.xrcds[uint32(a.Data)] {
			return unix.ENOENT
		}
		delete(k.xrcds, uint32(a.Data))
		k.destroys = append(k.destroys, abi.UVERBS_OBJECT_XRCD)
		return nil
	})
	k.handle(abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE, func(c *fakeCall) error {
		k.handles++
		c.setData(abi.UVERBS_ATTR_CREATE_CQ_HANDLE, uint64(k.handles))
		var cqe uint32 = 16
		return c.out(abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, bytesOf(&cqe))
	})
	k.handle(abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_CREATE, func(c *fakeCall) error {
		k.handles++
		c.setData(abi.UVERBS_ATTR_CREATE_SRQ_HANDLE, uint64(k.handles))
		var v uint32 = 8
		if err := c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, bytesOf(&v)); err != nil {
			return err
		}
		if err := c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, bytesOf(&v)); err != nil {
			return err
		}
		if _, _, ok := c.attr(abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM); ok {
			num := 0x1234 + k.handles
			return c.out(abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM, bytesOf(&num))
		}
		return nil
	})
	k.handle(abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE, func(c *fakeCall) error {
		k.handles++
		c.setData(abi.UVERBS_ATTR_CREATE_QP_HANDLE, uint64(k.handles))
		var caps abi.IbUverbsQpCap
		copy(bytesOf(&caps), c.in(abi.UVERBS_ATTR_CREATE_QP_CAP))
		if err := c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, bytesOf(&caps)); err != nil {
			return err
		}
		num := 0x40 + k.handles
		return c.out(abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, bytesOf(&num))
	})
	for _, o := range []struct{ obj, method, attr uint16 }{
		{abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_DESTROY, abi.UVERBS_ATTR_DESTROY_CQ_HANDLE},
		{abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_DESTROY, abi.UVERBS_ATTR_DESTROY_SRQ_HANDLE},
		{abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_DESTROY, abi.UVERBS_ATTR_DESTROY_QP_HANDLE},
	} {
		k.handle(o.obj, o.method, func(c *fakeCall) error {
			k.destroys = append(k.destroys, o.obj)
			return nil
		})
	}
	dev := testDev
	dev.Driver, dev.DriverID = "test", driver
	c, err := newContext(dev, k.fakeKernel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return k, c
}

// ids returns the attributes of a call by id.
func (c *fakeCall) ids() map[uint16]fakeAttr {
	m := map[uint16]fakeAttr{}
	for _, a := range c.Attrs {
		m[a.ID] = a
	}
	return m
}

// lastCall returns the last call to object and method.
func (k *fakeKernel) lastCall(t *testing.T, object, method uint16) *fakeCall {
	t.Helper()
	calls, _ := k.snapshot()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Object == object && calls[i].Method == method {
			return &calls[i]
		}
	}
	t.Fatalf("no call of object %d method %d", object, method)
	return nil
}

func TestOpenXRCDABI(t *testing.T) {
	k, c := newXRCKernel(t)
	var got []abi.IbUverbsOpenXrcd
	k.openXRCD = func(req abi.IbUverbsOpenXrcd) error {
		got = append(got, req)
		if int32(req.Fd) == -1 && req.Oflags&unix.O_CREAT == 0 {
			return unix.EINVAL // as the kernel: nothing to find without a file
		}
		return nil
	}
	x, err := c.OpenXRCD(-1, unix.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Fd != 0xffffffff || got[0].Oflags != unix.O_CREAT {
		t.Fatalf("OPEN_XRCD requests %+v, want fd -1 and O_CREAT", got)
	}
	f, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	y, err := c.OpenXRCD(f, unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		t.Fatal(err)
	}
	if got[1].Fd != uint32(f) || got[1].Oflags != unix.O_CREAT|unix.O_EXCL {
		t.Errorf("OPEN_XRCD request %+v, want fd %d and O_CREAT|O_EXCL", got[1], f)
	}
	if _, err := c.OpenXRCD(-1, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("fd -1 without O_CREAT: %v, want the kernel's EINVAL", err)
	}
	// Refused before the kernel: bad descriptors and other flags.
	n := len(got)
	for _, tc := range []struct {
		fd, flags int
		want      error
	}{{-2, unix.O_CREAT, unix.EBADF}, {1 << 32, unix.O_CREAT, unix.EBADF}, {-1, unix.O_CREAT | unix.O_RDWR, unix.EINVAL}, {-1, unix.O_TRUNC, unix.EINVAL}} {
		if _, err := c.OpenXRCD(tc.fd, tc.flags); !errors.Is(err, tc.want) {
			t.Errorf("OpenXRCD(%d, %#x): %v, want %v", tc.fd, tc.flags, err, tc.want)
		}
	}
	if len(got) != n {
		t.Errorf("%d bad requests reached the kernel", len(got)-n)
	}
	h := x.handle
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	call := k.lastCall(t, abi.UVERBS_OBJECT_XRCD, abi.UVERBS_METHOD_XRCD_DESTROY)
	if a := call.ids()[abi.UVERBS_ATTR_DESTROY_XRCD_HANDLE]; a.Data != uint64(h) || a.Flags&abi.UVERBS_ATTR_F_MANDATORY == 0 {
		t.Errorf("XRCD_DESTROY handle attribute %+v, want handle %d, mandatory", a, h)
	}
	if err := x.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := x.CreateRecvQP(); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateRecvQP on a closed XRCD: %v", err)
	}
	if _, err := x.OpenQP(1); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenQP on a closed XRCD: %v", err)
	}
	pd := allocPD(t, c)
	cq, err := c.CreateCQ(CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateXRCSRQ(x, cq, SRQAttr{MaxWR: 1, MaxSGE: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateXRCSRQ on a closed XRCD: %v", err)
	}
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
}

// A device without XRC: the kernel's answer, EOPNOTSUPP, matches
// errors.ErrUnsupported.
func TestOpenXRCDUnsupported(t *testing.T) {
	k, c := newXRCKernel(t)
	k.openXRCD = func(abi.IbUverbsOpenXrcd) error { return unix.EOPNOTSUPP }
	_, err := c.OpenXRCD(-1, unix.O_CREAT)
	if !errors.Is(err, unix.EOPNOTSUPP) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("OpenXRCD: %v, want EOPNOTSUPP matching errors.ErrUnsupported", err)
	}
}

func TestXRCSRQABI(t *testing.T) {
	k, c := newXRCKernel(t)
	x, err := c.OpenXRCD(-1, unix.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	pd := allocPD(t, c)
	cq, err := c.CreateCQ(CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	s, err := pd.CreateXRCSRQ(x, cq, SRQAttr{MaxWR: 5, MaxSGE: 2, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	call := k.lastCall(t, abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_CREATE)
	a := call.ids()
	for id, want := range map[uint16]uint64{
		abi.UVERBS_ATTR_CREATE_SRQ_TYPE:        abi.IB_UVERBS_SRQT_XRC,
		abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE: uint64(x.handle),
		abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE:   uint64(cq.handle),
		abi.UVERBS_ATTR_CREATE_SRQ_PD_HANDLE:   uint64(pd.handle),
		abi.UVERBS_ATTR_CREATE_SRQ_MAX_WR:      5,
		abi.UVERBS_ATTR_CREATE_SRQ_MAX_SGE:     2,
		abi.UVERBS_ATTR_CREATE_SRQ_LIMIT:       1,
	} {
		if got, ok := a[id]; !ok || got.Data != want || got.Flags&abi.UVERBS_ATTR_F_MANDATORY == 0 {
			t.Errorf("SRQ_CREATE attribute %d: %+v (present %v), want %d, mandatory", id, got, ok, want)
		}
	}
	if r, ok := a[abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM]; !ok || r.Len != 4 {
		t.Errorf("SRQ_CREATE's SRQ number output %+v (present %v), want 4 bytes", r, ok)
	}
	num, err := s.Num()
	if want := 0x1234 + s.handle; err != nil || num != want {
		t.Errorf("Num() = %#x, %v; want %#x", num, err, want)
	}
	if !lastSRQAttr.XRC || lastSRQ.SRQNum != num {
		t.Errorf("the provider saw %+v, %+v; want XRC and SRQ number %#x", lastSRQAttr, lastSRQ, num)
	}
	// A basic SRQ names no domain, CQ or number, and has no number.
	b, err := pd.CreateSRQ(SRQAttr{MaxWR: 5, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	a = k.lastCall(t, abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_CREATE).ids()
	if a[abi.UVERBS_ATTR_CREATE_SRQ_TYPE].Data != abi.IB_UVERBS_SRQT_BASIC || lastSRQAttr.XRC {
		t.Errorf("basic SRQ: type %d, provider XRC %v", a[abi.UVERBS_ATTR_CREATE_SRQ_TYPE].Data, lastSRQAttr.XRC)
	}
	for _, id := range []uint16{abi.UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE, abi.UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE, abi.UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM} {
		if _, ok := a[id]; ok {
			t.Errorf("basic SRQ with attribute %d", id)
		}
	}
	if _, err := b.Num(); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Num of a basic SRQ: %v, want EOPNOTSUPP", err)
	}
	// Missing arguments never reach the kernel.
	n := len(k.calls)
	if _, err := pd.CreateXRCSRQ(nil, cq, SRQAttr{MaxWR: 1, MaxSGE: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no XRCD: %v", err)
	}
	if _, err := pd.CreateXRCSRQ(x, nil, SRQAttr{MaxWR: 1, MaxSGE: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no CQ: %v", err)
	}
	if _, err := pd.CreateXRCSRQ(x, cq, SRQAttr{MaxSGE: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no WRs: %v", err)
	}
	if len(k.calls) != n {
		t.Errorf("%d refused creations reached the kernel", len(k.calls)-n)
	}
	// The kernel refuses to close a domain in use; the SRQ goes first.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Num(); err != nil {
		t.Errorf("Num after Close: %v (the number is the SRQ's, kept)", err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestXRCQPABI(t *testing.T) {
	k, c := newXRCKernel(t)
	x, err := c.OpenXRCD(-1, unix.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	pd := allocPD(t, c)
	cq, err := c.CreateCQ(CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := c.CreateCQ(CQAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}

	// The send side: a PD and a send CQ, never a receive CQ or receive
	// capacities (libibverbs drops them).
	sq, err := pd.CreateQP(QPInitAttr{Type: qp.XRCSend, SendCQ: cq, RecvCQ: rcq,
		Caps: qp.Caps{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 3, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	call := k.lastCall(t, abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE)
	a := call.ids()
	if a[abi.UVERBS_ATTR_CREATE_QP_TYPE].Data != abi.IB_UVERBS_QPT_XRC_INI || a[abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE].Data != uint64(pd.handle) ||
		a[abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE].Data != uint64(cq.handle) {
		t.Errorf("XRC_INI create: %+v", call.Attrs)
	}
	for _, id := range []uint16{abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE} {
		if _, ok := a[id]; ok {
			t.Errorf("XRC_INI create with attribute %d, which the kernel refuses", id)
		}
	}
	var caps abi.IbUverbsQpCap
	copy(bytesOf(&caps), call.in(abi.UVERBS_ATTR_CREATE_QP_CAP))
	if caps.Max_send_wr != 4 || caps.Max_recv_wr != 0 || caps.Max_recv_sge != 0 {
		t.Errorf("XRC_INI caps %+v, want 4 sends and no receives", caps)
	}
	if lastQPAttr.Type != qp.XRCSend || lastQPAttr.HasSRQ {
		t.Errorf("provider asked for %+v", lastQPAttr)
	}
	if sq.Type() != qp.XRCSend || sq.Num() == 0 {
		t.Errorf("QP type %v number %d", sq.Type(), sq.Num())
	}

	// The receive side: the domain alone.
	rq, err := x.CreateRecvQP()
	if err != nil {
		t.Fatal(err)
	}
	call = k.lastCall(t, abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE)
	a = call.ids()
	if a[abi.UVERBS_ATTR_CREATE_QP_TYPE].Data != abi.IB_UVERBS_QPT_XRC_TGT || a[abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE].Data != uint64(x.handle) {
		t.Errorf("XRC_TGT create: %+v", call.Attrs)
	}
	for _, id := range []uint16{abi.UVERBS_ATTR_CREATE_QP_PD_HANDLE, abi.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE,
		abi.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, abi.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE} {
		if _, ok := a[id]; ok {
			t.Errorf("XRC_TGT create with attribute %d, which the kernel refuses", id)
		}
	}
	if user := a[abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE].Data; user == 0 {
		t.Error("XRC_TGT create without a user handle for its events")
	}
	if lastQPAttr.Type != qp.XRCRecv {
		t.Errorf("provider asked for %+v", lastQPAttr)
	}

	// Open it again, as a second process sharing the domain would.
	oq, err := x.OpenQP(rq.Num())
	if err != nil {
		t.Fatal(err)
	}
	if k.openQP.Pd_handle != x.handle || k.openQP.Qpn != rq.Num() || k.openQP.Qp_type != abi.IB_UVERBS_QPT_XRC_TGT || k.openQP.User_handle == 0 {
		t.Errorf("OPEN_QP request %+v", k.openQP)
	}
	if oq.Num() != rq.Num() || oq.Type() != qp.XRCRecv {
		t.Errorf("opened QP number %d type %v", oq.Num(), oq.Type())
	}

	// Nothing posts to an XRC QP's missing queues.
	for _, q := range []*QP{sq, rq, oq} {
		q.state.Store(uint32(qp.StateRTS))
		if _, err := q.PostRecv([]wr.RecvWR{{ID: 1}}); !errors.Is(err, unix.EINVAL) {
			t.Errorf("PostRecv on %v: %v, want EINVAL", q.Type(), err)
		}
	}
	for _, q := range []*QP{rq, oq} {
		if _, err := q.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend}}); !errors.Is(err, unix.EINVAL) {
			t.Errorf("PostSend on %v: %v, want EINVAL", q.Type(), err)
		}
	}
	if n, err := sq.PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, RemoteSRQN: 7}}); n != 1 || err != nil {
		t.Errorf("PostSend on XRC_SEND: %d, %v", n, err)
	}
	if p := sq.prov.(*postRecorder); p.sends != 1 || p.lastSend.RemoteSRQN != 7 {
		t.Errorf("the provider got %d sends, the last %+v", p.sends, p.lastSend)
	}

	// Wrong creations never reach the kernel.
	n := len(k.calls)
	for _, tc := range []struct {
		name string
		attr QPInitAttr
	}{
		{"XRC_RECV on a PD", QPInitAttr{Type: qp.XRCRecv, SendCQ: cq}},
		{"XRC_SEND without a send CQ", QPInitAttr{Type: qp.XRCSend, RecvCQ: cq}},
	} {
		if _, err := pd.CreateQP(tc.attr); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", tc.name, err)
		}
	}
	if len(k.calls) != n {
		t.Errorf("%d refused creations reached the kernel", len(k.calls)-n)
	}

	// Closing the receive QP in RTS sends no modify: the QP is shared.
	before, _ := k.snapshot()
	for _, q := range []*QP{oq, rq} {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := k.snapshot()
	for _, cl := range after[len(before):] {
		if cl.Method == abi.UVERBS_METHOD_INVOKE_WRITE {
			cmd, _, _ := cl.attr(abi.UVERBS_ATTR_WRITE_CMD)
			t.Errorf("closing XRC receive QPs sent write command %d", cmd.Data)
		}
	}
	if got := k.destroys[len(k.destroys)-2:]; got[0] != abi.UVERBS_OBJECT_QP || got[1] != abi.UVERBS_OBJECT_QP {
		t.Errorf("destroys %v, want two QPs", got)
	}
	if err := sq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}
