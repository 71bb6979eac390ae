package cm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
	"github.com/rdmago/rdma/wr"
)

// The rdma_verbs.h calls. In C they are inline wrappers of ibv_post_send,
// ibv_post_recv and ibv_poll_cq on the ID's QP and CQs; here they are
// methods of ID with the same names and arguments, in the same order:
//
//	rdma_post_send(id, ctx, addr, len, mr, flags)  →  id.PostSend(wrID, buf, mr, flags)
//	rdma_post_write(id, ctx, addr, len, mr, flags, remote_addr, rkey)
//	                                               →  id.PostWrite(wrID, buf, mr, flags, remote)
//
// where buf is addr and len as one slice, and remote is the remote address
// and rkey as one wr.Remote, which the peer's uverbs.MR.Remote gives. The
// C calls' context is wrID here, the work request's ID, which comes back
// as the completion's (wr.Completion.ID). Flags are wr.SendFlags:
// wr.Signaled, wr.Inline, wr.Fence, wr.Solicited. With wr.Inline the data
// is copied into the work request, so the buffer need not be registered
// (mr may be nil) and may be reused at once.
//
// A post is checked before anything reaches the queue: an ID without a QP
// gets unix.EINVAL, one not connected (its QP not ready to send, or the
// connection gone) unix.ENOTCONN, a buffer outside its MR unix.EINVAL, a
// full queue unix.ENOMEM. Posting allocates nothing: each ID keeps its own
// work request and scatter-gather element for sends and for receives,
// each used under a mutex, which a single-threaded QP
// (uverbs.QPInitAttr.SingleThreaded) does without.

// scratch is an ID's preallocated work requests.
type scratch struct {
	sendMu  postLock
	send    [1]wr.SendWR
	sendSGE [1]wr.SGE
	// sendKeep and recvKeep hold the caller's buffer during a post.
	// Storing it here makes the compiler treat buffers passed to the
	// posting calls as escaping, so none lives on a goroutine stack,
	// which may move while the provider copies inline data from the
	// address in the SGE.
	sendKeep unsafe.Pointer

	recvMu   postLock
	recv     [1]wr.RecvWR
	recvSGE  [1]wr.SGE
	recvKeep unsafe.Pointer
	// srq is the SRQ the ID's QP receives from, set with the QP (under
	// both locks).
	srq *uverbs.SRQ

	sendCompMu sync.Mutex
	sendWC     [1]wr.Completion
	recvCompMu sync.Mutex
	recvWC     [1]wr.Completion
}

// postLock serializes the posts of one kind (sends, or receives) through
// an ID's scratch. It is off while the ID's QP is single-threaded: its
// user then posts from one goroutine at a time, and the post takes no lock
// of cm's (nor of the provider's).
type postLock struct {
	mu  sync.Mutex
	off atomic.Bool
}

// lock takes l unless it is off, and reports whether it did, for unlock.
func (l *postLock) lock() bool {
	if l.off.Load() {
		return false
	}
	l.mu.Lock()
	return true
}

func (l *postLock) unlock(locked bool) {
	if locked {
		l.mu.Unlock()
	}
}

// reset clears the work requests, dropping references to caller memory,
// and sets the SRQ of the QP and whether posts lock. It waits for posts
// under way.
func (s *scratch) reset(srq *uverbs.SRQ, single bool) {
	s.sendMu.mu.Lock()
	s.recvMu.mu.Lock()
	s.srq = srq
	s.send[0], s.sendSGE[0], s.sendKeep = wr.SendWR{}, wr.SGE{}, nil
	s.recv[0], s.recvSGE[0], s.recvKeep = wr.RecvWR{}, wr.SGE{}, nil
	s.sendMu.off.Store(single)
	s.recvMu.off.Store(single)
	s.recvMu.mu.Unlock()
	s.sendMu.mu.Unlock()
}

// postErr is a refused post: the errno, with why.
func postErr(op string, errno unix.Errno, why string) error {
	return &Error{Op: op, Err: fmt.Errorf("%s: %w", why, errno)}
}

// noQP is the error of a post on an ID without a QP: ErrClosed once the
// ID is destroyed.
func (id *ID) noQP(op string) error {
	if id.destroyed.Load() {
		return ErrClosed
	}
	return postErr(op, unix.EINVAL, "the ID has no QP")
}

// sendQP returns the QP to send on, or why not: sends need RTS or SQD.
func (id *ID) sendQP(op string) (*uverbs.QP, error) { return id.postQP(op, true) }

// recvQP returns the QP to post receives on, or why not. Receives may be
// posted from INIT on, before the connection is up.
func (id *ID) recvQP(op string) (*uverbs.QP, error) { return id.postQP(op, false) }

// postQP returns the QP to post sends (send) or receives on, or why not:
// the ID has none, its QP is not in a state that takes them, or the
// connection is gone.
func (id *ID) postQP(op string, send bool) (*uverbs.QP, error) {
	q := id.qp.Load()
	if q == nil {
		return nil, id.noQP(op)
	}
	s := q.State()
	ready := s == qp.StateRTS || s == qp.StateSQD
	if !send {
		ready = s != qp.StateReset && s != qp.StateErr
	}
	if !ready {
		if id.getState() == stateDisconnected {
			return nil, id.goneErr(op)
		}
		return nil, postErr(op, unix.ENOTCONN, "not connected: the QP is in state "+s.String())
	}
	if id.qpType != qp.UD && id.getState() == stateDisconnected {
		return nil, id.goneErr(op)
	}
	return q, nil
}

// goneErr is the error of a post on a connection that ended.
func (id *ID) goneErr(op string) error {
	if err := id.keepAliveErr(op); err != nil {
		return err
	}
	return postErr(op, unix.ENOTCONN, "the connection is gone")
}

// sgeOf describes buf as one SGE of m. Without an MR the local key is 0,
// which only inline sends may use.
func sgeOf(op string, buf []byte, m *uverbs.MR, inline bool) (wr.SGE, error) {
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	if m == nil {
		if !inline {
			return wr.SGE{}, postErr(op, unix.EINVAL, "no MR for a buffer that is not sent inline")
		}
		return wr.SGE{Addr: addr, Length: uint32(len(buf))}, nil
	}
	if len(buf) > 0 {
		mb := m.Bytes()
		start := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mb))))
		if addr < start || addr+uint64(len(buf)) > start+uint64(len(mb)) {
			return wr.SGE{}, postErr(op, unix.EINVAL, "the buffer is not inside the MR")
		}
	}
	return wr.SGE{Addr: addr, Length: uint32(len(buf)), LKey: m.LKey()}, nil
}

// postSend posts the scratch send request, which the caller filled under
// s.sendMu, and clears it.
func (id *ID) postSend(op string, q *uverbs.QP) error {
	s := &id.scratch
	_, err := q.PostSend(s.send[:])
	s.send[0] = wr.SendWR{}
	s.sendKeep = nil
	if err != nil {
		return wrapPost(op, err)
	}
	return nil
}

// wrapPost names cm's operation once: the verbs layer's own prefix and the
// request's index (always 0 here) would only repeat it.
func wrapPost(op string, err error) error {
	if errors.Is(err, uverbs.ErrClosed) {
		return postErr(op, unix.EINVAL, "the ID's QP was destroyed")
	}
	var pe *uverbs.PostError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ue *uverbs.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &Error{Op: op, Err: err}
}

// PostRecvv posts a receive of the buffers sgl names (rdma_post_recvv), to
// the ID's SRQ when it has one.
func (id *ID) PostRecvv(wrID uint64, sgl []wr.SGE) error {
	s := &id.scratch
	defer s.recvMu.unlock(s.recvMu.lock())
	return id.postRecv("post recv", wrID, sgl)
}

func (id *ID) postRecv(op string, wrID uint64, sgl []wr.SGE) error {
	s := &id.scratch
	s.recv[0] = wr.RecvWR{ID: wrID, SGList: sgl}
	q, err := id.recvQP(op)
	if err != nil {
		s.recv[0] = wr.RecvWR{}
		return err
	}
	if s.srq != nil {
		_, err = s.srq.PostRecv(s.recv[:])
	} else {
		_, err = q.PostRecv(s.recv[:])
	}
	s.recv[0] = wr.RecvWR{}
	s.recvKeep = nil
	if err != nil {
		return wrapPost(op, err)
	}
	return nil
}

// PostRecv posts a receive into buf, which must lie inside mr
// (rdma_post_recv). On a UD QP the first 40 bytes receive the GRH.
func (id *ID) PostRecv(wrID uint64, buf []byte, mr *uverbs.MR) error {
	const op = "post recv"
	if id.destroyed.Load() {
		return ErrClosed
	}
	if mr == nil {
		return postErr(op, unix.EINVAL, "a receive needs an MR")
	}
	s := &id.scratch
	defer s.recvMu.unlock(s.recvMu.lock())
	s.recvKeep = unsafe.Pointer(unsafe.SliceData(buf))
	sge, err := sgeOf(op, buf, mr, false)
	if err != nil {
		s.recvKeep = nil
		return err
	}
	s.recvSGE[0] = sge
	return id.postRecv(op, wrID, s.recvSGE[:])
}

// PostSendv sends the buffers sgl names (rdma_post_sendv).
func (id *ID) PostSendv(wrID uint64, sgl []wr.SGE, flags wr.SendFlags) error {
	return id.postSendv("post send", wrID, sgl, flags, wr.OpSend, wr.Remote{})
}

// PostReadv reads the peer's memory at remote into the buffers sgl names
// (rdma_post_readv).
func (id *ID) PostReadv(wrID uint64, sgl []wr.SGE, flags wr.SendFlags, remote wr.Remote) error {
	return id.postSendv("post read", wrID, sgl, flags, wr.OpRDMARead, remote)
}

// PostWritev writes the buffers sgl names to the peer's memory at remote
// (rdma_post_writev).
func (id *ID) PostWritev(wrID uint64, sgl []wr.SGE, flags wr.SendFlags, remote wr.Remote) error {
	return id.postSendv("post write", wrID, sgl, flags, wr.OpRDMAWrite, remote)
}

func (id *ID) postSendv(op string, wrID uint64, sgl []wr.SGE, flags wr.SendFlags, opcode wr.Opcode, remote wr.Remote) error {
	s := &id.scratch
	defer s.sendMu.unlock(s.sendMu.lock())
	q, err := id.sendQP(op)
	if err != nil {
		return err
	}
	s.send[0] = wr.SendWR{ID: wrID, SGList: sgl, Opcode: opcode, Flags: flags, Remote: wr.Remote{Addr: remote.Addr, RKey: remote.RKey}}
	return id.postSend(op, q)
}

// post1 posts buf as a one-SGE send request of the given kind.
func (id *ID) post1(op string, wrID uint64, buf []byte, mr *uverbs.MR, flags wr.SendFlags, opcode wr.Opcode,
	remote wr.Remote, ah *uverbs.AH, remoteQPN uint32) error {
	s := &id.scratch
	defer s.sendMu.unlock(s.sendMu.lock())
	q, err := id.sendQP(op)
	if err != nil {
		return err
	}
	s.sendKeep = unsafe.Pointer(unsafe.SliceData(buf))
	sge, err := sgeOf(op, buf, mr, flags&wr.Inline != 0 && opcode != wr.OpRDMARead)
	if err != nil {
		s.sendKeep = nil
		return err
	}
	s.sendSGE[0] = sge
	s.send[0] = wr.SendWR{ID: wrID, SGList: s.sendSGE[:], Opcode: opcode, Flags: flags, Remote: wr.Remote{Addr: remote.Addr, RKey: remote.RKey}}
	if ah != nil {
		s.send[0].AH = ah
		s.send[0].RemoteQPN = remoteQPN
		s.send[0].RemoteQKey = UDPQKey
	}
	return id.postSend(op, q)
}

// PostSend sends buf (rdma_post_send). mr may be nil with wr.Inline.
func (id *ID) PostSend(wrID uint64, buf []byte, mr *uverbs.MR, flags wr.SendFlags) error {
	return id.post1("post send", wrID, buf, mr, flags, wr.OpSend, wr.Remote{}, nil, 0)
}

// PostRead reads the peer's memory at remote into buf, which must lie
// inside mr (rdma_post_read).
func (id *ID) PostRead(wrID uint64, buf []byte, mr *uverbs.MR, flags wr.SendFlags, remote wr.Remote) error {
	if id.destroyed.Load() {
		return ErrClosed
	}
	if mr == nil {
		return postErr("post read", unix.EINVAL, "a read needs an MR for its local buffer")
	}
	return id.post1("post read", wrID, buf, mr, flags, wr.OpRDMARead, remote, nil, 0)
}

// PostWrite writes buf to the peer's memory at remote (rdma_post_write).
// mr may be nil with wr.Inline.
func (id *ID) PostWrite(wrID uint64, buf []byte, mr *uverbs.MR, flags wr.SendFlags, remote wr.Remote) error {
	return id.post1("post write", wrID, buf, mr, flags, wr.OpRDMAWrite, remote, nil, 0)
}

// PostUDSend sends buf on a UD QP to the QP remoteQPN behind ah, with the
// UDP port space's Q_Key (rdma_post_ud_send). mr may be nil with wr.Inline.
func (id *ID) PostUDSend(wrID uint64, buf []byte, mr *uverbs.MR, flags wr.SendFlags, ah *uverbs.AH, remoteQPN uint32) error {
	if id.destroyed.Load() {
		return ErrClosed
	}
	if ah == nil {
		return postErr("post UD send", unix.EINVAL, "no address handle")
	}
	return id.post1("post UD send", wrID, buf, mr, flags, wr.OpSend, wr.Remote{}, ah, remoteQPN)
}

// GetSendComp waits for the next completion on the ID's send CQ
// (rdma_get_send_comp): it polls, arms the CQ, polls again, and only then
// waits for the CQ's completion event, so no completion is missed and none
// is waited for twice. It returns the completion, with its failure as the
// error (a *wr.CompletionError, which matches its status's errno, and
// wr.ErrFlushed after a disconnect). ctx ends the wait, and its error
// (context.Canceled or context.DeadlineExceeded) comes back wrapped. On a synchronous ID the wait also
// watches the rdma_cm channel, and when the peer has disconnected, work
// that has not completed a second later is flushed: the QP is moved to the
// error state, so it comes back with wr.WRFlushErr instead of never.
// Such a send may still have arrived: a peer that disconnects as soon as
// it has the message can move its QP to the error state before its device
// acknowledged it (rxe on Linux 7.2 was seen to, about once in 150
// exchanges with its CPUs loaded), and the peer's answer is then the proof.
func (id *ID) GetSendComp(ctx context.Context) (wr.Completion, error) {
	return id.getComp(ctx, "get send comp", true)
}

// GetRecvComp waits for the next completion on the ID's receive CQ
// (rdma_get_recv_comp), as GetSendComp does on the send CQ.
func (id *ID) GetRecvComp(ctx context.Context) (wr.Completion, error) {
	return id.getComp(ctx, "get recv comp", false)
}

func (id *ID) getComp(ctx context.Context, op string, send bool) (wr.Completion, error) {
	s := &id.scratch
	mu, wc := &s.recvCompMu, &s.recvWC
	if send {
		mu, wc = &s.sendCompMu, &s.sendWC
	}
	id.mu.Lock()
	cq, wake, comp := id.verbs.recvCQ, id.verbs.recvWake, id.verbs.comp
	if send {
		cq, wake = id.verbs.sendCQ, id.verbs.sendWake
	}
	destroyed := id.destroyed.Load()
	id.mu.Unlock()
	if destroyed {
		return wr.Completion{}, ErrClosed
	}
	if cq == nil {
		return wr.Completion{}, postErr(op, unix.EINVAL, "the ID has no QP")
	}
	mu.Lock()
	defer mu.Unlock()
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return wr.Completion{}, wrapPost(op, err)
		}
		if n == 0 {
			if err := cq.ReqNotify(false); err != nil {
				return wr.Completion{}, wrapPost(op, err)
			}
			if n, err = cq.Poll(wc[:]); err != nil {
				return wr.Completion{}, wrapPost(op, err)
			}
		}
		if n > 0 {
			c := wc[0]
			return c, c.Err()
		}
		if wake == nil {
			return wr.Completion{}, postErr(op, unix.EINVAL, "the CQ is the program's: cm cannot wait for its events")
		}
		if err := id.waitComp(ctx, op, comp, wake); err != nil {
			return wr.Completion{}, err
		}
	}
}

// RegMsgs registers buf for sends and receives (rdma_reg_msgs) on the ID's
// PD.
func (id *ID) RegMsgs(buf []byte) (*uverbs.MR, error) {
	return id.reg("reg msgs", buf, wr.LocalWrite)
}

// RegRead registers buf for the peer's RDMA reads (rdma_reg_read).
func (id *ID) RegRead(buf []byte) (*uverbs.MR, error) {
	return id.reg("reg read", buf, wr.LocalWrite|wr.RemoteRead)
}

// RegWrite registers buf for the peer's RDMA writes (rdma_reg_write).
func (id *ID) RegWrite(buf []byte) (*uverbs.MR, error) {
	return id.reg("reg write", buf, wr.LocalWrite|wr.RemoteWrite)
}

func (id *ID) reg(op string, buf []byte, access wr.Access) (*uverbs.MR, error) {
	pd, err := id.livePD()
	if err != nil {
		return nil, err
	}
	if pd == nil {
		return nil, errf(op, unix.EINVAL, "the ID is not bound to a device")
	}
	m, err := pd.RegMR(buf, access)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return m, nil
}

// livePD returns the ID's PD, or ErrClosed once the ID is destroyed.
func (id *ID) livePD() (*uverbs.PD, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() {
		return nil, ErrClosed
	}
	return id.pd, nil
}

// DeregMR deregisters a region the Reg calls registered (rdma_dereg_mr).
func DeregMR(mr *uverbs.MR) error {
	if mr == nil {
		return nil
	}
	return mr.Close()
}

// connGoneGrace bounds the wait for completions once the connection is
// gone and the QP is in the error state: the device flushes what is
// outstanding at once, so a longer silence means nothing is.
const connGoneGrace = time.Second

// peerGoneGrace is how long after the peer's disconnect the QP is left as
// it is, before it is moved to the error state to flush what is
// outstanding (by a timer the DISCONNECTED event starts, and by a
// completion wait that is due first). A request the peer took and acknowledged just
// before disconnecting still completes successfully meanwhile: the device
// may have the acknowledgement and not yet the completion (rxe hands it
// to a deferred task, which on a loaded machine runs late). Flushing at
// once turned such requests into WR_FLUSH_ERR.
const peerGoneGrace = time.Second

// stopPeerTimer stops the flush a DISCONNECTED started, for a QP that is
// going: a server that destroys each connection when its peer leaves
// would otherwise keep every ID for the grace period and start a goroutine
// for each when it ends. The caller holds id.mu.
func (id *ID) stopPeerTimer() {
	if id.peerTimer != nil {
		id.peerTimer.Stop()
		id.peerTimer = nil
	}
}

// flushPeerGone moves the ID's QP q to the error state a grace period
// after the peer's DISCONNECTED, unless the ID or the QP is gone.
func (id *ID) flushPeerGone(q *uverbs.QP) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed.Load() || id.qp.Load() != q {
		return
	}
	id.modifyQPErr()
}

// waitComp waits for the next event of the CQ wake is for on comp, the
// device's shared completion channel (whose reader acknowledges it). On a
// synchronous ID, whose channel nobody else reads, it also watches the
// rdma_cm channel: an event there (the peer disconnected, the device went
// away) is processed and kept for the next operation or GetEvent, and,
// when it ends the connection, the QP is moved to the error state, which
// flushes the outstanding work requests. Without an error, the caller
// polls again.
func (id *ID) waitComp(ctx context.Context, op string, comp *compEvents, wake chan struct{}) error {
	id.mu.Lock()
	sync, ch, peerGone := id.sync, id.ch, id.peerGone
	id.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if id.getState() == stateDisconnected {
		q := id.qp.Load()
		var c2 context.CancelFunc
		switch {
		case q == nil || q.State() == qp.StateErr:
			wctx, c2 = context.WithTimeoutCause(wctx, connGoneGrace, errConnGone)
		case !peerGone.IsZero():
			wctx, c2 = context.WithDeadlineCause(wctx, peerGone.Add(peerGoneGrace), errFlushDue)
		default:
			c2 = func() {}
		}
		defer c2()
	}
	var cmReady chan struct{}
	var watcher chan struct{}
	if sync {
		cmReady, watcher = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watcher)
			if ch.f.waitReadable(wctx) == nil {
				close(cmReady)
				cancel()
			}
		}()
	}
	err := comp.wait(wctx, wake)
	cancel()
	if watcher != nil {
		<-watcher
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return &Error{Op: op, Err: ctx.Err()}
	}
	if errors.Is(err, uverbs.ErrClosed) {
		return ErrClosed
	}
	if errors.Is(context.Cause(wctx), errConnGone) {
		if err := id.keepAliveErr(op); err != nil {
			return err
		}
		return postErr(op, unix.ENOTCONN, "the connection is gone and no work request is outstanding")
	}
	if errors.Is(context.Cause(wctx), errFlushDue) {
		id.mu.Lock()
		err := id.modifyQPErr()
		id.mu.Unlock()
		if err != nil {
			return wrapPost(op, err)
		}
		return nil // poll for the flushed completions
	}
	select {
	case <-cmReady:
		ev, err := ch.read(ctx)
		if err != nil {
			return err
		}
		if ev != nil {
			ch.keep(ev)
		}
		return nil
	default:
	}
	return &Error{Op: op, Err: err}
}

var (
	errConnGone = errors.New("connection gone")
	errFlushDue = errors.New("the peer's disconnect is a grace period old")
)
