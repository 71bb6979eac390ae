package uverbs_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/rxe"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// List the RDMA devices and the state of their first port.
func ExampleDevices() {
	devs, err := uverbs.Devices()
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range devs {
		ctx, err := d.Open()
		if err != nil {
			log.Fatal(err)
		}
		port, err := ctx.QueryPort(1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (%s): %v, MTU %v\n", d.Name, d.Driver, port.State, port.ActiveMTU)
		ctx.Close()
	}
}

// Connect two reliable-connected queue pairs of one device to each other and
// move a message with an RDMA write, then a send with immediate data.
func ExamplePD_CreateQP() {
	ctx, err := uverbs.Open("rxe0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()
	buf, err := mr.New(pd, 4096, wr.LocalWrite|wr.RemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close()

	caps := qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	a, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := pd.CreateQP(uverbs.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Caps: caps})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// RoCE addresses peers by GID: use the device's IPv4 RoCE v2 GID.
	gids, err := ctx.QueryGIDTable()
	if err != nil {
		log.Fatal(err)
	}
	var gid qp.GID
	path := qp.Path{PortNum: 1}
	for _, g := range gids {
		if g.Type == uverbs.GIDTypeRoCEv2 && g.GID.Addr().Is4() {
			gid, path.SGIDIndex = g.GID, g.Index
		}
	}
	for _, pair := range [][2]*uverbs.QP{{a, b}, {b, a}} {
		q, peer := pair[0], pair[1]
		remote := qp.Endpoint{QPN: peer.Num(), GID: gid}
		for _, step := range []func() (qp.Attr, qp.AttrMask){
			func() (qp.Attr, qp.AttrMask) { return qp.ToInit(qp.RC, 1, 0, wr.RemoteWrite, 0) },
			func() (qp.Attr, qp.AttrMask) { return qp.ToRTR(qp.RC, remote, path, qp.MTU1024) },
			func() (qp.Attr, qp.AttrMask) { return qp.ToRTS(qp.RC, 0) },
		} {
			attr, mask := step()
			if err := q.Modify(attr, mask); err != nil {
				log.Fatal(err)
			}
		}
	}

	copy(buf.Bytes(), "hello")
	if _, err := b.PostRecv([]wr.RecvWR{{ID: 2}}); err != nil {
		log.Fatal(err)
	}
	if _, err := a.PostSend([]wr.SendWR{
		{ID: 1, Opcode: wr.OpRDMAWrite, SGList: []wr.SGE{buf.SGE(0, 5)}, Remote: wr.Remote{Addr: buf.Addr() + 2048, RKey: buf.RKey()}},
		{ID: 3, Opcode: wr.OpSendWithImm, Imm: 5, Flags: wr.Signaled},
	}); err != nil {
		log.Fatal(err)
	}
	wc := make([]wr.Completion, 4)
	for got := 0; got < 2; {
		n, err := cq.Poll(wc[got:])
		if err != nil {
			log.Fatal(err)
		}
		got += n
	}
	fmt.Println(string(buf.Bytes()[2048:2053]))
}

// Wait for completions without spinning, until a deadline: Wait polls,
// arms the CQ and parks the goroutine on its completion channel.
func ExampleCQ_Wait() {
	ctx, err := uverbs.Open("rxe0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	ch, err := ctx.NewCompChannel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()

	// ... create QPs on cq and post to them ...
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]wr.Completion, 16)
	for {
		n, err := cq.Wait(wctx, wc)
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Println("no completion for 10 s")
			return
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, c := range wc[:n] {
			fmt.Println(c.ID, c.Err())
		}
	}
}

// Spin until a completion comes, polling only when the CQ has one: on rxe
// Pending reads the ring's two indices, less work than a Poll that finds
// it empty.
func ExampleCQ_Pending() {
	ctx, err := uverbs.Open("rxe0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, SingleThreaded: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()

	// ... create QPs on cq and post to them ...
	wc := make([]wr.Completion, 16)
	for deadline := time.Now().Add(10 * time.Millisecond); time.Now().Before(deadline); {
		if !cq.Pending() {
			continue
		}
		n, err := cq.Poll(wc)
		if err != nil {
			log.Fatal(err)
		}
		for _, c := range wc[:n] {
			fmt.Println(c.ID, c.Err())
		}
	}
}

// Wait for completions without spinning, by hand: arm the CQ and park the
// goroutine on its completion channel (CQ.Wait does this).
func ExampleCompChannel_GetEvent() {
	ctx, err := uverbs.Open("rxe0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	ch, err := ctx.NewCompChannel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()

	wc := make([]wr.Completion, 16)
	for {
		if err := cq.ReqNotify(false); err != nil {
			log.Fatal(err)
		}
		// Completions that arrived before arming would raise no event:
		// poll once more after arming.
		n, _ := cq.Poll(wc)
		if n == 0 {
			got, err := ch.GetEvent(context.Background())
			if err != nil {
				log.Fatal(err)
			}
			got.AckEvents(1)
			n, _ = got.Poll(wc)
		}
		for _, c := range wc[:n] {
			fmt.Println(c.ID, c.Status)
		}
	}
}

// A latency-critical loop on a goroutine of its own: a single-threaded CQ
// (no lock on Poll) and event waits that sleep in the kernel on this thread
// instead of in the runtime poller.
func ExampleCompChannel_GetEventDirect() {
	ctx, err := uverbs.Open("rxe0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	ch, err := ctx.NewCompChannel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 16, Channel: ch, SingleThreaded: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()

	wc := make([]wr.Completion, 16)
	for {
		n, _ := cq.Poll(wc)
		if n == 0 {
			if err := cq.ReqNotify(false); err != nil {
				log.Fatal(err)
			}
			if n, _ = cq.Poll(wc); n == 0 {
				got, err := ch.GetEventDirect(context.Background())
				if err != nil {
					log.Fatal(err)
				}
				got.AckEvents(1)
				continue
			}
		}
		for _, c := range wc[:n] {
			fmt.Println(c.ID, c.Status)
		}
	}
}

// Post an RDMA write of a registered buffer and a send of a few inline
// bytes as one batch, with no slice of work requests: both reach the
// device with one doorbell, or, if either is refused, neither does. The
// QP is connected and ready to send; rkey and raddr name the peer's
// buffer.
func ExampleQP_BeginSend() {
	var (
		q     *uverbs.QP
		buf   *mr.Region
		rkey  uint32
		raddr uint64
	)
	b, err := q.BeginSend()
	if err != nil {
		log.Fatal(err)
	}
	b.RDMAWrite(1, 0, rkey, raddr)
	b.SetSGE(buf.LKey(), buf.Addr(), 4096)
	b.Send(2, wr.Signaled)
	b.SetInlineData([]byte("written"))
	if _, err := b.Complete(); err != nil {
		log.Fatal(err)
	}
}

// Ask for completion timestamps where the device has them, and turn one
// into wall time.
func ExampleCQAttr_timestamps() {
	ctx, err := uverbs.Open("mlx5_0")
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	attr, err := ctx.QueryDevice()
	if err != nil {
		log.Fatal(err)
	}
	// The probe rdma-core's programs make: a zero mask means none (rxe).
	ts := attr.CompletionTimestampMask != 0
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 64, Timestamps: ts})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()
	// ... create a QP on cq, post, then:
	wc := make([]wr.Completion, 16)
	n, err := cq.Poll(wc)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range wc[:n] {
		if !ts {
			break
		}
		when, err := ctx.TimestampTime(c.Timestamp)
		if errors.Is(err, errors.ErrUnsupported) {
			break // cycles only: the kernel publishes no clock info
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d completed at %v (cycle %d)\n", c.ID, when, c.Timestamp)
	}
}

// tracedRxe is the module's rxe provider with a log line for each context
// it serves: a program's own provider, written with package provider
// alone (hack/extprovider has a complete one, tested in the VM).
type tracedRxe struct{ rxe.Driver }

func (d tracedRxe) NewContext(k provider.Kernel) (provider.Builder[provider.Context], error) {
	log.Printf("%s: new context", d.Name())
	return d.Driver.NewContext(k)
}

// Register a provider before opening a device: here it replaces the
// module's own for rxe devices; a provider for a device the module does
// not carry registers the same way, under its kernel driver's name.
func ExampleRegisterProvider() {
	uverbs.RegisterProvider(tracedRxe{})
	ctx, err := uverbs.Open("rxe0") // logs "rxe: new context"
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
}

// A UD receive starts with the datagram's network header: GRHSize bytes,
// here a RoCE v2 packet over IPv4, whose IPv4 header fills the last 20.
// ParseGRH tells who sent it; the payload follows.
func ExampleParseGRH() {
	buf := make([]byte, uverbs.GRHSize+5)
	hdr, _ := hex.DecodeString("4500003c00004000401122930a00020f0a000210")
	copy(buf[20:], hdr)
	copy(buf[uverbs.GRHSize:], "hello")

	grh, err := uverbs.ParseGRH(buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(grh.Version, grh.NextHdr, grh.SGID.Addr().Unmap(), "→", grh.DGID.Addr().Unmap())
	fmt.Printf("%s\n", buf[uverbs.GRHSize:])
	// Output:
	// 4 17 10.0.2.15 → 10.0.2.16
	// hello
}
