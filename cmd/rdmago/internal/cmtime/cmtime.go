// Package cmtime is "rdmago cmtime", librdmacm's cmtime example: how long
// each step of setting up and tearing down RC connections over rdma_cm
// takes, for many connections at once.
package cmtime

// librdmacm/examples/cmtime.c (v44.0) in Go, on package cm, so that either
// side may be the C program. The client creates -c IDs, then runs each
// step for all of them before the next: bind (with -b), resolve the
// address, resolve the route, create the QP, connect, disconnect (and
// destroy the QP), and destroy the IDs; the asynchronous steps end when
// every ID's event has come. It prints each step's total time, the
// slowest and fastest ID's, and the total per connection. The server
// accepts every request, creating a QP on a CQ its QPs share (as the C
// program's do, through the init_qp_attr librdmacm writes the first
// connection's CQs back into), and disconnects and destroys each
// connection once the client disconnects: it runs until it is killed, as
// the C program does. It handles requests and disconnects on its event
// loop, where the C program hands them to two threads (runServer says
// why).

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/cmd/rdmago/internal/cmacommon"
	"github.com/rdmago/rdma/cmd/rdmago/internal/command"
	"github.com/rdmago/rdma/cmd/rdmago/internal/getopt"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// Commands is "rdmago cmtime".
func Commands() []*command.Command {
	return []*command.Command{{
		Name:    "cmtime",
		Summary: "time the steps of connecting many RC connections over rdma_cm (as librdmacm's cmtime)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			return Main(context.Background(), "cmtime", args, stdout, stderr)
		},
		Usage: func(w io.Writer) { usage(w, "cmtime") },
	}}
}

const errnoRet = cmacommon.ErrnoRet

// options are cmtime's command line.
type options struct {
	dst, src    string // -s, -b
	port        string // -p
	connections int32  // -c
	retries     int32  // -r
	timeoutMS   int32  // -t
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-p port_number]\n")
	fmt.Fprintf(w, "\t[-r retries]\n")
	fmt.Fprintf(w, "\t[-t timeout_ms]\n")
}

// parse reads the command line as cmtime's getopt loop does. run is
// false when the program ends there, with status.
func parse(argv0 string, args []string, stdout, stderr io.Writer) (o options, status int, run bool) {
	o = options{port: "7471", connections: 100, retries: 2, timeoutMS: 2000}
	msg, ok := getopt.Short(argv0, args, "s:b:c:p:r:t:", func(opt byte, arg string) {
		switch opt {
		case 's':
			o.dst = arg
		case 'b':
			o.src = arg
		case 'c':
			o.connections = clib.Atoi(arg)
		case 'p':
			o.port = arg
		case 'r':
			o.retries = clib.Atoi(arg)
		case 't':
			o.timeoutMS = clib.Atoi(arg)
		}
	})
	if !ok {
		io.WriteString(stderr, msg)
		usage(stdout, argv0)
		return o, 1, false
	}
	return o, 0, true
}

// The steps cmtime times (enum step).
const (
	stepCreateID = iota
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepConnect
	stepDisconnect
	stepDestroy
	stepCount
)

var stepNames = [stepCount]string{
	"create id", "bind addr", "resolve addr", "resolve route",
	"create qp", "connect", "disconnect", "destroy",
}

// span is a start and an end; either may be unset (zero).
type span [2]time.Time

func (s *span) start() { s[0] = time.Now() }
func (s *span) end()   { s[1] = time.Now() }

// us is the span in microseconds, as cmtime's diff_us of two timevals
// computes it: in single precision.
func (s *span) us() float32 {
	return float32(s[1].Sub(s[0]) / time.Microsecond)
}

func (s *span) set() bool { return !s[0].IsZero() && !s[1].IsZero() }

// node is one connection of the client (struct node).
type node struct {
	id      *cm.ID
	times   [stepCount]span
	err     bool
	retries int32
}

// test is one run: cmtime's globals.
type test struct {
	o              options
	stdout, stderr io.Writer
	ctx            context.Context
	ch             *cm.EventChannel
	res            *cm.AddrInfo
	nodes          []node
	times          [stepCount]span
	qpAttr         uverbs.QPInitAttr

	// mu guards started and completed, which the client's steps and its
	// event goroutine count; changed is signalled when completed grows.
	mu        sync.Mutex
	changed   *sync.Cond
	started   [stepCount]int
	completed [stepCount]int

	// accepted holds the server's connections from their accept to their
	// disconnect: package cm holds IDs only weakly, and a connection
	// nothing holds is destroyed when the garbage collector finds it,
	// which tore the server's connections down in the middle of the
	// client's connect step, where cmtime's server does none of that
	// work. Guarded by mu.
	accepted map[*cm.ID]struct{}

	// cqs is the one CQ per device that all of the run's QPs share,
	// made with the first QP (cqFor). cmtime's QPs share CQs too: its
	// init_qp_attr is a global that rdma_create_qp writes the first
	// connection's CQs back into, so every later rdma_create_qp reuses
	// them (rdma-core's newer cmtime makes one CQ up front instead).
	// Without sharing, each connection cost two CQs more to create and
	// destroy than cmtime's, a third of the server's kernel work.
	// Guarded by mu.
	cqs map[*uverbs.Context]*uverbs.CQ
}

// Main runs cmtime with args and returns its exit status: its return
// value as a byte.
func Main(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	o, status, run := parse(argv0, args, stdout, stderr)
	if !run {
		return status
	}
	t := &test{o: o, stdout: stdout, stderr: stderr, ctx: ctx}
	t.changed = sync.NewCond(&t.mu)
	t.qpAttr = uverbs.QPInitAttr{Type: qp.RC, Caps: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if t.ch = cmacommon.OpenChannel(stderr); t.ch == nil {
		return 1
	}
	var ret int
	if o.dst != "" {
		ret = t.client()
	} else {
		// The server runs until it is killed or fails. cmtime then goes
		// on to its cleanup, which walks the nodes only a client has and
		// crashes (SIGSEGV) on a server's; rdmago exits with the status
		// cmtime meant, its return value, and prints nothing more.
		ret = t.runServer()
		t.closeAccepted()
		t.ch.Close()
		t.closeCQs()
		return int(uint8(ret))
	}
	t.cleanupNodes()
	t.ch.Close()
	t.closeCQs()
	t.showPerf()
	return int(uint8(ret))
}

func (t *test) perror(prefix string, err error) { io.WriteString(t.stderr, clib.Perror(prefix, err)) }

func (t *test) getAddr(what string) int {
	a := cmacommon.Addr{Src: t.o.src, Dst: t.o.dst, Port: t.o.port, Hints: cm.AddrInfo{PortSpace: cm.PSTCP, QPType: qp.RC}}
	if t.o.dst == "" {
		a.Hints.Flags |= cm.AIPassive
	}
	res, ret := a.Get(t.ctx, "", what, t.stdout, t.stderr)
	t.res = res
	return ret
}

func (t *test) timeout() time.Duration {
	// cmtime hands -t to the kernel as it is; package cm reads 0 as its
	// default (2 s), so the shortest timeout is 1 ms.
	return time.Duration(max(t.o.timeoutMS, 1)) * time.Millisecond
}

// showPerf prints the table (show_perf).
func (t *test) showPerf() {
	var maxUS, minUS [stepCount]float32
	for i := range stepCount {
		maxUS[i], minUS[i] = 0, 999999999.
		for c := range t.nodes {
			s := &t.nodes[c].times[i]
			if s.set() {
				us := s.us()
				maxUS[i] = max(maxUS[i], us)
				minUS[i] = min(minUS[i], us)
			}
		}
	}
	fmt.Fprintf(t.stdout, "step              total ms     max ms     min us  us / conn\n")
	for i := range stepCount {
		if i == stepBind && t.o.src == "" {
			continue
		}
		us := t.times[i].us()
		fmt.Fprintf(t.stdout, "%-13s: %s%s%s%s\n", stepNames[i], f2(us/1000), f2(maxUS[i]/1000), f2(minUS[i]), f2(us/float32(t.o.connections)))
	}
}

// f2 is printf's "%11.2f" of a float, as glibc prints it: a client
// of no connections divides by 0, and prints "inf" or "-nan".
func f2(x float32) string { return fmt.Sprintf("%11s", clib.FormatFloat(float64(x), 2)) }

// ---- client ----

// client is cmtime's client: alloc_nodes, then run_client.
func (t *test) client() int {
	if !t.allocNodes() {
		// cmtime goes on with no nodes after a failed alloc_nodes, and
		// its client then crashes on them; rdmago stops.
		return errnoRet
	}
	return t.runClient()
}

func (t *test) allocNodes() bool {
	if t.o.connections < 0 {
		// cmtime's calloc of a negative count fails before it prints
		// anything, and the client goes on with no nodes.
		return true
	}
	t.nodes = make([]node, t.o.connections)
	fmt.Fprintf(t.stdout, "creating id\n")
	t.times[stepCreateID].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		nd.times[stepCreateID].start()
		id, err := cm.CreateID(t.ch, nd, cm.PSTCP)
		if err != nil {
			for j := range i {
				t.nodes[j].id.Close()
			}
			t.nodes = nil
			return false
		}
		nd.id = id
		nd.times[stepCreateID].end()
	}
	t.times[stepCreateID].end()
	return true
}

func (t *test) cleanupNodes() {
	fmt.Fprintf(t.stdout, "destroying id\n")
	t.times[stepDestroy].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		nd.times[stepDestroy].start()
		if nd.id != nil {
			nd.id.Close()
		}
		nd.times[stepDestroy].end()
	}
	t.times[stepDestroy].end()
}

// complete counts a node's asynchronous step as done.
func (t *test) complete(nd *node, step int) {
	nd.times[step].end()
	t.mu.Lock()
	t.completed[step]++
	t.mu.Unlock()
	t.changed.Broadcast()
}

// start counts a step as started on one more node, whose retries (-r)
// it resets.
func (t *test) start(nd *node, step int) {
	t.mu.Lock()
	t.started[step]++
	nd.retries = t.o.retries
	t.mu.Unlock()
}

// retry is cmtime's "n->retries--": whether the node has a retry left,
// taking it.
func (t *test) retry(nd *node) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	left := nd.retries != 0
	nd.retries--
	return left
}

// wait waits until every node started on step has completed it.
func (t *test) wait(step int) {
	t.mu.Lock()
	for t.started[step] != t.completed[step] {
		t.changed.Wait()
	}
	t.mu.Unlock()
}

// clientEvent is cma_handler for a client's IDs.
func (t *test) clientEvent(ev *cm.Event) {
	nd, _ := ev.ID.UserData().(*node)
	if nd == nil {
		return
	}
	switch ev.Type {
	case cm.EventAddrResolved:
		t.complete(nd, stepResolveAddr)
	case cm.EventRouteResolved:
		t.complete(nd, stepResolveRoute)
	case cm.EventEstablished:
		t.complete(nd, stepConnect)
	case cm.EventAddrError:
		if t.retry(nd) && nd.id.ResolveAddr(t.ctx, t.srcAddr(), t.res.DstAddr, t.timeout()) == nil {
			return
		}
		fmt.Fprintf(t.stdout, "RDMA_CM_EVENT_ADDR_ERROR, error: %d\n", ev.Status)
		nd.err = true
		t.complete(nd, stepResolveAddr)
	case cm.EventRouteError:
		if t.retry(nd) && nd.id.ResolveRoute(t.ctx, t.timeout()) == nil {
			return
		}
		fmt.Fprintf(t.stdout, "RDMA_CM_EVENT_ROUTE_ERROR, error: %d\n", ev.Status)
		nd.err = true
		t.complete(nd, stepResolveRoute)
	case cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
		fmt.Fprintf(t.stdout, "event: %s, error: %d\n", ev.Type, ev.Status)
		nd.err = true
		t.complete(nd, stepConnect)
	case cm.EventDisconnected:
		t.complete(nd, stepDisconnect)
	}
	// DEVICE_REMOVAL: the cleanup comes after the test, as in cmtime.
}

// clientEvents handles the client's events until ctx is done or the
// channel is closed (cmtime's event thread, which the end of the
// process stops).
func (t *test) clientEvents(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := t.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.perror("failure in rdma_get_cm_event in process_server_events", err)
			}
			return
		}
		t.clientEvent(ev)
		ev.Ack()
	}
}

func (t *test) srcAddr() netip.AddrPort {
	if t.res.SrcAddr.Addr().IsValid() {
		return t.res.SrcAddr
	}
	return netip.AddrPort{}
}

func (t *test) runClient() int {
	if ret := t.getAddr("getaddrinfo"); ret != 0 {
		return ret
	}
	param := &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: uint8(t.o.retries), PrivateData: t.res.Connect}
	ctx, stop := context.WithCancel(t.ctx)
	done := make(chan struct{})
	go t.clientEvents(ctx, done)
	defer func() {
		stop()
		<-done
	}()
	ret := 0
	fail := func(nd *node, what string, err error) {
		t.perror(what, err)
		nd.err = true
		ret = errnoRet
	}
	if t.o.src != "" {
		fmt.Fprintf(t.stdout, "binding source address\n")
		t.times[stepBind].start()
		for i := range t.nodes {
			nd := &t.nodes[i]
			nd.times[stepBind].start()
			if err := nd.id.BindAddr(t.res.SrcAddr); err != nil {
				fail(nd, "failure bind addr", err)
				continue
			}
			ret = 0
			nd.times[stepBind].end()
		}
		t.times[stepBind].end()
	}

	fmt.Fprintf(t.stdout, "resolving address\n")
	t.times[stepResolveAddr].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		if nd.err {
			continue
		}
		nd.times[stepResolveAddr].start()
		// The start is counted first: the event may come before the
		// call returns.
		t.start(nd, stepResolveAddr)
		if err := nd.id.ResolveAddr(t.ctx, t.srcAddr(), t.res.DstAddr, t.timeout()); err != nil {
			t.unstart(stepResolveAddr)
			fail(nd, "failure getting addr", err)
			continue
		}
		ret = 0
	}
	t.wait(stepResolveAddr)
	t.times[stepResolveAddr].end()

	fmt.Fprintf(t.stdout, "resolving route\n")
	t.times[stepResolveRoute].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		if nd.err {
			continue
		}
		nd.times[stepResolveRoute].start()
		t.start(nd, stepResolveRoute)
		if err := nd.id.ResolveRoute(t.ctx, t.timeout()); err != nil {
			t.unstart(stepResolveRoute)
			fail(nd, "failure resolving route", err)
			continue
		}
		ret = 0
	}
	t.wait(stepResolveRoute)
	t.times[stepResolveRoute].end()

	fmt.Fprintf(t.stdout, "creating qp\n")
	t.times[stepCreateQP].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		if nd.err {
			continue
		}
		nd.times[stepCreateQP].start()
		if err := t.createQP(nd.id); err != nil {
			fail(nd, "failure creating qp", err)
			continue
		}
		ret = 0
		nd.times[stepCreateQP].end()
	}
	t.times[stepCreateQP].end()

	fmt.Fprintf(t.stdout, "connecting\n")
	t.times[stepConnect].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		if nd.err {
			continue
		}
		nd.times[stepConnect].start()
		t.start(nd, stepConnect)
		if err := nd.id.Connect(t.ctx, param); err != nil {
			t.unstart(stepConnect)
			fail(nd, "failure rconnecting", err)
			continue
		}
		ret = 0
	}
	t.wait(stepConnect)
	t.times[stepConnect].end()

	fmt.Fprintf(t.stdout, "disconnecting\n")
	t.times[stepDisconnect].start()
	for i := range t.nodes {
		nd := &t.nodes[i]
		if nd.err {
			continue
		}
		nd.times[stepDisconnect].start()
		t.start(nd, stepDisconnect)
		nd.id.Disconnect(t.ctx)
		nd.id.DestroyQP()
	}
	t.wait(stepDisconnect)
	t.times[stepDisconnect].end()
	return ret
}

// unstart takes back a start whose call failed before the kernel took it.
func (t *test) unstart(step int) {
	t.mu.Lock()
	t.started[step]--
	t.mu.Unlock()
	t.changed.Broadcast()
}

// createQP gives id its QP (rdma_create_qp with cmtime's
// init_qp_attr), on the CQ the run's QPs share.
func (t *test) createQP(id *cm.ID) error {
	cq, err := t.cqFor(id)
	if err != nil {
		return err
	}
	attr := t.qpAttr
	attr.SendCQ, attr.RecvCQ = cq, cq
	return id.CreateQP(nil, attr)
}

// cqFor returns the shared CQ of id's device, made on first use with
// one entry: cmtime's QPs never post, so nothing completes on it. An ID
// on no device gets none, and CreateQP refuses it.
func (t *test) cqFor(id *cm.ID) (*uverbs.CQ, error) {
	ctx := id.Verbs()
	if ctx == nil {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cq := t.cqs[ctx]; cq != nil {
		return cq, nil
	}
	cq, err := ctx.CreateCQ(uverbs.CQAttr{CQE: 1})
	if err != nil {
		return nil, err
	}
	if t.cqs == nil {
		t.cqs = map[*uverbs.Context]*uverbs.CQ{}
	}
	t.cqs[ctx] = cq
	return cq, nil
}

// closeCQs closes the shared CQs, once the QPs on them are gone.
func (t *test) closeCQs() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ctx, cq := range t.cqs {
		cq.Close()
		delete(t.cqs, ctx)
	}
}

// ---- server ----

// request accepts a connection request, with a QP on the shared CQ
// (__req_handler).
func (t *test) request(id *cm.ID) {
	if err := t.createQP(id); err != nil {
		t.perror("failure creating qp", err)
	} else if err := id.Accept(t.ctx, nil); err != nil {
		t.perror("failure accepting", err)
		id.DestroyQP()
	} else {
		t.mu.Lock()
		t.accepted[id] = struct{}{}
		t.mu.Unlock()
		return
	}
	fmt.Fprintf(t.stdout, "failing connection request\n")
	id.Reject(nil)
	id.Close()
}

// disconnect ends a connection the client ended (disc_handler_thread).
func (t *test) disconnect(id *cm.ID) {
	id.Disconnect(t.ctx)
	id.DestroyQP()
	id.Close()
	t.mu.Lock()
	delete(t.accepted, id)
	t.mu.Unlock()
}

// closeAccepted destroys the connections still up when the server
// stops, so that the CQ they share can go too.
func (t *test) closeAccepted() {
	t.mu.Lock()
	ids := make([]*cm.ID, 0, len(t.accepted))
	for id := range t.accepted {
		ids = append(ids, id)
	}
	clear(t.accepted)
	t.mu.Unlock()
	for _, id := range ids {
		id.Close()
	}
}

// runServer is cmtime's server. cmtime hands each connection request and
// each disconnect from its event loop to a thread of its own; here the
// event loop does the work itself. The commands are issued one at a time
// either way, and in the icount VM the two shapes measured alike
// (cmtime -c 100's connect step, 38.4-42.2 ms against 40.2-41.9 with a
// goroutine per queue), so the simpler one stays.
func (t *test) runServer() int {
	t.accepted = map[*cm.ID]struct{}{}

	listen, err := cm.CreateID(t.ch, nil, cm.PSTCP)
	if err != nil {
		t.perror("listen request failed", err)
		return errnoRet
	}
	defer listen.Close()
	if ret := t.getAddr("getrdmaaddr"); ret != 0 {
		return ret
	}
	if err := listen.BindAddr(t.res.SrcAddr); err != nil {
		t.perror("bind address failed", err)
		return errnoRet
	}
	if err := listen.Listen(0); err != nil {
		t.perror("failure trying to listen", err)
		return errnoRet
	}
	for {
		ev, err := t.ch.GetEvent(t.ctx)
		if err != nil {
			t.perror("failure in rdma_get_cm_event in process_server_events", err)
			return 0
		}
		switch ev.Type {
		case cm.EventConnectRequest:
			t.request(ev.ID)
		case cm.EventDisconnected:
			t.disconnect(ev.ID)
		}
		ev.Ack()
	}
}
