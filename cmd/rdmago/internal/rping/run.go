package rping

// The run of "rdmago rping" over package cm and the verbs, step for step
// as rping.c: an asynchronous rdma_cm ID on an event channel whose events a
// goroutine handles (rping's cm_thread), a PD, completion channel and one
// CQ of the program's own on the ID's device, a goroutine that handles the
// CQ's events (its cq_thread), and the client's or server's loop, which
// waits on a semaphore for the state those two goroutines set. The states,
// messages and exit statuses are rping's, so that scripts and tests can
// treat either program the same way.
//
// Where rping's threads call exit(), the goroutine marks the program as
// exited (rpRun.exit): output stops, the main loop's waits end, everything
// is released, and rpingMain returns that status.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/cmd/rdmago/internal/clib"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// rpRun is one run of the program.
type rpRun struct {
	o   rpOptions
	out *rpOutput
	// ctx ends when the program "exits" from a goroutine, or the caller's
	// context ends.
	ctx    context.Context
	cancel context.CancelFunc

	ch     *cm.EventChannel
	listen *cm.ID  // rping's cb->cm_id: the client's ID or the listener
	cb     *rpConn // the first control block: the client's, or the listener's

	mu       sync.Mutex
	exitCode int
	exited   bool
	conns    map[*cm.ID]*rpConn // connections' IDs to their control blocks
}

func (r *rpRun) printf(format string, a ...any) { r.out.write(false, fmt.Sprintf(format, a...)) }
func (r *rpRun) eprintf(format string, a ...any) {
	r.out.write(true, fmt.Sprintf(format, a...))
}

// debugf is rping's DEBUG_LOG: -d lines on stdout.
func (r *rpRun) debugf(format string, a ...any) {
	if r.o.debug > 0 {
		r.printf(format, a...)
	}
}

// perror prints what C's perror(prefix) prints for err.
func (r *rpRun) perror(prefix string, err error) { r.out.write(true, clib.Perror(prefix, err)) }

// exit is a goroutine's exit(code): the first one sets the status.
func (r *rpRun) exit(code int) {
	r.mu.Lock()
	if !r.exited {
		r.exited, r.exitCode = true, code
	}
	r.mu.Unlock()
	r.out.exit()
	r.cancel()
}

// main runs the program and returns its exit status.
func (r *rpRun) main(parent context.Context) int {
	r.ctx, r.cancel = context.WithCancel(parent)
	defer r.cancel()
	r.conns = map[*cm.ID]*rpConn{}
	ret := r.run()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited {
		ret = r.exitCode
	}
	return int(uint8(ret))
}

func (r *rpRun) run() int {
	// librdmacm refuses to work, and rping says so, on a host without RDMA
	// devices.
	if devs, err := uverbs.Devices(); errors.Is(err, uverbs.ErrNoDevice) || (err == nil && len(devs) == 0) {
		r.eprintf("No RDMA devices were detected\n")
		return int(unix.ENODEV)
	}
	ch, err := cm.NewEventChannel()
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			r.eprintf("No RDMA devices were detected\n")
		} else {
			r.perror("failed to create RDMA CM event channel", err)
		}
		return clib.Errno(err)
	}
	defer ch.Close()
	r.ch = ch
	r.cb = r.newConn(r.o.server == 1)
	id, err := cm.CreateID(ch, nil, cm.PSTCP)
	if err != nil {
		r.perror("rdma_create_id", err)
		return -1
	}
	r.listen = id
	r.debugf("created cm_id %p\n", id)

	cmCtx, cmStop := context.WithCancel(r.ctx)
	cmDone := make(chan struct{})
	go r.cmThread(cmCtx, cmDone)

	var ret int
	switch {
	case r.o.server == 1 && r.o.persistent:
		ret = r.runPersistentServer()
	case r.o.server == 1:
		ret = r.runServer()
	default:
		ret = r.runClient()
	}

	r.debugf("destroy cm_id %p\n", id)
	cmStop()
	<-cmDone
	r.cancel() // persistent connections still running stop too
	id.Close()
	return ret
}

// rpConn is rping's control block (struct rping_cb) for one connection;
// the listener's also takes the connection requests.
type rpConn struct {
	r      *rpRun
	server bool
	sem    *rpSem

	mu     sync.Mutex
	state  rpState
	child  *cm.ID // the ID the last CONNECT_REQUEST brought
	remote rpInfo // the peer's last advertised buffer

	id                                  *cm.ID // the connection
	pd                                  *uverbs.PD
	channel                             *uverbs.CompChannel
	cq                                  *uverbs.CQ
	qp                                  *uverbs.QP
	recvBuf, sendBuf, rdmaBuf, startBuf rpBuf
	recvWR                              [1]wr.RecvWR
	sqWR, rdmaWR                        [1]wr.SendWR
	recvSGL, sendSGL, rdmaSGL           [1]wr.SGE
	cqStop                              context.CancelFunc
	cqDone                              chan struct{}
}

// rpBuf is malloc'd memory and its registration.
type rpBuf struct {
	mem *mr.Memory
	mr  *uverbs.MR
}

func (b *rpBuf) bytes() []byte { return b.mem.Bytes() }

func (b *rpBuf) free() {
	clib.CloseIf(b.mr)
	clib.CloseIf(b.mem)
	*b = rpBuf{}
}

func (r *rpRun) newConn(server bool) *rpConn {
	return &rpConn{r: r, server: server, sem: newRpSem(), state: rpIdle}
}

func (c *rpConn) setState(s rpState) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
}

func (c *rpConn) getState() rpState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// wait is sem_wait followed by a look at the state.
func (c *rpConn) wait() rpState {
	c.sem.wait(c.r.ctx)
	return c.getState()
}

// connOf finds the control block an event is for (rping's cma_id->context).
func (r *rpRun) connOf(ev *cm.Event) *rpConn {
	if ev.Type != cm.EventConnectRequest {
		r.mu.Lock()
		c := r.conns[ev.ID]
		r.mu.Unlock()
		if c != nil {
			return c
		}
	}
	return r.cb
}

func (r *rpRun) register(id *cm.ID, c *rpConn) {
	r.mu.Lock()
	r.conns[id] = c
	r.mu.Unlock()
}

func (r *rpRun) unregister(id *cm.ID) {
	r.mu.Lock()
	delete(r.conns, id)
	r.mu.Unlock()
}

// cmThread is rping's cm_thread: it handles each rdma_cm event and "exits"
// the program when the handler fails.
func (r *rpRun) cmThread(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := r.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.perror("rdma_get_cm_event", err)
			r.exit(-1)
			return
		}
		ret := r.cmEvent(ev)
		ev.Ack()
		if ret != 0 {
			r.exit(ret)
			return
		}
	}
}

// cmEvent is rping_cma_event_handler.
func (r *rpRun) cmEvent(ev *cm.Event) int {
	c := r.connOf(ev)
	which := "child"
	if ev.ID == r.listen {
		which = "parent"
	}
	r.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, which)
	switch ev.Type {
	case cm.EventAddrResolved:
		c.setState(rpAddrResolved)
		if err := ev.ID.ResolveRoute(r.ctx, 2000*time.Millisecond); err != nil {
			c.setState(rpError)
			r.perror("rdma_resolve_route", err)
			c.sem.post()
		}
	case cm.EventRouteResolved:
		c.setState(rpRouteResolved)
		c.sem.post()
	case cm.EventConnectRequest:
		c.mu.Lock()
		c.state, c.child = rpConnectRequest, ev.ID
		c.mu.Unlock()
		r.debugf("child cma %p\n", ev.ID)
		c.sem.post()
	case cm.EventConnectResponse:
		r.debugf("CONNECT_RESPONSE\n")
		c.setState(rpConnected)
		c.sem.post()
	case cm.EventEstablished:
		r.debugf("ESTABLISHED\n")
		if k := r.o.keepAlive; k > 0 {
			// A probe every quarter of the bound, each given the rest.
			ms := time.Duration(k) * time.Millisecond
			if err := ev.ID.SetKeepAlive(ms/4, ms-ms/4); err != nil {
				r.perror("keepalive", err)
			}
		}
		// The server wakes up when the first receive completes.
		if !c.server {
			c.setState(rpConnected)
		}
		c.sem.post()
	case cm.EventAddrError, cm.EventRouteError, cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
		r.eprintf("cma event %s, error %d\n", ev.Type, ev.Status)
		// rping exits as soon as the handler returns: nothing the woken
		// main loop would print gets out.
		r.exit(-1)
		c.sem.post()
		return -1
	case cm.EventDisconnected:
		side := "client"
		if c.server {
			side = "server"
		}
		r.eprintf("%s DISCONNECT EVENT...\n", side)
		if err := ev.Err(); r.o.keepAlive > 0 && errors.Is(err, unix.ETIMEDOUT) {
			// The keepalive's (-K): the peer stopped answering. rping
			// exits 0 on a peer's disconnect; this is a failure, and
			// the status says so, as for the other error events. (The
			// kernel's own DISCONNECTED after an unanswered DREQ also
			// carries ETIMEDOUT; without -K it goes as in rping.)
			r.eprintf("%s: %v\n", side, err)
			r.exit(-1)
			c.setState(rpError)
			c.sem.post()
			return -1
		}
		c.setState(rpDisconnected)
		c.sem.post()
	case cm.EventDeviceRemoval:
		r.eprintf("cma detected device removal!!!!\n")
		r.exit(-1)
		c.setState(rpError)
		c.sem.post()
		return -1
	default:
		r.eprintf("unhandled event: %s, ignoring\n", ev.Type)
	}
	return 0
}

// prepare is what rping's server and client do before connecting: the QP
// on id, the buffers, the first receive; a failure prints rping's message
// and undoes the earlier steps.
func (r *rpRun) prepare(c *rpConn, id *cm.ID) int {
	if ret := c.setupQP(id); ret != 0 {
		r.eprintf("setup_qp failed: %d\n", ret)
		return ret
	}
	if ret := c.setupBuffers(); ret != 0 {
		r.eprintf("rping_setup_buffers failed: %d\n", ret)
		c.freeQP()
		return ret
	}
	if err := c.postRecv(); err != nil {
		r.eprintf("ibv_post_recv failed: %d\n", clib.Errno(err))
		c.freeBuffers()
		c.freeQP()
		return clib.Errno(err)
	}
	return 0
}

// setupQP is rping_setup_qp: a PD, a completion channel and a CQ of the
// program's own on the ID's device, and the QP.
func (c *rpConn) setupQP(id *cm.ID) int {
	r := c.r
	dev := id.Verbs()
	if dev == nil {
		r.eprintf("ibv_alloc_pd failed\n")
		return int(unix.ENODEV)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		r.eprintf("ibv_alloc_pd failed\n")
		return clib.Errno(err)
	}
	r.debugf("created pd %p\n", pd)
	ch, err := dev.NewCompChannel()
	if err != nil {
		r.eprintf("ibv_create_comp_channel failed\n")
		pd.Close()
		return clib.Errno(err)
	}
	r.debugf("created channel %p\n", ch)
	cq, err := dev.CreateCQ(uverbs.CQAttr{CQE: rpSQDepth * 2, Channel: ch})
	if err != nil {
		r.eprintf("ibv_create_cq failed\n")
		ch.Close()
		pd.Close()
		return clib.Errno(err)
	}
	r.debugf("created cq %p\n", cq)
	if err := cq.ReqNotify(false); err != nil {
		r.eprintf("ibv_create_cq failed\n") // sic
		cq.Close()
		ch.Close()
		pd.Close()
		return clib.Errno(err)
	}
	c.id, c.pd, c.channel, c.cq = id, pd, ch, cq
	if ret := c.createQP(); ret != 0 {
		cq.Close()
		ch.Close()
		pd.Close()
		c.pd, c.channel, c.cq = nil, nil, nil
		return ret
	}
	r.debugf("created qp %p\n", c.qp)
	return 0
}

// createQP is rping_create_qp: through rdma_create_qp on the ID, or with
// -q a QP of the program's own, moved to INIT.
func (c *rpConn) createQP() int {
	attr := uverbs.QPInitAttr{
		Type: qp.RC, SendCQ: c.cq, RecvCQ: c.cq,
		Caps: qp.Caps{MaxSendWR: rpSQDepth, MaxRecvWR: 2, MaxRecvSGE: 1, MaxSendSGE: 1},
	}
	if c.r.o.selfQP {
		q, err := c.pd.CreateQP(attr)
		if err != nil {
			c.r.perror("ibv_create_qp", err)
			return -1
		}
		a := qp.Attr{State: qp.StateInit, PKeyIndex: 0, PortNum: c.id.PortNum()}
		if err := q.Modify(a, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
			c.r.perror("ibv_modify_qp", err)
			q.Close()
			return -1
		}
		c.qp = q
		return 0
	}
	if err := c.id.CreateQP(c.pd, attr); err != nil {
		c.r.perror("rdma_create_qp", err)
		return -1
	}
	c.qp = c.id.QP()
	return 0
}

// freeQP is rping_free_qp.
func (c *rpConn) freeQP() {
	if c.r.o.selfQP {
		if c.qp != nil {
			c.qp.Close()
		}
	} else if c.id != nil {
		c.id.DestroyQP()
	}
	c.qp = nil
	if c.cq != nil {
		c.cq.Close()
	}
	if c.channel != nil {
		c.channel.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
	c.cq, c.channel, c.pd = nil, nil, nil
}

// alloc is malloc and ibv_reg_mr of one buffer, with rping's messages.
func (c *rpConn) alloc(b *rpBuf, name string, n int, access wr.Access, malloced bool) int {
	mem, err := mr.Alloc(n)
	if err != nil {
		if malloced {
			c.r.eprintf("%s malloc failed\n", name)
			return -int(unix.ENOMEM)
		}
		c.r.eprintf("%s reg_mr failed\n", name)
		return clib.Errno(err)
	}
	m, err := c.pd.RegMR(mem.Bytes(), access)
	if err != nil {
		mem.Close()
		c.r.eprintf("%s reg_mr failed\n", name)
		return clib.Errno(err)
	}
	*b = rpBuf{mem: mem, mr: m}
	return 0
}

// setupBuffers is rping_setup_buffers: the message buffers, the RDMA
// buffer (the server's read and write source, the client's sink) and the
// client's source buffer, then the work requests over them.
func (c *rpConn) setupBuffers() int {
	r := c.r
	r.debugf("rping_setup_buffers called on cb %p\n", c)
	remote := wr.LocalWrite | wr.RemoteRead | wr.RemoteWrite
	type step struct {
		b        *rpBuf
		name     string
		n        int
		access   wr.Access
		malloced bool // malloc'd by rping (its messages say which failed)
	}
	steps := []step{
		{&c.recvBuf, "recv_buf", rpInfoSize, wr.LocalWrite, false},
		{&c.sendBuf, "send_buf", rpInfoSize, 0, false},
		{&c.rdmaBuf, "rdma_buf", int(r.o.size), remote, true},
	}
	if !c.server {
		steps = append(steps, step{&c.startBuf, "start_buf", int(r.o.size), remote, true})
	}
	for _, s := range steps {
		if ret := c.alloc(s.b, s.name, s.n, s.access, s.malloced); ret != 0 {
			c.freeBufs()
			return ret
		}
	}
	c.recvSGL[0] = wr.SGE{Addr: c.recvBuf.mr.Addr(), Length: rpInfoSize, LKey: c.recvBuf.mr.LKey()}
	c.recvWR[0] = wr.RecvWR{SGList: c.recvSGL[:]}
	c.sendSGL[0] = wr.SGE{Addr: c.sendBuf.mr.Addr(), Length: rpInfoSize, LKey: c.sendBuf.mr.LKey()}
	c.sqWR[0] = wr.SendWR{Opcode: wr.OpSend, Flags: wr.Signaled, SGList: c.sendSGL[:]}
	c.rdmaSGL[0] = wr.SGE{Addr: c.rdmaBuf.mr.Addr(), LKey: c.rdmaBuf.mr.LKey()}
	c.rdmaWR[0] = wr.SendWR{Flags: wr.Signaled, SGList: c.rdmaSGL[:]}
	r.debugf("allocated & registered buffers...\n")
	return 0
}

// freeBuffers is rping_free_buffers.
func (c *rpConn) freeBuffers() {
	c.r.debugf("rping_free_buffers called on cb %p\n", c)
	c.freeBufs()
}

func (c *rpConn) freeBufs() {
	c.recvBuf.free()
	c.sendBuf.free()
	c.rdmaBuf.free()
	c.startBuf.free()
}

func (c *rpConn) postRecv() error {
	_, err := c.qp.PostRecv(c.recvWR[:])
	return err
}

// startCQ starts rping's cq_thread.
func (c *rpConn) startCQ() {
	ctx, cancel := context.WithCancel(c.r.ctx)
	c.cqStop, c.cqDone = cancel, make(chan struct{})
	go c.cqThread(ctx)
}

// joinCQ waits for the cq goroutine to end by itself, for at most grace,
// then stops it (rping's pthread_join, or with no grace pthread_cancel).
func (c *rpConn) joinCQ(grace time.Duration) {
	if c.cqDone == nil {
		return
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-c.cqDone:
		case <-t.C:
		}
		t.Stop()
	}
	c.cqStop()
	<-c.cqDone
	c.cqDone = nil
}

// cqThread is rping's cq_thread: each CQ event re-arms the CQ and handles
// what it holds, until the handler fails or sees a flushed request.
func (c *rpConn) cqThread(ctx context.Context) {
	defer close(c.cqDone)
	r := c.r
	r.debugf("cq_thread started.\n")
	for {
		cq, err := c.channel.GetEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.eprintf("Failed to get cq event!\n")
			}
			return
		}
		if cq != c.cq {
			r.eprintf("Unknown CQ!\n")
			return
		}
		if err := c.cq.ReqNotify(false); err != nil {
			r.eprintf("Failed to set notify!\n")
			return
		}
		ret := c.cqEvent()
		c.cq.AckEvents(1)
		if ret != 0 {
			return
		}
	}
}

// cqEvent is rping_cq_event_handler: it returns 1 when a request came back
// flushed, a negative value on failure (the state is then ERROR), else 0.
func (c *rpConn) cqEvent() int {
	r := c.r
	var wcs [1]wr.Completion
	flushed := false
	for {
		n, err := c.cq.Poll(wcs[:])
		if err != nil {
			r.eprintf("poll error %d\n", -clib.Errno(err))
			return c.fail(-clib.Errno(err))
		}
		if n == 0 {
			break
		}
		wc := &wcs[0]
		if wc.Status != wr.Success {
			if wc.Status == wr.WRFlushErr {
				flushed = true
				continue
			}
			r.eprintf("cq completion failed status %d\n", int(wc.Status))
			return c.fail(-1)
		}
		switch wc.Opcode {
		case wr.WCSend:
			r.debugf("send completion\n")
		case wr.WCRDMAWrite:
			r.debugf("rdma write completion\n")
			c.setState(rpWriteComplete)
			c.sem.post()
		case wr.WCRDMARead:
			r.debugf("rdma read completion\n")
			c.setState(rpReadComplete)
			c.sem.post()
		case wr.WCRecv:
			r.debugf("recv completion\n")
			var ret int
			if c.server {
				ret = c.serverRecv(wc)
			} else {
				ret = c.clientRecv(wc)
			}
			if ret != 0 {
				r.eprintf("recv wc error: %d\n", ret)
				return c.fail(ret)
			}
			if err := c.postRecv(); err != nil {
				r.eprintf("post recv error: %d\n", clib.Errno(err))
				return c.fail(clib.Errno(err))
			}
			c.sem.post()
		default:
			r.debugf("unknown!!!!! completion\n")
			return c.fail(-1)
		}
	}
	if flushed {
		return 1
	}
	return 0
}

func (c *rpConn) fail(ret int) int {
	c.setState(rpError)
	c.sem.post()
	return ret
}

// serverRecv is server_recv: the client advertised a buffer; the first
// of a ping is to be read, the second written.
func (c *rpConn) serverRecv(wc *wr.Completion) int {
	if wc.ByteLen != rpInfoSize {
		c.r.eprintf("Received bogus data, size %d\n", wc.ByteLen)
		return -1
	}
	m, err := decodeRpInfo(c.recvBuf.bytes())
	if err != nil {
		c.r.eprintf("Received bogus data: %v\n", err)
		return -1
	}
	c.r.debugf("Received rkey %x addr %x len %d from peer\n", m.RKey, m.Addr, int32(m.Size))
	c.mu.Lock()
	c.remote = m
	if c.state <= rpConnected || c.state == rpWriteComplete {
		c.state = rpReadAdv
	} else {
		c.state = rpWriteAdv
	}
	c.mu.Unlock()
	return 0
}

// clientRecv is client_recv: the server's go-ahead.
func (c *rpConn) clientRecv(wc *wr.Completion) int {
	if wc.ByteLen != rpInfoSize {
		c.r.eprintf("Received bogus data, size %d\n", wc.ByteLen)
		return -1
	}
	c.mu.Lock()
	if c.state == rpReadAdv {
		c.state = rpWriteAdv
	} else {
		c.state = rpWriteComplete
	}
	c.mu.Unlock()
	return 0
}

// connParam is rping_init_conn_param.
func (c *rpConn) connParam() cm.ConnParam {
	p := cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if c.r.o.selfQP {
		p.QPNum = c.qp.Num()
	}
	return p
}

// selfModifyQP is rping_self_modify_qp: the program's own QP through INIT,
// RTR and RTS with the attributes rdma_cm gives.
func (c *rpConn) selfModifyQP(id *cm.ID) error {
	for _, s := range []qp.State{qp.StateInit, qp.StateRTR, qp.StateRTS} {
		a, mask, err := id.InitQPAttr(s)
		if err != nil {
			return err
		}
		if err := c.qp.Modify(a, mask); err != nil {
			return err
		}
	}
	return nil
}

// accept is rping_accept.
func (c *rpConn) accept() int {
	r := c.r
	r.debugf("accepting client connection request\n")
	var err error
	if r.o.selfQP {
		if err := c.selfModifyQP(c.id); err != nil {
			return clib.Errno(err)
		}
		p := c.connParam()
		err = c.id.Accept(r.ctx, &p)
	} else {
		err = c.id.Accept(r.ctx, nil)
	}
	if err != nil {
		r.perror("rdma_accept", err)
		return -1
	}
	if s := c.wait(); s == rpError {
		r.eprintf("wait for CONNECTED state %d\n", s)
		return -1
	}
	return 0
}

// disconnect is rping_disconnect.
func (c *rpConn) disconnect(id *cm.ID) error {
	if c.r.o.selfQP {
		if err := c.qp.Modify(qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
			return err
		}
	}
	return id.Disconnect(c.r.ctx)
}

// formatSend is rping_format_send: advertise buf to the peer.
func (c *rpConn) formatSend(b *rpBuf) {
	m := rpInfo{Addr: b.mr.Addr(), RKey: b.mr.RKey(), Size: uint32(c.r.o.size)}
	m.encode(c.sendBuf.bytes())
	c.r.debugf("RDMA addr %x rkey %x len %d\n", m.Addr, m.RKey, int32(m.Size))
}

// await waits for the state want; another one is rping's failure, which
// it reports as "what state N" and returns as -1.
func (c *rpConn) await(want rpState, what string) int {
	if s := c.wait(); s != want {
		c.r.eprintf("%s state %d\n", what, s)
		return -1
	}
	return 0
}

// post posts w; a failure it reports as rping does and returns as its
// errno.
func (c *rpConn) post(w []wr.SendWR) int {
	if err := c.postSend(w); err != nil {
		c.r.eprintf("post send error %d\n", clib.Errno(err))
		return clib.Errno(err)
	}
	return 0
}

// release ends the CQ goroutine, waiting up to grace for it, and frees
// the connection's buffers and QP, as rping's teardown does.
func (c *rpConn) release(grace time.Duration) {
	c.joinCQ(grace)
	c.freeBuffers()
	c.freeQP()
}

func (c *rpConn) postSend(w []wr.SendWR) error {
	_, err := c.qp.PostSend(w)
	return err
}

// aimRDMA makes the RDMA work request an op on the buffer the client
// advertised last, and returns that advertisement.
func (c *rpConn) aimRDMA(op wr.Opcode) rpInfo {
	c.mu.Lock()
	rem := c.remote
	c.mu.Unlock()
	c.rdmaWR[0].Opcode = op
	c.rdmaWR[0].Remote.RKey, c.rdmaWR[0].Remote.Addr = rem.RKey, rem.Addr
	return rem
}

// testServer is rping_test_server: answer pings until the client goes.
func (c *rpConn) testServer() int {
	r := c.r
	ret := 0
	for {
		// The client's source buffer.
		if ret = c.await(rpReadAdv, "wait for RDMA_READ_ADV"); ret != 0 {
			break
		}
		r.debugf("server received sink adv\n")
		c.rdmaSGL[0].Length = c.aimRDMA(wr.OpRDMARead).Size
		if ret = c.post(c.rdmaWR[:]); ret != 0 {
			break
		}
		r.debugf("server posted rdma read req \n")
		if ret = c.await(rpReadComplete, "wait for RDMA_READ_COMPLETE"); ret != 0 {
			break
		}
		r.debugf("server received read complete\n")
		if r.o.verbose > 0 {
			r.printf("server ping data: %s\n", cStr(c.rdmaBuf.bytes()))
		}
		// Go ahead.
		if ret = c.post(c.sqWR[:]); ret != 0 {
			break
		}
		r.debugf("server posted go ahead\n")

		// The client's sink buffer.
		if ret = c.await(rpWriteAdv, "wait for RDMA_WRITE_ADV"); ret != 0 {
			break
		}
		r.debugf("server received sink adv\n")
		c.aimRDMA(wr.OpRDMAWrite)
		buf := c.rdmaBuf.bytes()
		c.rdmaSGL[0].Length = uint32(min(cStrlen(buf)+1, len(buf)))
		r.debugf("rdma write from lkey %x laddr %x len %d\n", c.rdmaSGL[0].LKey, c.rdmaSGL[0].Addr, c.rdmaSGL[0].Length)
		if ret = c.post(c.rdmaWR[:]); ret != 0 {
			break
		}
		if ret = c.await(rpWriteComplete, "wait for RDMA_WRITE_COMPLETE"); ret != 0 {
			break
		}
		r.debugf("server rdma write complete \n")
		// Go ahead: begin again.
		if ret = c.post(c.sqWR[:]); ret != 0 {
			break
		}
		r.debugf("server posted go ahead\n")
	}
	if c.getState() == rpDisconnected {
		return 0
	}
	return ret
}

// testClient is rping_test_client: -C pings (0: for ever).
func (c *rpConn) testClient() int {
	r := c.r
	ret := 0
	start := rpFirstChar
	for ping := int32(0); r.o.count == 0 || ping < r.o.count; ping++ {
		c.setState(rpReadAdv)
		rpFill(c.startBuf.bytes(), ping, start)
		start = rpNextStart(start)

		c.formatSend(&c.startBuf)
		if ret = c.post(c.sqWR[:]); ret != 0 {
			break
		}
		// The server has read the source buffer.
		if ret = c.await(rpWriteAdv, "wait for RDMA_WRITE_ADV"); ret != 0 {
			break
		}
		c.formatSend(&c.rdmaBuf)
		if ret = c.post(c.sqWR[:]); ret != 0 {
			break
		}
		// The server has written the sink buffer.
		if ret = c.await(rpWriteComplete, "wait for RDMA_WRITE_COMPLETE"); ret != 0 {
			break
		}
		if r.o.validate > 0 && !bytes.Equal(c.startBuf.bytes(), c.rdmaBuf.bytes()) {
			r.eprintf("data mismatch!\n")
			ret = -1
			break
		}
		if r.o.verbose > 0 {
			r.printf("ping data: %s\n", cStr(c.rdmaBuf.bytes()))
		}
	}
	if c.getState() == rpDisconnected {
		return 0
	}
	return ret
}

// bindServer is rping_bind_server.
func (r *rpRun) bindServer() int {
	if err := r.listen.BindAddr(netip.AddrPortFrom(r.o.addr, r.o.port)); err != nil {
		r.perror("rdma_bind_addr", err)
		return -1
	}
	r.debugf("rdma_bind_addr successful\n")
	r.debugf("rdma_listen\n")
	if err := r.listen.Listen(3); err != nil {
		r.perror("rdma_listen", err)
		return -1
	}
	return 0
}

// takeRequest waits for a connection request on the listener's control
// block and returns its ID, or nil with the state it found instead.
func (r *rpRun) takeRequest() (*cm.ID, rpState) {
	s := r.cb.wait()
	r.cb.mu.Lock()
	defer r.cb.mu.Unlock()
	child := r.cb.child
	r.cb.child = nil
	if s != rpConnectRequest || child == nil {
		return nil, s
	}
	return child, s
}

// serve is the server's part from the request to the end of the
// connection; it returns rping_test_server's status, or that of the step
// that failed before, having printed its message.
func (c *rpConn) serve(persistent bool) int {
	r := c.r
	r.register(c.id, c)
	defer r.unregister(c.id)
	id := c.id
	if ret := r.prepare(c, id); ret != 0 {
		id.Close()
		return ret
	}
	c.startCQ()
	if ret := c.accept(); ret != 0 {
		r.eprintf("connect error %d\n", ret)
		c.release(0)
		id.Close()
		return ret
	}
	ret := c.testServer()
	if ret != 0 && !persistent {
		r.eprintf("rping server failed: %d\n", ret)
	}
	c.disconnect(id)
	c.release(2 * time.Second)
	id.Close()
	return ret
}

// runServer is rping_run_server: one connection.
func (r *rpRun) runServer() int {
	if ret := r.bindServer(); ret != 0 {
		return ret
	}
	child, s := r.takeRequest()
	if child == nil {
		r.eprintf("wait for CONNECT_REQUEST state %d\n", s)
		return -1
	}
	c := r.cb
	c.id = child
	return c.serve(false)
}

// runPersistentServer is rping_run_persistent_server: each request gets a
// control block and a goroutine of its own; it returns only on failure.
func (r *rpRun) runPersistentServer() int {
	if ret := r.bindServer(); ret != 0 {
		return ret
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		child, s := r.takeRequest()
		if child == nil {
			r.eprintf("wait for CONNECT_REQUEST state %d\n", s)
			r.cancel()
			return -1
		}
		c := r.newConn(true)
		c.state, c.id = rpConnectRequest, child
		r.register(child, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serve(true)
		}()
	}
}

// bindClient is rping_bind_client: resolve the server's address, and in
// the event handler its route.
func (r *rpRun) bindClient() int {
	var src netip.AddrPort
	if r.o.src.IsValid() {
		src = netip.AddrPortFrom(r.o.src, 0)
	}
	if err := r.listen.ResolveAddr(r.ctx, src, netip.AddrPortFrom(r.o.addr, r.o.port), 2000*time.Millisecond); err != nil {
		r.perror("rdma_resolve_addr", err)
		return -1
	}
	if r.cb.await(rpRouteResolved, "waiting for addr/route resolution") != 0 {
		return -1
	}
	r.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	return 0
}

// connectClient is rping_connect_client.
func (c *rpConn) connectClient() int {
	r := c.r
	p := c.connParam()
	if err := c.id.Connect(r.ctx, &p); err != nil {
		r.perror("rdma_connect", err)
		return -1
	}
	if c.await(rpConnected, "wait for CONNECTED") != 0 {
		return -1
	}
	if r.o.selfQP {
		if err := c.selfModifyQP(c.id); err != nil {
			r.perror("rping_modify_qp", err)
			return -1
		}
		if err := c.id.Establish(); err != nil {
			r.perror("rdma_establish", err)
			return -1
		}
	}
	r.debugf("rdma_connect successful\n")
	return 0
}

// runClient is rping_run_client.
func (r *rpRun) runClient() int {
	if ret := r.bindClient(); ret != 0 {
		return ret
	}
	c := r.cb
	r.register(r.listen, c)
	if ret := r.prepare(c, r.listen); ret != 0 {
		return ret
	}
	c.startCQ()
	if ret := c.connectClient(); ret != 0 {
		r.eprintf("connect error %d\n", ret)
		c.release(0)
		return ret
	}
	ret := c.testClient()
	if ret != 0 {
		r.eprintf("rping client failed: %d\n", ret)
	}
	c.disconnect(c.id)
	c.release(2 * time.Second)
	return ret
}
