package valkeyrdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/cmsock"
	"github.com/rdmago/rdma/internal/pollctx"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// Queue sizes, as src/rdma.c's (VALKEY_RDMA_MAX_WQE): each side posts
// queueDepth receives of one control message each, which the peer's
// control messages and data writes (each consumes a receive for its
// immediate data) land in, and keeps at most queueDepth sends outstanding.
const queueDepth = 1024

// Work request IDs. A receive's ID is its slot in the message buffer; a
// control message's send carries its slot and the low 32 bits of its
// sequence number; a data write carries its sequence number's low bits.
const (
	idRecv = 1 << 63
	idMsg  = 1 << 62
)

// Conn is a connection over Valkey's RDMA transport. It is a net.Conn:
// Read returns what the peer wrote, Write sends all of its bytes, and
// deadlines, Close and errors behave as package net's. Read and Write may
// be called from different goroutines at once; several concurrent Reads
// (or Writes) take turns.
//
// Errors are *net.OpError. After the peer disconnects, Read returns what
// had arrived and then io.EOF, and Write fails with ECONNRESET. A peer that
// broke the protocol ends the connection with an error matching
// ErrProtocol; one whose device stopped answering (its machine died), with
// ETIMEDOUT, found by the keepalive's sends.
//
// A Conn dropped without Close is closed when the garbage collector finds
// it unreachable.
type Conn struct {
	c            *conn
	laddr, raddr Addr
}

var _ net.Conn = (*Conn)(nil)

// Addr is the address of an endpoint: an IP address and port, as rdma_cm
// binds and resolves them.
type Addr struct {
	netip.AddrPort
}

// Network returns "rdma".
func (Addr) Network() string { return "rdma" }

// conn is a connection's state; Conn is its handle, so that a Conn dropped
// without Close can be found unreachable while conn's goroutines run.
type conn struct {
	id   *cm.ID
	pd   *uverbs.PD
	qp   *uverbs.QP
	cq   *uverbs.CQ
	ch   *uverbs.CompChannel
	msgs *mr.Region // queueDepth receive slots, then queueDepth send slots
	rx   *mr.Region // the buffer the peer writes into
	tx   *mr.Region // this side's copy of what it writes to the peer

	// The regions' memory, taken once: Region.Bytes takes a lock, and
	// the posts and copies need the slices on every call.
	msgBuf, rxBuf, txBuf []byte

	// rmu and wmu make Reads, and Writes, take turns; mu guards the rest
	// and every post and poll.
	rmu, wmu sync.Mutex
	mu       sync.Mutex

	// Receiving: the peer has written rxOff bytes into rx, Read has taken
	// rxPos of them.
	rxOff, rxPos uint32

	// Sending: the peer's receive buffer, and how much of it is written.
	txAddr uint64
	txKey  uint32
	txOff  uint32

	// The send queue: sends posted, sends known complete (every send up
	// to the last signaled one that completed), sends since the last
	// signaled one.
	posted, done uint64
	unsignaled   int
	freeSlots    []uint16 // free send slots in msgs

	recvList []wr.RecvWR // the receive of each slot
	reposts  []wr.RecvWR // receives to post again
	recvs    uint64      // receives completed, for the peer timeout
	peerKA   bool        // the peer sends keepalives
	swr      [1]wr.SendWR
	sge      [1]wr.SGE
	wc       [32]wr.Completion
	err      error // why the connection ended
	peerGone bool  // the peer disconnected

	// Waiting: Read and Write sleep on their wake channel; the CQ's
	// reader, the deadline timers, the connection's end and Close wake
	// them. With WaitInKernel (direct) there is no CQ's reader: a Read
	// or Write that must wait holds the completion channel and waits on
	// it in the kernel, while the other sleeps until the holder lets go.
	// armed (under mu) tells that the CQ is armed and its event not yet
	// read.
	w         cmsock.Waiter
	deadlines cmsock.Deadlines
	direct    bool
	armed     bool

	keepAlive   time.Duration
	peerTimeout time.Duration
	kaTimer     *time.Timer
	kaRecvs     uint64    // recvs at the last keepalive tick
	kaQuiet     time.Time // since when nothing was received

	closed   atomic.Bool
	stop     context.CancelFunc
	loopDone chan struct{}
	cmDone   chan struct{}
}

// Directions, indexing wake, deadline and timer.
const (
	dirRead  = 0
	dirWrite = 1
)

// config is what Dialer and ListenConfig set.
type config struct {
	recvBuf      int
	keepAlive    time.Duration
	peerTimeout  time.Duration
	waitInKernel bool
}

func (c config) withDefaults() config {
	if c.recvBuf <= 0 {
		c.recvBuf = DefaultBuffer
	}
	c.recvBuf = min(max(c.recvBuf, MinBuffer), MaxBuffer)
	if c.keepAlive == 0 {
		c.keepAlive = defaultKeepAlive
	}
	return c
}

// defaultKeepAlive is src/rdma.c's VALKEY_RDMA_KEEPALIVE_MS.
const defaultKeepAlive = 3 * time.Second

// newConn creates the verbs resources of a connection on id, which is
// bound to its device (its route resolved, or a connection request), and
// posts the receives. It releases what it made if it fails.
func newConn(id *cm.ID, cfg config) (_ *conn, err error) {
	vctx, pd := id.Verbs(), id.PD()
	if vctx == nil || pd == nil {
		return nil, unix.ENODEV
	}
	// c is not the named result: each failing return sets that to nil
	// before the deferred release runs.
	c := &conn{id: id, pd: pd, keepAlive: cfg.keepAlive, peerTimeout: cfg.peerTimeout, direct: cfg.waitInKernel}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.ch, err = vctx.NewCompChannel(); err != nil {
		return nil, err
	}
	if c.cq, err = vctx.CreateCQ(uverbs.CQAttr{CQE: 2 * queueDepth, Channel: c.ch}); err != nil {
		return nil, err
	}
	if c.direct {
		c.w.Init(c.ch, true, 2)
	} else {
		c.w.Init(nil, false, 2) // loop reads the channel
	}
	err = id.CreateQP(pd, uverbs.QPInitAttr{
		Type:   qp.RC,
		SendCQ: c.cq,
		RecvCQ: c.cq,
		Caps:   qp.Caps{MaxSendWR: queueDepth, MaxRecvWR: queueDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		return nil, err
	}
	c.qp = id.QP()
	if c.msgs, err = mr.New(pd, 2*queueDepth*msgSize, wr.LocalWrite); err != nil {
		return nil, err
	}
	if c.rx, err = mr.New(pd, cfg.recvBuf, wr.LocalWrite|wr.RemoteWrite|wr.RemoteRead); err != nil {
		return nil, err
	}
	c.msgBuf, c.rxBuf = c.msgs.Bytes(), c.rx.Bytes()
	c.freeSlots = make([]uint16, queueDepth)
	for i := range c.freeSlots {
		c.freeSlots[i] = uint16(2*queueDepth - 1 - i)
	}
	c.reposts = make([]wr.RecvWR, 0, queueDepth)
	sges := make([]wr.SGE, queueDepth)
	recvs := make([]wr.RecvWR, queueDepth)
	for i := range recvs {
		sges[i] = wr.SGE{Addr: c.msgs.Addr() + uint64(i*msgSize), Length: msgSize, LKey: c.msgs.LKey()}
		recvs[i] = wr.RecvWR{ID: idRecv | uint64(i), SGList: sges[i : i+1]}
	}
	c.recvList = recvs
	if _, err = c.qp.PostRecv(recvs); err != nil {
		return nil, err
	}
	return c, nil
}

// start announces this side's receive buffer and starts the goroutines of
// an established connection: the CQ's reader (none with WaitInKernel), the
// rdma_cm event watcher and the keepalive.
func (c *conn) start() error {
	c.mu.Lock()
	err := c.registerRx()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.loopDone = make(chan struct{})
	c.cmDone = make(chan struct{})
	if c.direct {
		close(c.loopDone)
	} else {
		go c.loop(ctx)
	}
	go c.watch(ctx)
	if every := c.tickEvery(); every > 0 {
		// Under mu, which tick takes: the timer's goroutine must see
		// kaTimer and kaQuiet set, however soon it fires.
		c.mu.Lock()
		c.kaQuiet = time.Now()
		c.kaTimer = time.AfterFunc(every, c.tick)
		c.mu.Unlock()
	}
	return nil
}

// tickEvery is the interval of tick: the keepalive's, and with
// WaitInKernel at least Valkey's default, since with no CQ's reader the
// tick reaps what comes while neither Read nor Write waits (the peer's
// keepalives, whose receives must be posted again).
func (c *conn) tickEvery() time.Duration {
	if c.keepAlive > 0 {
		return c.keepAlive
	}
	if c.direct {
		return defaultKeepAlive
	}
	return 0
}

func wrap(c *conn) *Conn {
	cn := &Conn{c: c, laddr: Addr{c.id.SrcAddr()}, raddr: Addr{c.id.DstAddr()}}
	runtime.AddCleanup(cn, func(c *conn) { c.close() }, c)
	return cn
}

// release frees the verbs resources; the ID is the caller's.
func (c *conn) release() {
	if c.qp != nil {
		c.id.DestroyQP()
	}
	for _, r := range []*mr.Region{c.tx, c.rx, c.msgs} {
		if r != nil {
			r.Close()
		}
	}
	if c.cq != nil {
		c.cq.Close()
	}
	if c.ch != nil {
		c.ch.Close()
	}
}

// fail records the first error that ends the connection (under mu).
func (c *conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// msg returns send or receive slot i of the message buffer.
func (c *conn) msg(i int) []byte {
	return c.msgBuf[i*msgSize : (i+1)*msgSize]
}

// sendRoom reports whether a control message may be posted, and
// dataRoom whether a data write may (under mu). Data leaves ctrlSlots of
// the queue to control messages, so that a writer that filled it cannot
// keep Read from offering the receive buffer again.
func (c *conn) sendRoom() bool { return c.posted-c.done < queueDepth }
func (c *conn) dataRoom() bool { return c.posted-c.done < queueDepth-ctrlSlots }

// txReady reports whether the peer's buffer is known and has room left
// (under mu).
func (c *conn) txReady() bool { return c.txOff < uint32(len(c.txBuf)) }

// ctrlSlots is the part of the send queue that data writes leave free.
const ctrlSlots = 16

// sendMsg sends a control message from a free send slot, signaled so that
// the slot is freed when it completes (rdmaSendCommand). Under mu.
func (c *conn) sendMsg(m message) error {
	if len(c.freeSlots) == 0 || !c.sendRoom() {
		return fmt.Errorf("valkeyrdma: send queue full: %w", unix.ENOBUFS)
	}
	slot := c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	m.marshal(c.msg(int(slot)))
	c.sge[0] = wr.SGE{Addr: c.msgs.Addr() + uint64(slot)*msgSize, Length: msgSize, LKey: c.msgs.LKey()}
	c.swr[0] = wr.SendWR{
		ID:     idMsg | uint64(slot)<<32 | c.posted&0xffffffff,
		SGList: c.sge[:],
		Opcode: wr.OpSend,
		Flags:  wr.Signaled,
	}
	if _, err := c.qp.PostSend(c.swr[:]); err != nil {
		c.freeSlots = append(c.freeSlots, slot)
		return err
	}
	c.posted++
	c.unsignaled = 0
	return nil
}

// registerRx offers the receive buffer to the peer from its start
// (connRdmaRegisterRx): at connection and whenever Read has taken all of
// it. Under mu.
func (c *conn) registerRx() error {
	c.rxOff, c.rxPos = 0, 0
	return c.sendMsg(message{op: opRegisterXferMemory, addr: c.rx.Addr(), length: uint32(len(c.rxBuf)), key: c.rx.RKey()})
}

// writeData writes n bytes staged at txOff of tx into the peer's buffer at
// the same offset, with the length as immediate data (connRdmaSend).
// Under mu, with room checked.
func (c *conn) writeData(n uint32) error {
	flags := wr.SendFlags(0)
	// Signal one write in every half queue, so that a full queue always
	// holds one whose completion frees it.
	if c.unsignaled++; c.unsignaled >= queueDepth/2 {
		flags = wr.Signaled
		c.unsignaled = 0
	}
	c.sge[0] = wr.SGE{Addr: c.tx.Addr() + uint64(c.txOff), Length: n, LKey: c.tx.LKey()}
	c.swr[0] = wr.SendWR{
		ID:     c.posted & 0xffffffff,
		SGList: c.sge[:],
		Opcode: wr.OpRDMAWriteWithImm,
		Flags:  flags,
		Imm:    n,
		Remote: wr.Remote{Addr: c.txAddr + uint64(c.txOff), RKey: c.txKey},
	}
	if _, err := c.qp.PostSend(c.swr[:]); err != nil {
		return err
	}
	c.posted++
	c.txOff += n
	return nil
}

// poll reaps completions and reposts receives. Under mu.
func (c *conn) poll() {
	reaped := false
	for {
		n, err := c.cq.Poll(c.wc[:])
		if err != nil {
			c.fail(err)
			break
		}
		reaped = reaped || n > 0
		c.handle(c.wc[:n])
		if n < len(c.wc) {
			break
		}
	}
	if reaped {
		c.repost()
		// What it reaped may be what the other direction waits for.
		c.w.Reaped()
	}
}

// handle processes completions (connRdmaHandleCq). Under mu.
func (c *conn) handle(wcs []wr.Completion) {
	for i := range wcs {
		w := &wcs[i]
		if w.Status != wr.Success {
			if c.err == nil && !c.peerGone && !c.closed.Load() {
				c.fail(w.Err())
			}
			if w.ID&(idRecv|idMsg) == idMsg {
				c.freeSlots = append(c.freeSlots, uint16(w.ID>>32&0xffff))
			}
			continue
		}
		switch {
		case w.ID&idRecv != 0:
			c.recvs++
			c.reposts = append(c.reposts, c.recvList[w.ID&(queueDepth-1)])
			if c.err != nil {
				continue
			}
			if err := c.received(w); err != nil {
				c.fail(err)
			}
		case w.ID&idMsg != 0:
			c.freeSlots = append(c.freeSlots, uint16(w.ID>>32&0xffff))
			c.completed(uint32(w.ID))
		default:
			c.completed(uint32(w.ID))
		}
	}
}

// completed notes that the send whose sequence number ends in low
// completed, and with it every send before it. The CQ's reader and a
// Read or Write may handle their batches in either order, so a completion
// older than one already seen is skipped.
func (c *conn) completed(low uint32) {
	if d := low - uint32(c.done); d < queueDepth {
		c.done += uint64(d) + 1
	}
}

// received handles a receive: data written into rx, or a control message.
func (c *conn) received(w *wr.Completion) error {
	switch w.Opcode {
	case wr.WCRecvRDMAWithImm:
		n := w.Imm
		if w.Flags&wr.WCWithImm == 0 || uint64(c.rxOff)+uint64(n) > uint64(len(c.rxBuf)) {
			return protoErr("a write of %d bytes announced where %d bytes of the receive buffer are left", n, uint64(len(c.rxBuf))-uint64(c.rxOff))
		}
		c.rxOff += n
		return nil
	case wr.WCRecv:
	default:
		return protoErr("a receive completed as %v", w.Opcode)
	}
	m, err := parseMessage(c.msg(int(w.ID&(queueDepth-1))), w.ByteLen)
	if err != nil {
		return err
	}
	switch m.op {
	case opGetServerFeature:
		// No features are defined yet: the answer offers none.
		return c.sendMsg(message{op: opGetServerFeature, sel: m.sel})
	case opSetClientFeature:
		// Nothing to set: src/rdma.c ignores it too.
	case opKeepalive:
		c.peerKA = true
	case opRegisterXferMemory:
		if len(c.txBuf) != int(m.length) {
			// A buffer of the peer's size: each write goes from the
			// same offset here as there, as src/rdma.c's.
			tx, err := mr.New(c.pd, int(m.length), wr.LocalWrite)
			if err != nil {
				return err
			}
			if c.tx != nil {
				c.tx.Close()
			}
			c.tx, c.txBuf = tx, tx.Bytes()
		}
		c.txAddr, c.txKey, c.txOff = m.addr, m.key, 0
	}
	return nil
}

// repost posts the receives that completed again. Under mu.
func (c *conn) repost() {
	if len(c.reposts) == 0 || c.err != nil || c.peerGone {
		c.reposts = c.reposts[:0]
		return
	}
	if _, err := c.qp.PostRecv(c.reposts); err != nil {
		c.fail(err)
	}
	c.reposts = c.reposts[:0]
}

// loop reads the CQ's events, so that completions are reaped and the
// waiting Read or Write woken while nobody polls. It owns the CQ's
// channel (one per connection) and reads it itself, as valkey's C
// client does: arm, reap what came before the arm, wait for the event.
func (c *conn) loop(ctx context.Context) {
	defer close(c.loopDone)
	for {
		err := c.cq.ReqNotify(false)
		c.mu.Lock()
		if err == nil {
			// A completion that came before the arm raises no event.
			c.poll()
		} else if ctx.Err() == nil {
			c.fail(err)
		}
		c.mu.Unlock()
		c.wakeAll()
		if err != nil {
			return
		}
		// With a context that is never done, which allocates nothing per
		// wait; close ends the wait with a deadline in the past, after
		// cancelling ctx.
		cq, err := c.ch.GetEvent(context.Background())
		if err != nil {
			c.mu.Lock()
			if ctx.Err() == nil {
				c.fail(err)
			}
			c.mu.Unlock()
			c.wakeAll()
			return
		}
		cq.AckEvents(1)
	}
}

// watch follows the connection's rdma_cm events: a peer that disconnects
// ends the connection.
func (c *conn) watch(ctx context.Context) {
	defer close(c.cmDone)
	ch := c.id.Channel()
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return
		}
		switch ev.Type {
		case cm.EventDisconnected, cm.EventDeviceRemoval:
		default:
			continue
		}
		c.mu.Lock()
		c.peerGone = true
		if err := ev.Err(); err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				err = errno
			}
			c.fail(err)
		}
		c.mu.Unlock()
		c.id.Disconnect(ctx)
		c.alert()
	}
}

// tick is the keepalive (rdmaKeepaliveTimeProc): a control message every
// keepAlive, whose failure to reach the peer's device ends the connection,
// and the check that a peer that sends keepalives still does.
func (c *conn) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() || c.err != nil || c.peerGone {
		return
	}
	if c.direct {
		// Nobody else reaps while no call waits.
		c.poll()
		c.wakeAll()
	}
	now := time.Now()
	if c.recvs != c.kaRecvs {
		c.kaRecvs, c.kaQuiet = c.recvs, now
	} else if c.peerTimeout > 0 && c.peerKA && now.Sub(c.kaQuiet) >= c.peerTimeout {
		c.fail(fmt.Errorf("valkeyrdma: nothing from the peer for %v: %w", now.Sub(c.kaQuiet).Round(time.Millisecond), unix.ETIMEDOUT))
		c.alert()
		return
	}
	if c.keepAlive > 0 && len(c.freeSlots) > 0 && c.sendRoom() {
		if err := c.sendMsg(message{op: opKeepalive}); err != nil {
			c.fail(err)
			c.alert()
			return
		}
	}
	c.kaTimer.Reset(c.tickEvery())
}

// wakeAll wakes a waiting Read and Write.
func (c *conn) wakeAll() { c.w.WakeAll() }

// alert wakes the waiting Read and Write for an event that does not come
// through the CQ (a deadline, the peer's disconnect, Close), cutting short
// a wait in the kernel.
func (c *conn) alert() { c.w.Kick() }

// errClosed ends calls on a closed connection.
var errClosed = errors.New("valkeyrdma: use of closed connection")

// usable tells why a call in direction dir may not go on: the connection
// is closed, or the direction's deadline has passed.
func (c *conn) usable(dir int) error {
	if c.closed.Load() {
		return errClosed
	}
	if c.deadlines.Passed(dir) {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// sleep waits to be woken, after usable said the call may go on; the
// caller polls and looks again. g is the kick count the caller read before
// it last looked at the connection's state: whatever changes that state
// (a deadline's timer, the peer's disconnect, Close) changes it first and
// kicks after, so a change the look missed is a kick since g. reaps is
// the Waiter's count of reaping polls read then: one since means another
// call may have reaped what this one waits for.
func (c *conn) sleep(dir int, g, reaps uint64) error {
	if err := c.usable(dir); err != nil {
		return err
	}
	switch {
	case !c.direct:
		c.w.Sleep(dir)
	case c.w.Hold(dir, reaps):
		// The other direction sleeps until Release.
		c.waitEvent(g)
		c.w.Release()
	}
	return c.usable(dir)
}

// waitEvent waits in the kernel for one event of the completion channel,
// which it holds, unless kicked since g. The CQ is armed again as soon as
// its event is read, as valkey's client does, so that the caller's poll
// that follows reaps what came before the arm and the next wait can sleep
// at once. An unarmed CQ (the first wait) is armed and the caller sent
// back to poll once more, since a completion that came before the arm
// raises no event.
func (c *conn) waitEvent(g uint64) {
	c.mu.Lock()
	if !c.armed {
		c.arm()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if !c.w.WaitEvent(g, c.deadlines.Pending()) {
		return // a kick or Close: the caller looks again
	}
	c.mu.Lock()
	c.arm()
	c.mu.Unlock()
}

// arm requests the CQ's next event (under mu).
func (c *conn) arm() {
	err := c.cq.ReqNotify(false)
	if err != nil {
		c.fail(err)
	}
	c.armed = err == nil
}

func (c *conn) read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.usable(dirRead); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	for {
		g, reaps := c.w.Kicks(), c.w.Reaps()
		c.mu.Lock()
		if c.rxPos == c.rxOff {
			c.poll()
		}
		if c.rxPos < c.rxOff {
			n := copy(b, c.rxBuf[c.rxPos:c.rxOff])
			c.rxPos += uint32(n)
			var err error
			if int(c.rxPos) == len(c.rxBuf) && c.err == nil && !c.peerGone {
				// All of the buffer read: offer it again
				// (connRdmaEventHandler).
				if err = c.registerRx(); err != nil {
					c.fail(err)
				}
			}
			c.mu.Unlock()
			if err != nil {
				c.alert()
			}
			return n, nil
		}
		err := c.err
		if err == nil && c.peerGone {
			err = io.EOF
		}
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if err := c.sleep(dirRead, g, reaps); err != nil {
			return 0, err
		}
	}
}

func (c *conn) write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.usable(dirWrite); err != nil {
		return 0, err
	}
	written := 0
	for written < len(b) {
		g, reaps := c.w.Kicks(), c.w.Reaps()
		c.mu.Lock()
		if !c.txReady() || !c.dataRoom() {
			c.poll()
		}
		err := c.err
		if err == nil && c.peerGone {
			err = unix.ECONNRESET
		}
		if err != nil {
			c.mu.Unlock()
			return written, err
		}
		if c.txReady() && c.dataRoom() {
			n := min(uint32(len(c.txBuf))-c.txOff, uint32(min(len(b)-written, MaxBuffer)))
			copy(c.txBuf[c.txOff:], b[written:written+int(n)])
			if err := c.writeData(n); err != nil {
				c.fail(err)
				c.mu.Unlock()
				return written, err
			}
			written += int(n)
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		if err := c.sleep(dirWrite, g, reaps); err != nil {
			return written, err
		}
	}
	return written, nil
}

// closeLinger bounds how long Close waits for the disconnect.
const closeLinger = 2 * time.Second

// drain waits, until deadline, for the sends posted to complete, so that
// what Write returned as sent reaches the peer before the disconnect
// flushes the queue, as a TCP socket's close sends what it buffered. Most
// data writes are unsignaled: a signaled write of no bytes after them
// completes only once they have (the queue's order).
func (c *conn) drain(deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pause := 10 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		c.poll()
		if c.err != nil || c.peerGone || c.posted == c.done {
			return
		}
		if c.unsignaled > 0 && c.sendRoom() {
			c.swr[0] = wr.SendWR{
				ID:     c.posted & 0xffffffff,
				Opcode: wr.OpRDMAWrite,
				Flags:  wr.Signaled,
				Remote: wr.Remote{Addr: c.txAddr, RKey: c.txKey},
			}
			if _, err := c.qp.PostSend(c.swr[:]); err != nil {
				return
			}
			c.posted++
			c.unsignaled = 0
		}
		if time.Now().After(deadline) {
			return
		}
		c.mu.Unlock()
		time.Sleep(pause)
		c.mu.Lock()
	}
}

// close is Close, and the cleanup of a Conn dropped without it.
func (c *conn) close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	c.alert()
	c.rmu.Lock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	defer c.rmu.Unlock()
	c.deadlines.Stop()
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	// The watcher goes first: Disconnect waits for the DISCONNECTED
	// event on the ID's channel, which the watcher would otherwise read.
	if c.stop != nil {
		c.stop()
		c.ch.SetReadDeadline(pollctx.Past)
		<-c.loopDone
		<-c.cmDone
	}
	deadline := time.Now().Add(closeLinger)
	c.drain(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	c.id.Disconnect(ctx)
	cancel()
	// The keepalive may have fired before it was stopped: it ends once
	// it sees the connection closed, and mu orders it before release.
	c.mu.Lock()
	c.release()
	c.mu.Unlock()
	return c.id.Close()
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		// Here, not in OpErr: the addresses, made interfaces for its
		// call, would cost two allocations on every Read and Write.
		return err
	}
	return cmsock.OpErr(op, "rdma", c.laddr, c.raddr, err, errClosed)
}

// Read reads what the peer has written, up to len(b) bytes, waiting for
// data if none has come. After the peer's last byte, once it
// disconnected, Read returns io.EOF.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.c.read(b)
	return n, c.opErr("read", err)
}

// Write writes all of b into the peer's receive buffer, waiting for the
// peer to offer it again when it is full. It returns an error, with the
// bytes written before it, when the deadline passes or the connection
// ends.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.c.write(b)
	return n, c.opErr("write", err)
}

// Close ends the connection: it ends the calls under way, waits for what
// Write sent to reach the peer (2 s at most, as a TCP socket's close sends
// what it buffered), disconnects and releases the connection's resources.
// Later calls fail with an error matching net.ErrClosed.
func (c *Conn) Close() error {
	return c.opErr("close", c.c.close())
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.setDeadline(t, dirRead, dirWrite) }

// SetReadDeadline sets the deadline for Reads, those under way included:
// past it, they fail with an error matching os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadline(t, dirRead) }

// SetWriteDeadline sets the deadline for Writes, as SetReadDeadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(t, dirWrite) }

func (c *Conn) setDeadline(t time.Time, dirs ...int) error {
	if c.c.closed.Load() {
		return c.opErr("set deadline", errClosed)
	}
	for _, d := range dirs {
		c.c.deadlines.Set(d, t, c.c.alert)
	}
	return nil
}
