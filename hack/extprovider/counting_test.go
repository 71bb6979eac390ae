package countingprovider_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	countingprovider "example.com/countingprovider"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/rxe"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// named is a provider that makes nothing: enough to register.
type named string

func (n named) Name() string              { return string(n) }
func (n named) FormatFWVer(uint64) string { return "" }
func (n named) NewContext(provider.Kernel) (provider.Builder[provider.Context], error) {
	return nil, errors.ErrUnsupported
}

func panics(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}

// TestRegisterProvider: the registration rules a program meets, on any
// host.
func TestRegisterProvider(t *testing.T) {
	if msg := panics(func() { uverbs.RegisterProvider(named("countingprovider-once")) }); msg != "" {
		t.Fatalf("first registration panicked: %s", msg)
	}
	for _, c := range []struct {
		name string
		d    provider.Driver
		want string
	}{
		{"nil", nil, "nil provider"},
		{"no name", named(""), "no name"},
		{"twice", named("countingprovider-once"), `twice for provider "countingprovider-once"`},
	} {
		if msg := panics(func() { uverbs.RegisterProvider(c.d) }); !strings.Contains(msg, c.want) {
			t.Errorf("RegisterProvider(%s) panicked with %q, want one naming %q", c.name, msg, c.want)
		}
	}
}

// TestDeviceCountingProvider registers the counting provider for rxe
// devices and moves a message between two RC QPs through it: every object
// and request of the exchange must go through the registered provider.
func TestDeviceCountingProvider(t *testing.T) {
	var n countingprovider.Counts
	uverbs.RegisterProvider(countingprovider.Driver{Inner: rxe.Driver{}, Counts: &n})

	devs, _ := uverbs.Devices()
	var dev *uverbs.Device
	for i := range devs {
		if devs[i].Driver == "rxe" {
			dev = &devs[i]
			break
		}
	}
	if dev == nil {
		if os.Getenv("RDMAGO_VM") == "1" {
			t.Fatal("no rxe device in the VM")
		}
		t.Skip("no rxe device on this host (the VM test runner provides one)")
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	buf, err := mr.New(pd, 4096, wr.LocalWrite|wr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	caps := qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	var qps [2]*uverbs.QP
	for i := range qps {
		if qps[i], err = pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps}); err != nil {
			t.Fatal(err)
		}
		defer qps[i].Close()
	}
	gids, err := ctx.QueryGIDTable()
	if err != nil {
		t.Fatal(err)
	}
	var gid qp.GID
	path := qp.Path{PortNum: 1}
	for _, g := range gids {
		if g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
			gid, path.SGIDIndex = g.GID, g.Index
		}
	}
	for i, q := range qps {
		peer := qp.Endpoint{QPN: qps[1-i].Num(), GID: gid}
		for _, step := range []func() (qp.Attr, qp.AttrMask){
			func() (qp.Attr, qp.AttrMask) { return qp.ToInit(qp.RC, 1, 0, wr.RemoteWrite, 0) },
			func() (qp.Attr, qp.AttrMask) { return qp.ToRTR(qp.RC, peer, path, qp.MTU1024) },
			func() (qp.Attr, qp.AttrMask) { return qp.ToRTS(qp.RC, 0) },
		} {
			if err := q.Modify(step()); err != nil {
				t.Fatal(err)
			}
		}
	}

	copy(buf.Bytes(), "through the counting provider")
	if _, err := qps[1].PostRecv([]wr.RecvWR{{ID: 2, SGList: []wr.SGE{buf.SGE(1024, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := qps[0].PostSend([]wr.SendWR{{ID: 1, Opcode: wr.OpSend, Flags: wr.Signaled, SGList: []wr.SGE{buf.SGE(0, 29)}}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]wr.Completion, 4)
	for got := 0; got < 2; {
		k, err := cq.Poll(wc[got:])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[got : got+k] {
			if c.Status != wr.Success {
				t.Fatalf("completion %d: %v", c.ID, c.Status)
			}
		}
		got += k
	}
	if got := string(buf.Bytes()[1024 : 1024+29]); got != "through the counting provider" {
		t.Fatalf("received %q", got)
	}
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"contexts", n.Contexts.Load(), 1},
		{"CQs", n.CQs.Load(), 1},
		{"QPs", n.QPs.Load(), 2},
		{"sends", n.Sends.Load(), 1},
		{"receives", n.Recvs.Load(), 1},
		{"completions", n.Completions.Load(), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s through the registered provider: %d, want %d", c.what, c.got, c.want)
		}
	}
	t.Logf("through the registered provider: %d contexts, %d CQs, %d QPs, %d sends, %d receives, %d completions",
		n.Contexts.Load(), n.CQs.Load(), n.QPs.Load(), n.Sends.Load(), n.Recvs.Load(), n.Completions.Load())
}
