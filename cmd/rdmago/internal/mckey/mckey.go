// Package mckey is "rdmago mckey", rdma-core's mckey: UD datagrams sent to,
// and received from, an rdma_cm multicast group.
package mckey

// librdmacm's multicast example (librdmacm/examples/mckey.c, v44.0) in Go,
// on the same calls of package cm and uverbs, so that either side may be
// the C program. Each of -c IDs resolves the group's address (which binds
// it to a device), gets a PD, CQ, UD QP and buffer, a receiver posts -C
// receives, and the ID joins the group; the MULTICAST_JOIN event gives the
// group's address vector, QP number and Q_Key. Three seconds later (the
// C program leaves a subnet manager that long to program the switches) a
// sender (-s) posts -C unsignaled sends to the group and a receiver
// busy-polls its CQ until -C datagrams have arrived, however long that
// takes. Both then leave the group: the status is the last leave's, as
// in the C program, whatever happened before.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"sync"
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

// Commands is "rdmago mckey" (the C program's name too).
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "mckey",
		Summary: "send and receive UD datagrams through an rdma_cm multicast group (as mckey)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), "mckey", args, stdout, stderr)
		},
		Usage: func(w io.Writer) { usage(w, "mckey") },
	}}
}

const (
	// grhSize is the room for the GRH in front of each received datagram.
	grhSize = uverbs.GRHSize
	// resolveTimeout is mckey's 2000 ms for address resolution.
	resolveTimeout = 2 * time.Second
	// settle is mckey's pause between the joins and the transfers.
	settle = 3 * time.Second
)

// options are mckey's command line.
type options struct {
	dst, src    string // -m or -M, -b
	dstSet      bool   // -m or -M given (C's dst_addr is NULL without)
	unmapped    bool   // -M: an AF_IB group address
	sender      bool   // -s
	connections int32  // -c
	count       int32  // -C
	size        int32  // -S
	ps          cm.PortSpace
	sendOnly    bool // -o
	loopback    bool // cleared by -l
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t-m multicast_address\n")
	fmt.Fprintf(w, "\t[-M unmapped_multicast_address]\n\t replaces -m and requires -b\n")
	fmt.Fprintf(w, "\t[-s(ender)]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-C message_count]\n")
	fmt.Fprintf(w, "\t[-S message_size]\n")
	fmt.Fprintf(w, "\t[-p port_space - %#x for UDP (default), %#x for IPOIB]\n", uint16(cm.PSUDP), uint16(cm.PSIPoIB))
	fmt.Fprintf(w, "\t[-o join as a send-only full-member]\n")
	fmt.Fprintf(w, "\t[-l join without multicast loopback]\n")
}

// parse reads the command line as mckey's getopt loop does. run is false
// when the program ends there, with status.
func parse(argv0 string, args []string, stdout, stderr io.Writer) (o options, status int, run bool) {
	o = options{connections: 1, count: 10, size: 100, ps: cm.PSUDP, loopback: true}
	msg, ok := getopt.Short(argv0, args, "m:M:sb:c:C:S:p:ol", func(opt byte, arg string) {
		switch opt {
		case 'm':
			o.dst, o.dstSet = arg, true
		case 'M':
			o.dst, o.dstSet, o.unmapped = arg, true, true
		case 's':
			o.sender = true
		case 'b':
			o.src = arg
		case 'c':
			o.connections = clib.Atoi(arg)
		case 'C':
			o.count = clib.Atoi(arg)
		case 'S':
			o.size = clib.Atoi(arg)
		case 'p':
			// An enum holds it in C; the kernel reads 16 bits of it.
			o.ps = cm.PortSpace(uint16(int32(clib.Strtol(arg))))
		case 'o':
			o.sendOnly = true
		case 'l':
			o.loopback = false
		}
	})
	if !ok {
		io.WriteString(stderr, msg)
		usage(stdout, argv0)
		return o, 1, false
	}
	if o.unmapped && o.src == "" {
		fmt.Fprintf(stdout, "unmapped multicast address requires binding to source address\n")
		return o, 1, false
	}
	return o, 0, true
}

// node is one ID and its resources (struct cmatest_node).
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

// test is one run (struct cmatest and mckey's globals).
type test struct {
	o              options
	stdout, stderr io.Writer
	ctx            context.Context
	ch             *cm.EventChannel
	nodes          []*node
	connectsLeft   int32
	src, dst       netip.Addr
}

// Main runs mckey with args and returns its exit status: its return
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
	ret := t.run()
	fmt.Fprintf(stdout, "test complete\n")
	t.destroyNodes()
	ch.Close()
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return int(uint8(ret))
}

func (t *test) perror(prefix string, err error) { io.WriteString(t.stderr, clib.Perror(prefix, err)) }

const errnoRet = cmacommon.ErrnoRet

// allocNodes makes the nodes and their IDs.
func (t *test) allocNodes() bool {
	if t.o.connections < 0 {
		fmt.Fprintf(t.stdout, "mckey: unable to allocate memory for test nodes\n")
		return false
	}
	t.nodes = make([]*node, t.o.connections)
	for i := range t.nodes {
		n := &node{}
		id, err := cm.CreateID(t.ch, n, t.o.ps)
		if err != nil {
			for _, m := range t.nodes[:i] {
				m.id.Close()
			}
			return false
		}
		n.id = id
		t.nodes[i] = n
	}
	return true
}

func (t *test) destroyNodes() {
	for _, n := range t.nodes {
		n.destroy()
	}
}

func (n *node) destroy() {
	clib.CloseIf(n.ah)
	if n.id.QP() != nil {
		n.id.DestroyQP()
	}
	clib.CloseIf(n.cq)
	if n.mem != nil {
		n.mr.Close()
		n.mem.Close()
	}
	clib.CloseIf(n.pd)
	n.id.Close()
}

// verifyParams refuses a message the path MTU cannot carry.
func (t *test) verifyParams(n *node) int {
	pa, err := n.id.Verbs().QueryPort(n.id.PortNum())
	if err != nil {
		return clib.Errno(err)
	}
	mtu := int32(pa.ActiveMTU.Bytes())
	if t.o.count != 0 && t.o.size > mtu {
		fmt.Fprintf(t.stdout, "mckey: message_size %d is larger than active mtu %d\n", t.o.size, mtu)
		return -int(unix.EINVAL)
	}
	return 0
}

// initNode makes the node's PD, CQ, QP and message buffer; -l asks the
// device not to loop the QP's own datagrams back to it.
func (t *test) initNode(n *node) int {
	verbs := n.id.Verbs()
	pd, err := verbs.AllocPD()
	if err != nil {
		fmt.Fprintf(t.stdout, "mckey: unable to allocate PD\n")
		return -int(unix.ENOMEM)
	}
	n.pd = pd
	cqe, wrs := 2, 1
	if t.o.count != 0 {
		cqe, wrs = int(t.o.count)*2, int(t.o.count)
	}
	if n.cq, err = verbs.CreateCQ(uverbs.CQAttr{CQE: cqe}); err != nil {
		n.cq = nil
		fmt.Fprintf(t.stdout, "mckey: unable to create CQ\n")
		return -int(unix.ENOMEM)
	}
	attr := uverbs.QPInitAttr{
		Type:   qp.UD,
		SendCQ: n.cq,
		RecvCQ: n.cq,
		Caps:   qp.Caps{MaxSendWR: uint32(wrs), MaxRecvWR: uint32(wrs), MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	if !t.o.loopback {
		attr.CreateFlags = uverbs.QPCreateBlockSelfMcastLB
	}
	if err := n.id.CreateQP(pd, attr); err != nil {
		t.perror("mckey: unable to create QP", err)
		return errnoRet
	}
	if ret := t.createMessage(n); ret != 0 {
		fmt.Fprintf(t.stdout, "mckey: failed to create messages: %d\n", ret)
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
	rwr := []wr.RecvWR{{SGList: []wr.SGE{n.sge(int64(t.o.size) + grhSize)}}}
	for i := int32(0); i < t.o.count; i++ {
		if _, err := n.id.QP().PostRecv(rwr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post receives: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return 0
}

// postSends posts -C datagrams to the group, with the QP's number as
// immediate data. mckey signals none of them and leaves at once, and on
// some kernels rxe then drops what it has not sent yet when the QP is
// destroyed (on 6.12 and 7.2, most or all of them): rdmago signals the
// last one and waits for its completion, which comes once all are on the
// wire. Nothing else changes: what it prints is mckey's.
func (t *test) postSends(n *node) int {
	if !n.connected || t.o.count == 0 {
		return 0
	}
	q := n.id.QP()
	swr := []wr.SendWR{{
		SGList:     []wr.SGE{n.sge(int64(t.o.size))},
		Opcode:     wr.OpSendWithImm,
		Imm:        q.Num(),
		AH:         n.ah,
		RemoteQPN:  n.remoteQPN,
		RemoteQKey: n.remoteQKey,
	}}
	for i := int32(0); i < t.o.count; i++ {
		if i == t.o.count-1 {
			swr[0].Flags = wr.Signaled
		}
		if _, err := q.PostSend(swr); err != nil {
			fmt.Fprintf(t.stdout, "failed to post sends: %d\n", clib.Errno(err))
			return clib.Errno(err)
		}
	}
	return t.waitCQ(n, 1)
}

func (t *test) connectError() { t.connectsLeft-- }

// addrHandler readies the node whose ID has its address (the group's
// device) and joins the group.
func (t *test) addrHandler(n *node) int {
	ret := t.verifyParams(n)
	if ret == 0 {
		ret = t.initNode(n)
	}
	if ret == 0 && !t.o.sender {
		ret = t.postRecvs(n)
	}
	if ret == 0 {
		flags := cm.JoinFullMember
		if t.o.sendOnly {
			flags = cm.JoinSendOnlyFullMember
		}
		if err := n.id.JoinMulticast(t.ctx, t.dst, flags, n); err != nil {
			t.perror("mckey: failure joining", err)
			ret = errnoRet
		}
	}
	if ret != 0 {
		t.connectError()
	}
	return ret
}

// joinHandler takes the group's address vector from MULTICAST_JOIN.
func (t *test) joinHandler(n *node, ud *cm.UDParam) int {
	fmt.Fprintf(t.stdout, "mckey: joined dgid: %s mlid 0x%x sl %d\n", clib.Inet6String(ud.AHAttr.DGID), ud.AHAttr.DLID, ud.AHAttr.SL)
	n.remoteQPN = ud.QPNum
	n.remoteQKey = ud.QKey
	ah, err := n.pd.CreateAH(ud.AHAttr)
	if err != nil {
		fmt.Fprintf(t.stdout, "mckey: failure creating address handle\n")
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
	case cm.EventMulticastJoin:
		return t.joinHandler(n, &ev.UD)
	case cm.EventAddrError, cm.EventRouteError, cm.EventMulticastError:
		st := cStatus(ev)
		fmt.Fprintf(t.stdout, "mckey: event: %s, error: %d\n", ev.Type, st)
		t.connectError()
		return st
	}
	return 0
}

// joinQPN is the QP number the kernel gives a group, in MULTICAST_JOIN
// events only: its MULTICAST_ERROR events carry no address.
const joinQPN = 0xffffff

// cStatus is the status librdmacm gives the event. A JOIN whose QP
// could not be attached to the group (a unicast "group", say) becomes a
// MULTICAST_ERROR in the library; package cm gives it the attach's
// negated errno, librdmacm -1 (the errno left in errno), which mckey
// prints and returns.
func cStatus(ev *cm.Event) int {
	if ev.Type == cm.EventMulticastError && ev.UD.QPNum == joinQPN && ev.Status != 0 {
		return -1
	}
	return ev.Status
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

// watchEvents is mckey's cma_thread: once the groups are joined, it
// reports the events that say a group or an address went away, until ctx
// ends (the C thread runs until the program exits).
func (t *test) watchEvents(ctx context.Context) {
	for {
		ev, err := t.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.perror("rdma_get_cm_event", err)
			}
			return
		}
		switch ev.Type {
		case cm.EventMulticastError, cm.EventAddrChange:
			fmt.Fprintf(t.stdout, "mckey: event: %s, status: %d\n", ev.Type, cStatus(ev))
		}
		ev.Ack()
	}
}

// getAddr is mckey's get_addr: getaddrinfo without hints, and its
// message on failure.
func (t *test) getAddr(name string, set bool) (netip.Addr, int) {
	var err error
	var res *cm.AddrInfo
	if set && name != "" {
		res, err = cm.GetAddrInfoContext(t.ctx, name, "", &cm.AddrInfo{PortSpace: cm.PSUDP})
	}
	if res == nil {
		// getaddrinfo(NULL or "", NULL, NULL): EAI_NONAME.
		code, msg := -2, "Name or service not known"
		if err != nil {
			code, msg = cmacommon.GAIError(err)
		}
		fmt.Fprintf(t.stdout, "getaddrinfo failed (%s) - invalid hostname or IP address\n", msg)
		return netip.Addr{}, code
	}
	return res.DstAddr.Addr(), 0
}

func (t *test) run() int {
	role := "server"
	if t.o.sender {
		role = "client"
	}
	fmt.Fprintf(t.stdout, "mckey: starting %s\n", role)
	var ret int
	if t.o.src != "" {
		if t.src, ret = t.getAddr(t.o.src, true); ret != 0 {
			return ret
		}
	}
	if !t.o.unmapped {
		if t.dst, ret = t.getAddr(t.o.dst, t.o.dstSet); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.stdout, "mckey: joining\n")
	var src netip.AddrPort
	if t.src.IsValid() {
		src = netip.AddrPortFrom(t.src, 0)
	}
	for _, n := range t.nodes {
		if src.IsValid() {
			if err := n.id.BindAddr(src); err != nil {
				t.perror("mckey: addr bind failure", err)
				t.connectError()
				return errnoRet
			}
		}
		if t.o.unmapped {
			// Package cm has no AF_IB (sockaddr_ib) addresses, which -M
			// gives the group. mckey fails on RoCE too, joining (the
			// kernel's ENOTSUPP), with the same output and status but
			// for its messages on stderr.
			fmt.Fprintf(t.stderr, "mckey: unmapped (AF_IB) multicast addresses are not supported by rdmago\n")
			t.connectError()
			return errnoRet
		}
		if err := n.id.ResolveAddr(t.ctx, src, netip.AddrPortFrom(t.dst, 0), resolveTimeout); err != nil {
			t.perror("mckey: resolve addr failure", err)
			t.connectError()
			return errnoRet
		}
	}
	if ret = t.connectEvents(); ret == 0 {
		ret = t.transfer()
	}
	// The status is the last leave's (0 when every node left), as in
	// mckey.
	for _, n := range t.nodes {
		ret = 0
		if err := n.id.LeaveMulticast(t.dst); err != nil {
			t.perror("mckey: failure leaving", err)
			ret = errnoRet
		}
	}
	return ret
}

// transfer watches the channel, waits for the groups to settle, and sends
// or receives.
func (t *test) transfer() int {
	wctx, stop := context.WithCancel(t.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.watchEvents(wctx)
	}()
	defer func() {
		stop()
		wg.Wait()
	}()
	select {
	case <-time.After(settle):
	case <-t.ctx.Done():
		return errnoRet
	}
	if t.o.count == 0 {
		return 0
	}
	if t.o.sender {
		fmt.Fprintf(t.stdout, "initiating data transfers\n")
		for _, n := range t.nodes {
			if ret := t.postSends(n); ret != 0 {
				return ret
			}
		}
	} else {
		fmt.Fprintf(t.stdout, "receiving data transfers\n")
		if ret := t.pollCQs(); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.stdout, "data transfers complete\n")
	return 0
}

// pollCQs waits, node after node, for -C completions on each joined
// node's CQ, spinning as the C program does.
func (t *test) pollCQs() int {
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		if ret := t.waitCQ(n, t.o.count); ret != 0 {
			return ret
		}
	}
	return 0
}

// waitCQ spins until want completions came on the node's CQ.
func (t *test) waitCQ(n *node, want int32) int {
	var wc [8]wr.Completion
	for done := int32(0); done < want; {
		k, err := n.cq.Poll(wc[:])
		if err != nil {
			ret := -clib.Errno(err)
			fmt.Fprintf(t.stdout, "mckey: failed polling CQ: %d\n", ret)
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
	return 0
}
