package cm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// librdmacm's examples/rdma_server.c: a passive endpoint takes one
// connection, receives 16 bytes and answers 16.
func ExampleCreateEP_server() {
	ctx := context.Background()
	res, err := cm.GetAddrInfo("10.0.2.15", "7471", &cm.AddrInfo{Flags: cm.AIPassive, PortSpace: cm.PSTCP})
	if err != nil {
		log.Fatal(err)
	}
	attr := uverbs.QPInitAttr{
		Caps:      qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16},
		SignalAll: true,
	}
	listen, err := cm.CreateEP(ctx, res, nil, &attr)
	if err != nil {
		log.Fatal(err)
	}
	defer listen.Close()
	if err := listen.Listen(0); err != nil {
		log.Fatal(err)
	}
	id, err := listen.GetRequest(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer id.Close()

	recvMsg := make([]byte, 16)
	m, err := id.RegMsgs(recvMsg)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := id.PostRecv(0, recvMsg, m); err != nil {
		log.Fatal(err)
	}
	if err := id.Accept(ctx, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := id.GetRecvComp(ctx); err != nil {
		log.Fatal(err)
	}
	// Inline: the reply needs no registration.
	if err := id.PostSend(0, []byte("sixteen bytes!!!"), nil, wr.Inline); err != nil {
		log.Fatal(err)
	}
	// The client disconnects once it has the reply. Its device may not
	// have sent the acknowledgement yet, and a QP in the error state
	// sends none: the reply arrived, but its completion here is flushed.
	if _, err := id.GetSendComp(ctx); err != nil && !errors.Is(err, wr.ErrFlushed) {
		log.Fatal(err)
	}
	id.Disconnect(ctx)
}

// librdmacm's examples/rdma_client.c: an active endpoint connects, sends 16
// bytes and receives 16.
func ExampleCreateEP_client() {
	ctx := context.Background()
	res, err := cm.GetAddrInfo("10.0.2.15", "7471", &cm.AddrInfo{PortSpace: cm.PSTCP})
	if err != nil {
		log.Fatal(err)
	}
	attr := uverbs.QPInitAttr{
		Caps:      qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16},
		SignalAll: true,
	}
	id, err := cm.CreateEP(ctx, res, nil, &attr)
	if err != nil {
		log.Fatal(err)
	}
	defer id.Close()
	recvMsg := make([]byte, 16)
	m, err := id.RegMsgs(recvMsg)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := id.PostRecv(0, recvMsg, m); err != nil {
		log.Fatal(err)
	}
	if err := id.Connect(ctx, nil); err != nil {
		log.Fatal(err) // errors.Is(err, unix.ECONNREFUSED) when nobody listens
	}
	if err := id.PostSend(0, []byte("sixteen bytes!!!"), nil, wr.Inline); err != nil {
		log.Fatal(err)
	}
	// Flushed when the server replied and disconnected before this
	// side's device had the server's acknowledgement: the reply, if it
	// came, is the proof the message arrived.
	if _, err := id.GetSendComp(ctx); err != nil && !errors.Is(err, wr.ErrFlushed) {
		log.Fatal(err)
	}
	wc, err := id.GetRecvComp(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes: %q\n", wc.ByteLen, recvMsg)
	id.Disconnect(ctx)
}

// connected stands for an ID whose connection is up, as the endpoint
// examples make them, and peerMemory for the registered memory its peer
// sent (the peer's MR.Remote(), in the connection's private data or a
// message).
var (
	connected  *cm.ID
	peerMemory wr.Remote
)

// Send a message and wait for its completion; the context value comes back
// as the completion's ID.
func ExampleID_PostSend() {
	ctx := context.Background()
	mem, err := mr.Alloc(4096)
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()
	buf := mem.Bytes()
	m, err := connected.RegMsgs(buf)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	n := copy(buf, "hello")
	if err := connected.PostSend(42, buf[:n], m, wr.Signaled); err != nil {
		log.Fatal(err)
	}
	wc, err := connected.GetSendComp(ctx)
	if err != nil {
		log.Fatal(err) // a *wr.CompletionError for a failed request
	}
	fmt.Println(wc.ID) // 42
}

// Receive into registered memory.
func ExampleID_PostRecv() {
	ctx := context.Background()
	buf := make([]byte, 4096)
	m, err := connected.RegMsgs(buf)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := connected.PostRecv(7, buf, m); err != nil {
		log.Fatal(err)
	}
	wc, err := connected.GetRecvComp(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("request %d: %q\n", wc.ID, buf[:wc.ByteLen])
}

// Gather a send from two buffers, and scatter the peer's answer over two.
// The memory stays registered until both completions are in: the device
// reads and writes it after the calls return.
func ExampleID_PostRecvv() {
	ctx := context.Background()
	buf := make([]byte, 4096)
	m, err := connected.RegMsgs(buf)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := connected.PostRecvv(1, []wr.SGE{m.SGE(0, 8), m.SGE(1024, 64)}); err != nil {
		log.Fatal(err)
	}
	copy(buf[2048:], "gathered")
	copy(buf[3072:], " message")
	if err := connected.PostSendv(2, []wr.SGE{m.SGE(2048, 8), m.SGE(3072, 8)}, wr.Signaled); err != nil {
		log.Fatal(err)
	}
	if _, err := connected.GetSendComp(ctx); err != nil {
		log.Fatal(err)
	}
	wc, err := connected.GetRecvComp(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes: %q, then %q\n", wc.ByteLen, buf[:8], buf[1024:1024+wc.ByteLen-8])
}

// Write into the peer's memory: the peer registered it with RegWrite and
// sent its address and rkey.
func ExampleID_PostWrite() {
	ctx := context.Background()
	peer := peerMemory // from the peer: its MR.Remote()
	data := []byte("written remotely")
	// Small writes can go inline, without registration.
	if err := connected.PostWrite(1, data, nil, wr.Signaled|wr.Inline, peer); err != nil {
		log.Fatal(err)
	}
	if _, err := connected.GetSendComp(ctx); err != nil {
		log.Fatal(err)
	}
}

// Make memory readable and writable by the peer.
func ExampleID_RegWrite() {
	buf := make([]byte, 1<<20)
	w, err := connected.RegWrite(buf) // for the peer's PostWrite
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(w)
	r, err := connected.RegRead(buf) // for the peer's PostRead
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(r)
	fmt.Printf("tell the peer: address %#x, write key %#x, read key %#x\n", w.Addr(), w.RKey(), r.RKey())
}

// Read the peer's memory into a local buffer, and into two with PostReadv.
func ExampleID_PostRead() {
	ctx := context.Background()
	peer := peerMemory // from the peer, registered with RegRead
	buf := make([]byte, 4096)
	m, err := connected.RegMsgs(buf)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := connected.PostRead(1, buf[:100], m, wr.Signaled, peer); err != nil {
		log.Fatal(err)
	}
	if err := connected.PostReadv(2, []wr.SGE{m.SGE(200, 50), m.SGE(300, 50)}, wr.Signaled, peer); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if _, err := connected.GetSendComp(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// Resolve a UD service, then send it datagrams with PostUDSend.
func ExampleID_PostUDSend() {
	ctx := context.Background()
	id, err := cm.CreateID(nil, nil, cm.PSUDP)
	if err != nil {
		log.Fatal(err)
	}
	defer id.Close()
	dst := netip.MustParseAddrPort("10.0.2.15:7174")
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, dst, 2*time.Second); err != nil {
		log.Fatal(err)
	}
	if err := id.ResolveRoute(ctx, 2*time.Second); err != nil {
		log.Fatal(err)
	}
	if err := id.CreateQP(nil, uverbs.QPInitAttr{Caps: qp.Caps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		log.Fatal(err)
	}
	if err := id.Connect(ctx, nil); err != nil { // service ID resolution
		log.Fatal(err)
	}
	ud := id.Event().UD // the service's QP number, Q_Key and address
	ah, err := id.CreateAH(ud.AHAttr)
	if err != nil {
		log.Fatal(err)
	}
	defer ah.Close()
	if err := id.PostUDSend(1, []byte("datagram"), nil, wr.Signaled|wr.Inline, ah, ud.QPNum); err != nil {
		log.Fatal(err)
	}
	if _, err := id.GetSendComp(ctx); err != nil {
		log.Fatal(err)
	}
}

// Drive connections through one event channel, as rping and cmatose do:
// every operation returns at once and its outcome arrives as an event.
func ExampleEventChannel_GetEvent() {
	ctx := context.Background()
	ch, err := cm.NewEventChannel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	id, err := cm.CreateID(ch, "client", cm.PSTCP)
	if err != nil {
		log.Fatal(err)
	}
	defer id.Close()
	if err := id.ResolveAddr(ctx, netip.AddrPort{}, netip.MustParseAddrPort("10.0.2.15:7471"), 2*time.Second); err != nil {
		log.Fatal(err)
	}
	caps := qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := ev.Err(); err != nil {
			log.Fatalf("%v: %v", ev, err)
		}
		switch ev.Type {
		case cm.EventAddrResolved:
			err = ev.ID.ResolveRoute(ctx, 2*time.Second)
		case cm.EventRouteResolved:
			if err = ev.ID.CreateQP(nil, uverbs.QPInitAttr{Caps: caps}); err == nil {
				err = ev.ID.Connect(ctx, nil)
			}
		case cm.EventEstablished:
			fmt.Println("connected to", ev.ID.DstAddr())
			err = ev.ID.Disconnect(ctx)
		case cm.EventDisconnected:
			ev.Ack()
			return
		}
		ev.Ack()
		if err != nil {
			log.Fatal(err)
		}
	}
}

// A client that must learn within 5 s that its server went away, even
// when the server's machine loses power and nothing is in flight: a probe
// every second, each given 4 s. The wait for a reply then ends with the
// receive flushed, and the ID's events report DISCONNECTED with ETIMEDOUT.
func ExampleID_SetKeepAlive() {
	ctx := context.Background()
	res, err := cm.GetAddrInfo("10.0.2.15", "7471", &cm.AddrInfo{PortSpace: cm.PSTCP})
	if err != nil {
		log.Fatal(err)
	}
	attr := uverbs.QPInitAttr{
		// A send slot more than the program uses, for the probe.
		Caps: qp.Caps{MaxSendWR: 2, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16},
	}
	id, err := cm.CreateEP(ctx, res, nil, &attr)
	if err != nil {
		log.Fatal(err)
	}
	defer id.Close()
	reply := make([]byte, 16)
	m, err := id.RegMsgs(reply)
	if err != nil {
		log.Fatal(err)
	}
	defer cm.DeregMR(m)
	if err := id.PostRecv(0, reply, m); err != nil {
		log.Fatal(err)
	}
	if err := id.Connect(ctx, nil); err != nil {
		log.Fatal(err)
	}
	if err := id.SetKeepAlive(time.Second, 4*time.Second); err != nil {
		log.Fatal(err)
	}
	if _, err := id.GetRecvComp(ctx); err != nil {
		// A *wr.CompletionError with wr.WRFlushErr when the server went
		// away: its device no longer answered the probes.
		log.Fatal(err)
	}
	fmt.Printf("%q\n", reply)
}

// GetAddrInfo turns a literal address into what CreateEP takes; for
// numeric addresses it needs no device and no name service.
func ExampleGetAddrInfo() {
	res, err := cm.GetAddrInfo("10.0.2.15", "7471", &cm.AddrInfo{Flags: cm.AINumericHost})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.DstAddr, res.QPType, res.PortSpace)
	passive, err := cm.GetAddrInfo("", "7471", &cm.AddrInfo{Flags: cm.AIPassive})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(passive.SrcAddr)
	// Output:
	// 10.0.2.15:7471 RC RDMA_PS_TCP
	// 0.0.0.0:7471
}
