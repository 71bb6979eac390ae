// Package ucmatose is "rdmago ucmatose", rdma-core's cmatose (installed
// as ucmatose): RC connections over rdma_cm, with send/receive messages
// exchanged on each.
package ucmatose

// librdmacm's cmatose example (librdmacm/examples/cmatose.c, v44.0) in
// Go, on the same calls of package cm and uverbs, so that either side may
// be the C program. The client resolves the server's address and route
// for each of its connections, posts its receives and connects; the
// server posts its receives and accepts. The server then sends -C
// messages of -S bytes on each connection and waits for their completions
// and for as many replies, which the client sends once all of the
// server's messages have arrived; the server disconnects, and both sides
// wait for each connection's DISCONNECTED event. Both busy-poll their
// completion queues, as the C program does.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/cmacommon"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Commands is "rdmago ucmatose" (the name of Debian's binary of cmatose).
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "ucmatose",
		Summary: "exchange messages on RC connections over rdma_cm (as ucmatose, librdmacm's cmatose)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), "ucmatose", args, stdout, stderr)
		},
		Usage: func(w io.Writer) { usage(w, "ucmatose") },
	}}
}

const (
	defaultPort = "7471"
	// resolveTimeout is cmatose's 2000 ms for address and route
	// resolution.
	resolveTimeout = 2 * time.Second
	errnoRet       = cmacommon.ErrnoRet
)

// options are cmatose's command line.
type options struct {
	dst, src    string // -s, -b
	port        string // -p
	connections int32  // -c
	count       int32  // -C
	size        int32  // -S
	setTOS      bool   // -t given
	tos         uint8
	setTimeout  bool // -a given
	timeout     uint8
	migrate     bool        // -m
	hints       cm.AddrInfo // -f, -P
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-f address_format]\n")
	fmt.Fprintf(w, "\t    name, ip, ipv6, or gid\n")
	fmt.Fprintf(w, "\t[-P port_space]\n")
	fmt.Fprintf(w, "\t    tcp or ib\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-C message_count]\n")
	fmt.Fprintf(w, "\t[-S message_size]\n")
	fmt.Fprintf(w, "\t[-t type_of_service]\n")
	fmt.Fprintf(w, "\t[-p port_number]\n")
	fmt.Fprintf(w, "\t[-m(igrate)]\n")
	fmt.Fprintf(w, "\t[-a ack_timeout]\n")
}

// parse reads the command line as cmatose's getopt loop does, warnings
// and all. run is false when the program ends there, with status.
func parse(argv0 string, args []string, stdout, stderr io.Writer) (o options, status int, run bool) {
	o = options{port: defaultPort, connections: 1, count: 10, size: 100}
	o.hints.PortSpace = cm.PSTCP
	msg, ok := getopt.Short(argv0, args, "s:b:f:P:c:C:S:t:p:a:m", func(opt byte, arg string) {
		switch opt {
		case 's':
			o.dst = arg
		case 'b':
			o.src = arg
		case 'f':
			cmacommon.AddrFormat(arg, &o.hints, stderr)
		case 'P':
			switch {
			case cmacommon.HasPrefixFold(arg, "ib"):
				o.hints.PortSpace = cm.PSIB
			case !cmacommon.HasPrefixFold(arg, "tcp"):
				fmt.Fprintf(stderr, "Warning: unknown port space format\n")
			}
		case 'c':
			o.connections = clib.Atoi(arg)
		case 'C':
			o.count = clib.Atoi(arg)
		case 'S':
			o.size = clib.Atoi(arg)
		case 't':
			o.setTOS = true
			o.tos = uint8(clib.Strtoul(arg))
		case 'p':
			o.port = arg
		case 'm':
			o.migrate = true
		case 'a':
			o.setTimeout = true
			o.timeout = uint8(clib.Strtoul(arg))
		}
	})
	if !ok {
		io.WriteString(stderr, msg)
		usage(stdout, argv0)
		return o, 1, false
	}
	return o, 0, true
}

// The two completion queues of a node (enum CQ_INDEX).
const (
	sendCQ = iota
	recvCQ
)

// node is one connection (struct cmatest_node).
type node struct {
	id        *cm.ID
	connected bool
	pd        *uverbs.PD
	cq        [2]*uverbs.CQ
	mem       *mr.Memory
	mr        *uverbs.MR
}

// test is one run (struct cmatest and cmatose's globals).
type test struct {
	o               options
	stdout, stderr  io.Writer
	ctx             context.Context
	ch              *cm.EventChannel
	nodes           []*node
	connIndex       int
	connectsLeft    int32
	disconnectsLeft int32
	res             *cm.AddrInfo
}

// Main runs cmatose with args and returns its exit status: its return
// status as a byte.
func Main(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	o, status, run := parse(argv0, args, stdout, stderr)
	if !run {
		return status
	}
	t := &test{o: o, stdout: stdout, stderr: stderr, ctx: ctx, connectsLeft: o.connections}
	if t.ch = cmacommon.OpenChannel(stderr); t.ch == nil {
		return 1
	}
	if !t.allocNodes() {
		t.ch.Close()
		return 1
	}
	var ret int
	if o.dst != "" {
		ret = t.runClient()
	} else {
		t.o.hints.Flags |= cm.AIPassive
		ret = t.runServer()
	}
	fmt.Fprintf(stdout, "test complete\n")
	t.destroyNodes()
	t.ch.Close()
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return int(uint8(ret))
}

func (t *test) perror(prefix string, err error) { io.WriteString(t.stderr, clib.Perror(prefix, err)) }

// allocNodes makes the nodes, and a client's IDs.
func (t *test) allocNodes() bool {
	if t.o.connections < 0 {
		fmt.Fprintf(t.stdout, "cmatose: unable to allocate memory for test nodes\n")
		return false
	}
	t.nodes = make([]*node, t.o.connections)
	for i := range t.nodes {
		n := &node{}
		t.nodes[i] = n
		if t.o.dst != "" {
			id, err := cm.CreateID(t.ch, n, t.o.hints.PortSpace)
			if err != nil {
				for _, m := range t.nodes[:i] {
					m.id.Close()
				}
				return false
			}
			n.id = id
		}
	}
	return true
}

func (t *test) destroyNodes() {
	for _, n := range t.nodes {
		n.destroy()
	}
}

// destroy releases what the node has, its ID last.
func (n *node) destroy() {
	if n.id == nil {
		return
	}
	if n.id.QP() != nil {
		n.id.DestroyQP()
	}
	clib.CloseIf(n.cq[sendCQ])
	clib.CloseIf(n.cq[recvCQ])
	if n.mem != nil {
		n.mr.Close()
		n.mem.Close()
	}
	clib.CloseIf(n.pd)
	n.id.Close()
}

// createMessage allocates and registers the one buffer every message of
// the node goes through. A size of 0 means no messages at all, for this
// node and the ones after it.
func (t *test) createMessage(n *node) int {
	if t.o.size == 0 {
		t.o.count = 0
	}
	if t.o.count == 0 {
		return 0
	}
	if t.o.size < 0 {
		// malloc of the size as a size_t
		fmt.Fprintf(t.stdout, "failed message allocation\n")
		return -1
	}
	mem, err := mr.Alloc(int(t.o.size))
	if err != nil {
		fmt.Fprintf(t.stdout, "failed message allocation\n")
		return -1
	}
	m, err := n.pd.RegMR(mem.Bytes()[:t.o.size], wr.LocalWrite)
	if err != nil {
		fmt.Fprintf(t.stdout, "failed to reg MR\n")
		mem.Close()
		return -1
	}
	n.mem, n.mr = mem, m
	return 0
}

// initNode makes the node's PD, CQs, QP and message buffer.
func (t *test) initNode(n *node) int {
	verbs := n.id.Verbs()
	pd, err := verbs.AllocPD()
	if err != nil {
		fmt.Fprintf(t.stdout, "cmatose: unable to allocate PD\n")
		return -int(unix.ENOMEM)
	}
	n.pd = pd
	cqe := int(t.o.count)
	if cqe == 0 {
		cqe = 1
	}
	for i := range n.cq {
		// A negative count is a huge one to ibv_create_cq.
		if cqe < 0 {
			break
		}
		if n.cq[i], err = verbs.CreateCQ(uverbs.CQAttr{CQE: cqe}); err != nil {
			n.cq[i] = nil
		}
	}
	if n.cq[sendCQ] == nil || n.cq[recvCQ] == nil {
		fmt.Fprintf(t.stdout, "cmatose: unable to create CQ\n")
		return -int(unix.ENOMEM)
	}
	attr := uverbs.QPInitAttr{
		Type:      qp.RC,
		SendCQ:    n.cq[sendCQ],
		RecvCQ:    n.cq[recvCQ],
		Caps:      qp.Caps{MaxSendWR: uint32(cqe), MaxRecvWR: uint32(cqe), MaxSendSGE: 1, MaxRecvSGE: 1},
		SignalAll: true,
	}
	if err := n.id.CreateQP(pd, attr); err != nil {
		t.perror("cmatose: unable to create QP", err)
		return errnoRet
	}
	if ret := t.createMessage(n); ret != 0 {
		fmt.Fprintf(t.stdout, "cmatose: failed to create messages: %d\n", ret)
		return ret
	}
	return 0
}

// sge is the node's buffer, the whole message.
func (t *test) sge(n *node) wr.SGE {
	s := n.mr.SGE(0, 0)
	s.Length = uint32(t.o.size)
	return s
}

func (t *test) postRecvs(n *node) int {
	if t.o.count == 0 {
		return 0
	}
	rwr := []wr.RecvWR{{SGList: []wr.SGE{t.sge(n)}}}
	for i := int32(0); i < t.o.count; i++ {
		if _, err := n.id.QP().PostRecv(rwr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post receives: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return 0
}

func (t *test) postSends(n *node) int {
	if !n.connected || t.o.count == 0 {
		return 0
	}
	swr := []wr.SendWR{{SGList: []wr.SGE{t.sge(n)}, Opcode: wr.OpSend}}
	for i := int32(0); i < t.o.count; i++ {
		if _, err := n.id.QP().PostSend(swr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post sends: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return 0
}

func (t *test) connectError() { t.connectsLeft-- }

// setAckTimeout is -a's option, on a client's ID once its address is
// resolved and on a server's once its request came.
func (t *test) setAckTimeout(n *node) {
	if t.o.setTimeout {
		if err := n.id.SetAckTimeout(t.o.timeout); err != nil {
			t.perror("cmatose: set ack timeout option failed", err)
		}
	}
}

func (t *test) addrHandler(n *node) int {
	if t.o.setTOS {
		if err := n.id.SetTOS(t.o.tos); err != nil {
			t.perror("cmatose: set TOS option failed", err)
		}
	}
	t.setAckTimeout(n)
	if err := n.id.ResolveRoute(t.ctx, resolveTimeout); err != nil {
		t.perror("cmatose: resolve route failed", err)
		t.connectError()
		return errnoRet
	}
	return 0
}

func (t *test) routeHandler(n *node) int {
	ret := t.initNode(n)
	if ret == 0 {
		ret = t.postRecvs(n)
	}
	if ret == 0 {
		p := &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, PrivateData: t.res.Connect}
		if err := n.id.Connect(t.ctx, p); err != nil {
			t.perror("cmatose: failure connecting", err)
			ret = errnoRet
		}
	}
	if ret != 0 {
		t.connectError()
	}
	return ret
}

func (t *test) connectHandler(id *cm.ID) int {
	if t.connIndex == len(t.nodes) {
		fmt.Fprintf(t.stdout, "cmatose: failing connection request\n")
		id.Reject(nil)
		// cmatose leaves the ID; rdmago destroys it.
		id.Close()
		return -int(unix.ENOMEM)
	}
	n := t.nodes[t.connIndex]
	t.connIndex++
	n.id = id
	id.SetUserData(n)
	ret := t.initNode(n)
	if ret == 0 {
		t.setAckTimeout(n)
		ret = t.postRecvs(n)
	}
	if ret == 0 {
		if err := id.Accept(t.ctx, nil); err != nil {
			t.perror("cmatose: failure accepting", err)
			ret = errnoRet
		}
	}
	if ret == 0 {
		return 0
	}
	t.connectError()
	fmt.Fprintf(t.stdout, "cmatose: failing connection request\n")
	id.Reject(nil)
	// cmatose forgets the node's ID here and leaks what init_node made;
	// rdmago releases them.
	n.destroy()
	*n = node{}
	return ret
}

func (t *test) handle(ev *cm.Event) int {
	n, _ := ev.ID.UserData().(*node)
	switch ev.Type {
	case cm.EventAddrResolved:
		return t.addrHandler(n)
	case cm.EventRouteResolved:
		return t.routeHandler(n)
	case cm.EventConnectRequest:
		return t.connectHandler(ev.ID)
	case cm.EventEstablished:
		n.connected = true
		t.connectsLeft--
		t.disconnectsLeft++
	case cm.EventAddrError, cm.EventRouteError, cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
		fmt.Fprintf(t.stdout, "cmatose: event: %s, error: %d\n", ev.Type, ev.Status)
		t.connectError()
		return ev.Status
	case cm.EventDisconnected:
		ev.ID.Disconnect(t.ctx)
		t.disconnectsLeft--
	}
	// DEVICE_REMOVAL: the cleanup comes after the test, as in cmatose.
	return 0
}

// events handles events while *left is not 0 (connect_events and
// disconnect_events, which name themselves in what they print).
func (t *test) events(left *int32, which string) int {
	ret := 0
	for *left != 0 && ret == 0 {
		ev, err := t.ch.GetEvent(t.ctx)
		if err != nil {
			t.perror("cmatose: failure in rdma_get_cm_event in "+which, err)
			return clib.Errno(err)
		}
		ret = t.handle(ev)
		ev.Ack()
	}
	return ret
}

// pollCQs waits, node after node, for -C completions on the CQ index of
// each connected node, spinning as the C program does.
func (t *test) pollCQs(index int) int {
	var wc [8]wr.Completion
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for done := int32(0); done < t.o.count; {
			k, err := n.cq[index].Poll(wc[:])
			if err != nil {
				ret := -clib.Errno(err)
				fmt.Fprintf(t.stdout, "cmatose: failed polling CQ: %d\n", ret)
				return ret
			}
			if k == 0 {
				if t.ctx.Err() != nil {
					return errnoRet
				}
				runtime.Gosched()
				continue
			}
			done += int32(k)
		}
	}
	return 0
}

// migrateChannel moves the IDs to a new event channel (-m).
func (t *test) migrateChannel(listen *cm.ID) int {
	fmt.Fprintf(t.stdout, "migrating to new event channel\n")
	ch, err := cm.NewEventChannel()
	if err != nil {
		t.perror("cmatose: failed to create event channel", err)
		return -1
	}
	if listen != nil {
		err = listen.Migrate(ch)
	}
	for _, n := range t.nodes {
		if err != nil {
			break
		}
		if n.id != nil {
			err = n.id.Migrate(ch)
		}
	}
	if err != nil {
		t.perror("cmatose: failure migrating to channel", err)
		// Like cmatose, rdmago keeps both channels: some IDs may be on
		// the new one.
		return errnoRet
	}
	t.ch.Close()
	t.ch = ch
	return 0
}

func (t *test) getAddr(what string) int {
	a := cmacommon.Addr{Src: t.o.src, Dst: t.o.dst, Port: t.o.port, Hints: t.o.hints}
	res, ret := a.Get(t.ctx, "cmatose", what, t.stdout, t.stderr)
	t.res = res
	return ret
}

func (t *test) runServer() int {
	fmt.Fprintf(t.stdout, "cmatose: starting server\n")
	listen, err := cm.CreateID(t.ch, t, t.o.hints.PortSpace)
	if err != nil {
		t.perror("cmatose: listen request failed", err)
		return errnoRet
	}
	defer listen.Close()
	if ret := t.getAddr("getrdmaaddr"); ret != 0 {
		return ret
	}
	if err := listen.BindAddr(t.res.SrcAddr); err != nil {
		t.perror("cmatose: bind address failed", err)
		return errnoRet
	}
	if err := listen.Listen(0); err != nil {
		t.perror("cmatose: failure trying to listen", err)
		return errnoRet
	}
	if ret := t.events(&t.connectsLeft, "connect events"); ret != 0 {
		return ret
	}
	if t.o.count != 0 {
		fmt.Fprintf(t.stdout, "initiating data transfers\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n); ret != 0 {
				return ret
			}
		}
		fmt.Fprintf(t.stdout, "completing sends\n")
		if ret := t.pollCQs(sendCQ); ret != 0 {
			return ret
		}
		fmt.Fprintf(t.stdout, "receiving data transfers\n")
		if ret := t.pollCQs(recvCQ); ret != 0 {
			return ret
		}
		fmt.Fprintf(t.stdout, "data transfers complete\n")
	}
	if t.o.migrate {
		if ret := t.migrateChannel(listen); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.stdout, "cmatose: disconnecting\n")
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		n.connected = false
		n.id.Disconnect(t.ctx)
	}
	ret := t.events(&t.disconnectsLeft, "disconnect events")
	fmt.Fprintf(t.stdout, "disconnected\n")
	return ret
}

func (t *test) runClient() int {
	fmt.Fprintf(t.stdout, "cmatose: starting client\n")
	if ret := t.getAddr("getaddrinfo"); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "cmatose: connecting\n")
	var src netip.AddrPort
	if t.res.SrcAddr.Addr().IsValid() {
		src = t.res.SrcAddr
	}
	for _, n := range t.nodes {
		if err := n.id.ResolveAddr(t.ctx, src, t.res.DstAddr, resolveTimeout); err != nil {
			t.perror("cmatose: failure getting addr", err)
			t.connectError()
			return errnoRet
		}
	}
	ret := t.events(&t.connectsLeft, "connect events")
	if ret == 0 {
		ret = t.exchange()
		if ret == 0 && t.o.migrate {
			if ret = t.migrateChannel(nil); ret != 0 {
				return ret
			}
		}
	}
	if ret2 := t.events(&t.disconnectsLeft, "disconnect events"); ret2 != 0 {
		ret = ret2
	}
	return ret
}

// exchange is the client's part of the transfers: the server's messages
// in, the replies out.
func (t *test) exchange() int {
	if t.o.count == 0 {
		return 0
	}
	fmt.Fprintf(t.stdout, "receiving data transfers\n")
	if ret := t.pollCQs(recvCQ); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "sending replies\n")
	for _, n := range t.nodes {
		if ret := t.postSends(n); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.stdout, "data transfers complete\n")
	return 0
}
