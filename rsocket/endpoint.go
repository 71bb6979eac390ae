package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/cm"
	"github.com/rdmago/rdma/internal/cmsock"
	"github.com/rdmago/rdma/mr"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// recvFlag marks receive work requests' IDs (RS_WR_ID_FLAG_RECV); a
// send's ID is the message it carries.
const recvFlag = 1 << 63

// endpoint is a connection's verbs resources and protocol state: one CQ
// for sends and receives with its completion channel, the QP of the
// rdma_cm ID, and three registered buffers: sbuf (data being sent, and
// control messages that do not fit inline), rbuf (the receive ring the
// peer writes into) and target (the SGL the peer writes credits into).
type endpoint struct {
	id     *cm.ID
	qp     *uverbs.QP
	cq     *uverbs.CQ
	ch     *uverbs.CompChannel
	sbuf   *mr.Region
	rbuf   *mr.Region
	target *mr.Region
	sbase  uint64 // sbuf's address, for SGEs
	rbase  uint64

	// rmu and wmu make Reads, and Writes, take turns; mu guards s and
	// every post and poll.
	rmu sync.Mutex
	wmu sync.Mutex
	mu  sync.Mutex
	s   stream

	// Lending. WriteTo and ReadFrom hand part of a registered buffer to
	// the caller's io.Writer or io.Reader, whose call may block for as
	// long as it likes, so they make it without rmu or wmu: Close and
	// CloseWrite never wait on user code. lent[dir] (under that
	// direction's lock) tells a Read or Write that comes meanwhile to wait
	// on lendMu[dir], which the lender holds until the part is back. The
	// part stays valid memory after Close: it is Go memory, kept alive by
	// the slice the caller holds, and no device writes into it once the
	// QP and the registration are gone.
	lent   [2]bool
	lendMu [2]sync.Mutex

	// Preallocated work requests and completions, so that posting and
	// polling allocate nothing (under mu). swr[0] is always an RDMA write
	// with immediate data: postWrite sets the fields that change and no
	// other code touches it, so the rest stay zero.
	swr   [1]wr.SendWR
	sge   [2]wr.SGE
	recvs []wr.RecvWR
	wc    [16]wr.Completion

	// Waiting. One goroutine at a time waits on the completion channel
	// (it holds it); the others sleep on their direction's wake channel
	// and are woken when it sees progress or gives up the wait.
	w      cmsock.Waiter
	armed  bool   // the CQ is armed: an event will come (under mu)
	events uint64 // events received (under mu)

	// Deadlines, and the timers that wake a waiting direction when its
	// deadline passes.
	deadlines cmsock.Deadlines

	pollTime time.Duration // how long to poll before waiting for an event

	closed    atomic.Bool
	watchEnd  chan struct{} // closed when watch returns
	stopWatch context.CancelFunc
	// cmGone is closed when rdma_cm reports the connection gone (the
	// peer disconnected or destroyed its ID).
	cmGone     chan struct{}
	cmGoneOnce sync.Once
	// sentEnd records that this side sent its DISCONNECT (under mu).
	sentEnd bool
	// cmReportedGone is cmGone's closing, under mu, for wait's tests.
	cmReportedGone bool
	// shutWrite records that this side shut its sending down.
	shutWrite bool
}

// Directions, indexing wake, deadline and timer. dirClose is Close's
// drain, which a closed connection does not cut short.
const (
	dirRead  = 0
	dirWrite = 1
	dirClose = 2
)

// config is what Dialer and ListenConfig set.
type config struct {
	sendBuf, recvBuf int
	inline           int
	queueDepth       int
	keepAlive        time.Duration
	pollTime         time.Duration
	waitInKernel     bool
}

func (c config) withDefaults() config {
	d := c
	if d.sendBuf <= 0 {
		d.sendBuf = defaultBuffer
	}
	if d.recvBuf <= 0 {
		d.recvBuf = defaultBuffer
	}
	if d.inline < 0 {
		d.inline = 0
	} else if d.inline == 0 {
		d.inline = defaultInline
	}
	if d.queueDepth <= 0 {
		d.queueDepth = defaultQueueDepth
	}
	if d.pollTime == 0 {
		d.pollTime = defaultPollTime
	}
	return d
}

// librdmacm's defaults (rs_configure without configuration files).
const (
	defaultBuffer     = 1 << 17
	defaultInline     = 64
	defaultQueueDepth = 384
	defaultPollTime   = 10 * time.Microsecond
	maxBuffer         = 1 << 28 // a 29-bit message length, halved
)

// newEndpoint creates the verbs resources of a connection on id, which is
// bound to its device (its address resolved, or a connection request),
// and posts the receives. It releases what it made if it fails.
func newEndpoint(id *cm.ID, cfg config) (_ *endpoint, err error) {
	vctx, pd := id.Verbs(), id.PD()
	if vctx == nil || pd == nil {
		return nil, unix.ENODEV
	}
	attr, err := vctx.QueryDevice()
	if err != nil {
		return nil, err
	}
	// The keepalive's probe takes a send queue slot and a CQ entry of its
	// own while it is out (uverbs.QP.SetKeepAlive), beside the data and
	// control messages the stream accounts for.
	probe := uint32(0)
	if cfg.keepAlive > 0 {
		probe = 1
	}
	size := uint32(cfg.queueDepth)
	size = min(size, uint32(attr.MaxQPWR)-probe-ctrlSlots, qpMaxSize)
	size = max(size, qpMinSize)
	// The peer may send size data messages on the credits granted, and
	// its control messages (credit updates, SHUTDOWN) on top of them: they
	// take receives too, but no credit. With only size receives posted, as
	// rsockets in C posts, a control message that lands before this side
	// polls and reposts finds the receive queue empty, and the peer's
	// device waits out rdma_cm's RNR timer (0.66 s) before it sends again.
	// The extra receives cost the peer nothing: credits stay size.
	sq, rq := size+probe, size+ctrlSlots
	// Each buffer is split in halves, each a whole number of pages that
	// a data message (29 bits of length) can describe.
	rbufSize := roundBuf(cfg.recvBuf)
	sbufSize := roundBuf(cfg.sendBuf)

	// e is not the named result: each failing return sets that to nil
	// before the deferred release runs.
	e := &endpoint{id: id, pollTime: cfg.pollTime}
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if e.ch, err = vctx.NewCompChannel(); err != nil {
		return nil, err
	}
	// Every post and poll is made under mu, so the CQ and the QP take no
	// locks of their own (SingleThreaded), but with a keepalive: its
	// check posts its probe from a goroutine of its own, and polls the
	// CQ when the probe is overdue (uverbs.QP.SetKeepAlive).
	single := cfg.keepAlive <= 0
	if e.cq, err = vctx.CreateCQ(uverbs.CQAttr{CQE: int(sq + rq), Channel: e.ch, SingleThreaded: single}); err != nil {
		return nil, err
	}
	e.w.Init(e.ch, cfg.waitInKernel, 3)
	err = id.CreateQP(pd, uverbs.QPInitAttr{
		Type:   qp.RC,
		SendCQ: e.cq,
		RecvCQ: e.cq,
		Caps: qp.Caps{
			MaxSendWR:     sq,
			MaxRecvWR:     rq,
			MaxSendSGE:    2,
			MaxRecvSGE:    1,
			MaxInlineData: uint32(cfg.inline),
		},
		SignalAll:      true,
		SingleThreaded: single,
	})
	if err != nil {
		return nil, err
	}
	e.qp = id.QP()
	inline := e.qp.Caps().MaxInlineData
	// Credit updates that carry an SGE stage it in one of ctrlSlots slots
	// after the data (rs_get_ctrl_buf); a slot is reused only once the
	// message that used it completed.
	if e.sbuf, err = mr.New(pd, int(sbufSize)+sgeLen*ctrlSlots, wr.LocalWrite); err != nil {
		return nil, err
	}
	if e.rbuf, err = mr.New(pd, int(rbufSize), wr.LocalWrite|wr.RemoteWrite); err != nil {
		return nil, err
	}
	if e.target, err = mr.New(pd, sglSize*sgeLen, wr.LocalWrite|wr.RemoteWrite); err != nil {
		return nil, err
	}
	e.sbase, e.rbase = e.sbuf.Addr(), e.rbuf.Addr()
	e.s.init(size, size, sbufSize, rbufSize, inline, e.target.Bytes()[:sglSize*sgeLen])
	e.swr[0] = wr.SendWR{SGList: e.sge[:0], Opcode: wr.OpRDMAWriteWithImm}
	e.recvs = make([]wr.RecvWR, rq)
	for i := range e.recvs {
		e.recvs[i].ID = recvFlag
	}
	if _, err = e.qp.PostRecv(e.recvs); err != nil {
		return nil, err
	}
	return e, nil
}

// roundBuf rounds a buffer size to two halves of whole pages, within what
// a message can describe.
func roundBuf(n int) uint32 {
	page := os.Getpagesize()
	n = min(max(n, 2*page), maxBuffer)
	half := (n/2 + page - 1) / page * page
	return uint32(2 * half)
}

// connData is what this side announces (rs_format_conn_data).
func (e *endpoint) connData() connData {
	flags := uint8(0)
	if bigEndian {
		flags |= flagNet
	}
	return connData{
		Version:   connVersion,
		Flags:     flags,
		Credits:   uint16(e.s.rqSize),
		TargetSGL: rsSGE{Addr: e.target.Addr(), Key: e.target.RKey(), Length: sglSize},
		DataBuf:   rsSGE{Addr: e.rbase, Key: e.rbuf.RKey(), Length: e.s.rbufSize / 2},
	}
}

// release frees the verbs resources; the ID is the caller's.
func (e *endpoint) release() {
	if e.qp != nil {
		e.id.DestroyQP()
	}
	for _, r := range []*mr.Region{e.target, e.rbuf, e.sbuf} {
		if r != nil {
			r.Close()
		}
	}
	if e.cq != nil {
		e.cq.Close()
	}
	if e.ch != nil {
		e.ch.Close()
	}
}

// fail records the first error that ends the connection (under mu).
func (e *endpoint) fail(err error) {
	if e.s.err == nil {
		e.s.err = err
	}
	e.s.state = 0
}

// postMsg sends a message without data: a zero-length RDMA write with
// immediate data (rs_post_msg).
func (e *endpoint) postMsg(m uint32) error {
	return e.postWrite(0, m, false, 0, 0)
}

// writeData writes length bytes, staged in e.sge[:n], into the peer's
// current target buffer (rs_write_data). Under mu, with canSend true.
func (e *endpoint) writeData(n int, length uint32) error {
	addr, rkey := e.s.reserve(length)
	return e.postWrite(n, msg(opData, length), length <= e.s.inline, addr, rkey)
}

// postWrite writes the SGEs in e.sge[:n] to the peer with message m.
func (e *endpoint) postWrite(n int, m uint32, inline bool, addr uint64, rkey uint32) error {
	// Field by field: a composite literal of the whole request is built
	// and copied with its pointers' write barriers, on every message.
	w := &e.swr[0]
	w.ID, w.SGList, w.Imm, w.Remote = uint64(m), e.sge[:n], m, wr.Remote{Addr: addr, RKey: rkey}
	w.Flags = 0
	if inline {
		w.Flags = wr.Inline
	}
	_, err := e.qp.PostSend(e.swr[:])
	return err
}

// sendCredits grants the peer credits, with the next free half of rbuf if
// there is one (rs_send_credits). Under mu.
func (e *endpoint) sendCredits() {
	s := &e.s
	m, off, half := s.grant()
	var err error
	if half != 0 {
		sge := rsSGE{Addr: e.rbase + uint64(off), Key: e.rbuf.RKey(), Length: half}
		var b [sgeLen]byte
		order := binary.ByteOrder(binary.NativeEndian)
		if s.swap {
			sge = rsSGE{Addr: bits.ReverseBytes64(sge.Addr), Key: bits.ReverseBytes32(sge.Key), Length: bits.ReverseBytes32(sge.Length)}
		}
		order.PutUint64(b[:], sge.Addr)
		order.PutUint32(b[8:], sge.Key)
		order.PutUint32(b[12:], sge.Length)
		slot := s.sbufSize + sgeLen*(s.ctrlSeq&(ctrlSlots-1))
		copy(e.sbuf.Bytes()[slot:slot+sgeLen], b[:])
		e.sge[0] = wr.SGE{Addr: e.sbase + uint64(slot), Length: sgeLen, LKey: e.sbuf.LKey()}
		raddr := s.remoteSGL.Addr + uint64(s.remoteSGE)*sgeLen
		err = e.postWrite(1, m, s.inline >= sgeLen, raddr, s.remoteSGL.Key)
		if s.remoteSGE++; s.remoteSGE == s.remoteSGL.Length {
			s.remoteSGE = 0
		}
	} else {
		err = e.postMsg(m)
	}
	if err != nil {
		e.fail(err)
	}
}

// updateCredits sends credits when they are due (under mu).
func (e *endpoint) updateCredits() {
	if e.s.giveCredits() {
		e.sendCredits()
	}
}

// poll reaps completions and reposts receives (rs_poll_cq), and reports
// whether it reaped any. Under mu.
func (e *endpoint) poll() bool {
	s := &e.s
	reaped := false
	for {
		n, err := e.cq.Poll(e.wc[:])
		if err != nil {
			e.fail(err)
			break
		}
		reaped = reaped || n > 0
		for i := range e.wc[:n] {
			c := &e.wc[i]
			if c.ID&recvFlag != 0 {
				if c.Status != wr.Success {
					continue
				}
				s.recvsToRepost++
				if c.Flags&wr.WCWithImm == 0 {
					e.fail(protoErr("a message without immediate data"))
					continue
				}
				if err := s.recvMsg(c.Imm); err != nil {
					e.fail(err)
				}
				continue
			}
			s.sendDone(uint32(c.ID))
			if c.Status != wr.Success && s.state&stConnected != 0 {
				e.fail(fmt.Errorf("rsocket: send failed: %w", c.Err()))
			}
		}
		if n < len(e.wc) {
			break // Poll found the CQ empty: no second call to see it again
		}
	}
	if s.recvsToRepost > 0 && s.state&stConnected != 0 {
		if _, err := e.qp.PostRecv(e.recvs[:s.recvsToRepost]); err != nil {
			e.fail(err)
		}
		s.recvsToRepost = 0
	}
	if reaped {
		// What it reaped may be what another direction waits for.
		e.w.Reaped()
	}
	return reaped
}

// progress is one round of rs_process_cq: credits, completions, credits.
//
// The poll is skipped while the CQ has nothing (uverbs.CQ.Pending), and
// the second look at the credits when the poll reaped nothing: neither
// could change what the first look found. Of the rounds a wait makes
// after its spin (the last look before it arms the CQ, the one after, the
// one after it wakes), mostly only the last finds anything.
func (e *endpoint) progress() {
	e.updateCredits()
	if e.cq.Pending() && e.poll() {
		e.updateCredits()
	}
}

// Conditions a wait waits for.
const (
	condRead       = iota // data, or no more to come
	condWrite             // room to send, or no more sending
	condCtrl              // a control slot, or the connection gone
	condSendsDone         // nothing outstanding
	condPeerClosed        // the peer's DISCONNECT and nothing outstanding, or rdma_cm's word that it is gone
)

func (e *endpoint) test(cond int) bool {
	s := &e.s
	switch cond {
	case condRead:
		return s.haveData() || s.state&stReadable == 0
	case condWrite:
		return s.canSend() || s.state&stWritable == 0
	case condCtrl:
		return s.ctrlAvail() || s.state&stConnected == 0
	case condPeerClosed:
		return e.cmReportedGone || s.peerDisconnect && s.allSendsDone()
	default:
		return s.allSendsDone()
	}
}

// errDeadline and errClosed end waits.
var (
	errDeadline = os.ErrDeadlineExceeded
	errClosed   = errors.New("rsocket: use of closed connection")
)

// wait makes progress until cond holds, with mu held on return when it
// returns nil. It polls for pollTime first, as rsocket.c does, then arms
// the CQ and sleeps: on the completion channel if no other goroutine is
// waiting there, on its direction's wake channel if one is.
//
// Only the goroutine that holds the channel (cmsock.Waiter) reads it, and
// it blocks there only after it found cond false with the CQ armed,
// polling under mu after the arm. Every completion after that raises an
// event, so whatever made the cond true comes as one. The holder wakes
// the sleepers whenever it lets go, so that they look again, and one of
// them takes over; a poll that reaps wakes them too, since the holder may
// have reaped what they wait for and gone back to the channel (see
// cmsock.Waiter).
func (e *endpoint) wait(dir, cond int) error {
	var spinStart int64
	spinning, yielded := true, false
	holding := false
	release := func() {
		if holding {
			e.w.Release()
			holding = false
		}
	}
	for {
		g, reaps := e.w.Kicks(), e.w.Reaps()
		e.mu.Lock()
		e.progress()
		if e.test(cond) {
			release()
			return nil
		}
		var err error
		switch {
		case dir != dirClose && e.closed.Load():
			err = errClosed
		case e.deadlines.Passed(dir):
			err = errDeadline
		}
		if err != nil {
			e.mu.Unlock()
			release()
			return err
		}
		if spinning {
			now := time.Now().UnixNano()
			if spinStart == 0 {
				spinStart = now
			}
			if now-spinStart < int64(e.pollTime) {
				e.mu.Unlock()
				if !yielded && !e.cq.Pending() {
					// Nothing to poll yet: give the CPU, once a wait,
					// to whatever else is runnable on it. On a
					// software device (rxe, where only rxe's CQ says
					// false) the completion being waited for is made
					// by CPU work, the peer's or the kernel's, and on
					// a CPU shared with them a spin that does not
					// yield holds off that very work until the spin
					// ends. Once: if the CQ is still empty after the
					// others had their turn, more yields are system
					// calls for nothing (docs/performance.md,
					// "Yielding in the spin").
					yielded = true
					yield()
				}
				continue
			}
			spinning = false
		}
		if !e.armed {
			if err := e.cq.ReqNotify(false); err != nil {
				e.fail(err)
			}
			e.armed = true
			e.mu.Unlock()
			continue // poll once more: a completion may have come before the arm
		}
		seen := e.events
		e.mu.Unlock()
		if !holding {
			if !e.w.Hold(dir, reaps) {
				continue // another holds it: look again
			}
			holding = true
			// Look again before sleeping on the channel if another
			// holder read an event since this poll: what it polled
			// after may be what this wait waits for, and the CQ is no
			// longer armed. Otherwise the poll above, made with the CQ
			// armed, still stands.
			e.mu.Lock()
			again := e.events != seen || !e.armed
			e.mu.Unlock()
			if again {
				continue
			}
		}
		e.waitEvent(g)
		release()
	}
}

// waitEvent waits on the completion channel for one event, unless kicked
// since g: a deadline's timer raises the flag wait reads and then kicks
// (g was read before the flag was).
func (e *endpoint) waitEvent(g uint64) {
	if !e.w.WaitEvent(g, e.deadlines.Pending()) {
		return // a kick or Close: the caller looks again
	}
	e.mu.Lock()
	e.armed = false
	e.events++
	e.mu.Unlock()
}

// wakeAll wakes any goroutine sleeping on a wake channel.
func (e *endpoint) wakeAll() { e.w.WakeAll() }

// kick cuts short the completion channel wait under way, if any, so its
// waiter looks at its deadline and the connection's state again, and
// wakes the sleepers.
func (e *endpoint) kick() { e.w.Kick() }
