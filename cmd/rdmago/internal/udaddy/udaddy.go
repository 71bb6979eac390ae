// Package udaddy is "rdmago udaddy", rdma-core's udaddy: unreliable
// datagrams exchanged over rdma_cm's UDP port space.
package udaddy

// librdmacm's udaddy example (librdmacm/examples/udaddy.c, v44.0) in Go,
// on the same calls of package cm and uverbs, so that either side may be
// the C program. The client resolves the server's address and route for
// each of its connections, and its SIDR request tells it the server's QP
// number and Q_Key (the ESTABLISHED event); it then sends -C datagrams of
// -S bytes per connection, SEND_WITH_IMM with its QP number as immediate
// data, and waits for as many back. The server, which knows nothing of a
// client but its request, answers each client from the first datagram it
// received (its GRH and immediate data) once all have arrived. Both sides
// busy-poll their completion queues, as the C program does.

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

// Commands is "rdmago udaddy" (the C program's name too).
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "udaddy",
		Summary: "exchange UD datagrams over rdma_cm's UDP port space (as udaddy)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), "udaddy", args, stdout, stderr)
		},
		Usage: func(w io.Writer) { usage(w, "udaddy") },
	}}
}

const (
	defaultPort = "7174"
	// grhSize is the room for the GRH in front of each received datagram.
	grhSize = uverbs.GRHSize
	// resolveTimeout is udaddy's 2000 ms for address and route resolution.
	resolveTimeout = 2 * time.Second
)

// options are udaddy's command line.
type options struct {
	dst, src    string // -s, -b
	port        string
	connections int32 // -c
	count       int32 // -C
	size        int32 // -S
	setTOS      bool  // -t given
	tos         uint8
	hints       cm.AddrInfo // -f, -P, -p
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-f address_format]\n")
	fmt.Fprintf(w, "\t    name, ip, ipv6, or gid\n")
	fmt.Fprintf(w, "\t[-P port_space]\n")
	fmt.Fprintf(w, "\t    udp or ipoib\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-C message_count]\n")
	fmt.Fprintf(w, "\t[-S message_size]\n")
	fmt.Fprintf(w, "\t[-t type_of_service]\n")
	fmt.Fprintf(w, "\t[-p port_space - %#x for UDP (default), %#x for IPOIB]\n", uint16(cm.PSUDP), uint16(cm.PSIPoIB))
}

// parse reads the command line as udaddy's getopt loop does, warnings and
// all. run is false when the program ends there, with status.
func parse(argv0 string, args []string, stdout, stderr io.Writer) (o options, status int, run bool) {
	o = options{port: defaultPort, connections: 1, count: 10, size: 100}
	o.hints.PortSpace = cm.PSUDP
	msg, ok := getopt.Short(argv0, args, "s:b:c:C:S:t:p:P:f:", func(opt byte, arg string) {
		switch opt {
		case 's':
			o.dst = arg
		case 'b':
			o.src = arg
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
			// An int holds it in C; the kernel reads 16 bits of it.
			o.hints.PortSpace = cm.PortSpace(uint16(int32(clib.Strtol(arg))))
		case 'f':
			cmacommon.AddrFormat(arg, &o.hints, stderr)
		case 'P':
			switch {
			case cmacommon.HasPrefixFold(arg, "ipoib"):
				o.hints.PortSpace = cm.PSIPoIB
			case !cmacommon.HasPrefixFold(arg, "udp"):
				fmt.Fprintf(stderr, "Warning: unknown port space format\n")
			}
		}
	})
	if !ok {
		io.WriteString(stderr, msg)
		usage(stdout, argv0)
		return o, 1, false
	}
	return o, 0, true
}

// node is one connection (struct cmatest_node).
type node struct {
	id         *cm.ID
	connected  bool
	pd         *uverbs.PD
	cq         *uverbs.CQ
	mem        *mr.Memory
	mr         *uverbs.MR
	ah         *uverbs.AH
	remoteQPN  uint32
	remoteQKey uint32
}

// test is one run (struct cmatest and udaddy's globals).
type test struct {
	o              options
	stdout, stderr io.Writer
	ctx            context.Context
	ch             *cm.EventChannel
	nodes          []*node
	connIndex      int
	connectsLeft   int32
	res            *cm.AddrInfo
}

// Main runs udaddy with args and returns its exit status: its return
// status as a byte.
func Main(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	o, status, run := parse(argv0, args, stdout, stderr)
	if !run {
		return status
	}
	t := &test{o: o, stdout: stdout, stderr: stderr, ctx: ctx, connectsLeft: o.connections}
	ch := cmacommon.OpenChannel(stderr)
	if ch == nil {
		return 1
	}
	t.ch = ch
	if !t.allocNodes() {
		ch.Close()
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
	ch.Close()
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return int(uint8(ret))
}

func (t *test) perror(prefix string, err error) { io.WriteString(t.stderr, clib.Perror(prefix, err)) }

const errnoRet = cmacommon.ErrnoRet

// allocNodes makes the nodes, and a client's IDs.
func (t *test) allocNodes() bool {
	if t.o.connections < 0 {
		fmt.Fprintf(t.stdout, "udaddy: unable to allocate memory for test nodes\n")
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

func (n *node) destroy() {
	if n.id == nil {
		return
	}
	if n.ah != nil {
		n.ah.Close()
	}
	if n.id.QP() != nil {
		n.id.DestroyQP()
	}
	if n.cq != nil {
		n.cq.Close()
	}
	if n.mem != nil {
		n.mr.Close()
		n.mem.Close()
	}
	if n.pd != nil {
		n.pd.Close()
	}
	n.id.Close()
}

// getAddr is get_rdma_addr, failures printed as udaddy prints them.
func (t *test) getAddr(what string) int {
	a := cmacommon.Addr{Src: t.o.src, Dst: t.o.dst, Port: t.o.port, Hints: t.o.hints}
	res, ret := a.Get(t.ctx, "udaddy", what, t.stdout, t.stderr)
	t.res = res
	return ret
}

// verifyParams refuses a message the path MTU cannot carry.
func (t *test) verifyParams(n *node) int {
	pa, err := n.id.Verbs().QueryPort(n.id.PortNum())
	if err != nil {
		return clib.Errno(err)
	}
	mtu := int32(pa.ActiveMTU.Bytes())
	if t.o.count != 0 && t.o.size > mtu {
		fmt.Fprintf(t.stdout, "udaddy: message_size %d is larger than active mtu %d\n", t.o.size, mtu)
		return -int(unix.EINVAL)
	}
	return 0
}

// initNode makes the node's PD, CQ, QP and message buffer.
func (t *test) initNode(n *node) int {
	verbs := n.id.Verbs()
	pd, err := verbs.AllocPD()
	if err != nil {
		fmt.Fprintf(t.stdout, "udaddy: unable to allocate PD\n")
		return -int(unix.ENOMEM)
	}
	n.pd = pd
	cqe, wrs := 2, 1
	if t.o.count != 0 {
		cqe, wrs = int(t.o.count)*2, int(t.o.count)
	}
	if n.cq, err = verbs.CreateCQ(uverbs.CQAttr{CQE: cqe}); err != nil {
		n.cq = nil
		fmt.Fprintf(t.stdout, "udaddy: unable to create CQ\n")
		return -int(unix.ENOMEM)
	}
	attr := uverbs.QPInitAttr{
		Type:   qp.UD,
		SendCQ: n.cq,
		RecvCQ: n.cq,
		Caps:   qp.Caps{MaxSendWR: uint32(wrs), MaxRecvWR: uint32(wrs), MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	if err := n.id.CreateQP(pd, attr); err != nil {
		t.perror("udaddy: unable to create QP", err)
		return errnoRet
	}
	if ret := t.createMessage(n); ret != 0 {
		fmt.Fprintf(t.stdout, "udaddy: failed to create messages: %d\n", ret)
		return ret
	}
	return 0
}

// createMessage is create_message: the node's message buffer
// (cmacommon.CreateUDMessage).
func (t *test) createMessage(n *node) int {
	var ret int
	n.mem, n.mr, ret = cmacommon.CreateUDMessage(t.stdout, n.pd, t.o.size, &t.o.count)
	return ret
}

// sge is the node's buffer as C's SGE of length bytes names it.
func (n *node) sge(length int64) wr.SGE { return cmacommon.MessageSGE(n.mr, length) }

func (t *test) postRecvs(n *node) int {
	if t.o.count == 0 {
		return 0
	}
	rwr := []wr.RecvWR{{ID: 0, SGList: []wr.SGE{n.sge(int64(t.o.size) + grhSize)}}}
	for i := int32(0); i < t.o.count; i++ {
		if _, err := n.id.QP().PostRecv(rwr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post receives: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return 0
}

func (t *test) postSends(n *node, flags wr.SendFlags) int {
	if !n.connected || t.o.count == 0 {
		return 0
	}
	q := n.id.QP()
	swr := []wr.SendWR{{
		SGList:     []wr.SGE{n.sge(int64(t.o.size))},
		Opcode:     wr.OpSendWithImm,
		Flags:      flags,
		Imm:        q.Num(),
		AH:         n.ah,
		RemoteQPN:  n.remoteQPN,
		RemoteQKey: n.remoteQKey,
	}}
	for i := int32(0); i < t.o.count; i++ {
		if _, err := q.PostSend(swr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post sends: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return 0
}

func (t *test) connectError() { t.connectsLeft-- }

func (t *test) addrHandler(n *node) int {
	if t.o.setTOS {
		if err := n.id.SetTOS(t.o.tos); err != nil {
			t.perror("udaddy: set TOS option failed", err)
		}
	}
	if err := n.id.ResolveRoute(t.ctx, resolveTimeout); err != nil {
		t.perror("udaddy: resolve route failed", err)
		t.connectError()
		return errnoRet
	}
	return 0
}

func (t *test) routeHandler(n *node) int {
	ret := t.verifyParams(n)
	if ret == 0 {
		ret = t.initNode(n)
	}
	if ret == 0 {
		ret = t.postRecvs(n)
	}
	if ret == 0 {
		if err := n.id.Connect(t.ctx, &cm.ConnParam{PrivateData: t.res.Connect}); err != nil {
			t.perror("udaddy: failure connecting", err)
			ret = errnoRet
		}
	}
	if ret != 0 {
		t.connectError()
	}
	return ret
}

func (t *test) connectHandler(id *cm.ID) int {
	ret := -int(unix.ENOMEM)
	if t.connIndex < len(t.nodes) {
		n := t.nodes[t.connIndex]
		t.connIndex++
		n.id = id
		id.SetUserData(n)
		ret = t.verifyParams(n)
		if ret == 0 {
			ret = t.initNode(n)
		}
		if ret == 0 {
			ret = t.postRecvs(n)
		}
		if ret == 0 {
			if err := id.Accept(t.ctx, &cm.ConnParam{QPNum: id.QP().Num()}); err != nil {
				t.perror("udaddy: failure accepting", err)
				ret = errnoRet
			}
		}
		if ret == 0 {
			n.connected = true
			t.connectsLeft--
			return 0
		}
		t.connectError()
		fmt.Fprintf(t.stdout, "udaddy: failing connection request\n")
		id.Reject(nil)
		// The C program forgets the node's ID here and leaks what
		// init_node made; rdmago releases them.
		n.destroy()
		*n = node{}
		return ret
	}
	fmt.Fprintf(t.stdout, "udaddy: failing connection request\n")
	id.Reject(nil)
	return ret
}

func (t *test) resolvedHandler(n *node, ev *cm.Event) int {
	n.remoteQPN = ev.UD.QPNum
	n.remoteQKey = ev.UD.QKey
	ah, err := n.pd.CreateAH(ev.UD.AHAttr)
	if err != nil {
		fmt.Fprintf(t.stdout, "udaddy: failure creating address handle\n")
		t.connectError()
		return -1
	}
	n.ah = ah
	n.connected = true
	t.connectsLeft--
	return 0
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
		return t.resolvedHandler(n, ev)
	case cm.EventAddrError, cm.EventRouteError, cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
		fmt.Fprintf(t.stdout, "udaddy: event: %s, error: %d\n", ev.Type, ev.Status)
		t.connectError()
		return ev.Status
	}
	return 0
}

func (t *test) connectEvents() int {
	ret := 0
	for t.connectsLeft != 0 && ret == 0 {
		ev, err := t.ch.GetEvent(t.ctx)
		if err != nil {
			return errnoRet
		}
		ret = t.handle(ev)
		ev.Ack()
	}
	return ret
}

// createReplyAH addresses the sender of the datagram wc reports, from its
// GRH (the buffer's start) and immediate data, with the QP's own Q_Key.
func (n *node) createReplyAH(wc *wr.Completion) bool {
	ah, err := n.pd.CreateAHFromWC(wc, n.mem.Bytes()[:grhSize], n.id.PortNum())
	if err != nil {
		return false
	}
	n.ah = ah
	n.remoteQPN = wc.Imm
	a, _, err := n.id.QP().Query(qp.AttrQKey)
	if err != nil {
		return false
	}
	n.remoteQKey = a.QKey
	return true
}

// pollCQs waits, node after node, for -C completions on each connected
// node's CQ, spinning as the C program does.
func (t *test) pollCQs() int {
	var wc [8]wr.Completion
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for done := int32(0); done < t.o.count; {
			k, err := n.cq.Poll(wc[:])
			if err != nil {
				ret := -clib.Errno(err)
				fmt.Fprintf(t.stdout, "udaddy: failed polling CQ: %d\n", ret)
				return ret
			}
			if k == 0 {
				if t.ctx.Err() != nil {
					return errnoRet
				}
				runtime.Gosched()
				continue
			}
			if n.ah == nil && !n.createReplyAH(&wc[0]) {
				fmt.Fprintf(t.stdout, "udaddy: failed to create reply AH\n")
				return -1
			}
			done += int32(k)
		}
	}
	return 0
}

func (t *test) runServer() int {
	fmt.Fprintf(t.stdout, "udaddy: starting server\n")
	listen, err := cm.CreateID(t.ch, t, t.o.hints.PortSpace)
	if err != nil {
		t.perror("udaddy: listen request failed", err)
		return errnoRet
	}
	defer listen.Close()
	if ret := t.getAddr("getrdmaaddr"); ret != 0 {
		return ret
	}
	if err := listen.BindAddr(t.res.SrcAddr); err != nil {
		t.perror("udaddy: bind address failed", err)
		return errnoRet
	}
	if err := listen.Listen(0); err != nil {
		t.perror("udaddy: failure trying to listen", err)
		return errnoRet
	}
	// Like udaddy, the server goes on after a failed request.
	t.connectEvents()
	if t.o.count == 0 {
		return 0
	}
	fmt.Fprintf(t.stdout, "receiving data transfers\n")
	if ret := t.pollCQs(); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "sending replies\n")
	for _, n := range t.nodes {
		if ret := t.postSends(n, wr.Signaled); ret != 0 {
			return ret
		}
	}
	if ret := t.pollCQs(); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "data transfers complete\n")
	return 0
}

func (t *test) runClient() int {
	fmt.Fprintf(t.stdout, "udaddy: starting client\n")
	if ret := t.getAddr("getaddrinfo"); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "udaddy: connecting\n")
	var src netip.AddrPort
	if t.res.SrcAddr.Addr().IsValid() {
		src = t.res.SrcAddr
	}
	for _, n := range t.nodes {
		if err := n.id.ResolveAddr(t.ctx, src, t.res.DstAddr, resolveTimeout); err != nil {
			t.perror("udaddy: failure getting addr", err)
			t.connectError()
			return errnoRet
		}
	}
	if ret := t.connectEvents(); ret != 0 {
		return ret
	}
	if t.o.count == 0 {
		return 0
	}
	fmt.Fprintf(t.stdout, "initiating data transfers\n")
	for _, n := range t.nodes {
		if ret := t.postSends(n, 0); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.stdout, "receiving data transfers\n")
	if ret := t.pollCQs(); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.stdout, "data transfers complete\n")
	return 0
}
