package uverbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/failnote"
	"github.com/rdmago/rdma/internal/pollctx"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/mlx5"
	"github.com/rdmago/rdma/provider/rxe"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// CompChannel is a completion channel (struct ibv_comp_channel): a file on
// which armed CQs report that a completion arrived. Waiting on it parks the
// goroutine in the Go runtime's network poller; no OS thread blocks.
type CompChannel struct {
	ctx  *Context
	file *os.File // non-blocking, registered with the runtime poller
	// conn is the descriptor for SyscallConn. raw is its number, which
	// GetEventDirect's wait passes to the kernel under useMu (shared), as
	// commands do: Close takes useMu before it closes the file, so the
	// number stays the channel's for the wait. directN and directErr
	// carry the wait's results (under mu).
	conn      syscall.RawConn
	raw       uintptr
	directN   int
	directErr error
	directFor time.Duration // the next sleep's bound (under mu)
	// directMiss counts, saturating at 3, the direct waits whose first
	// read found no event, less those whose did; from 2 on a wait sleeps
	// in ppoll before it reads, but for a read first every
	// directProbeEvery waits (directProbe counts them), which may bring
	// the count down again (under mu).
	directMiss, directProbe uint8
	closed                  atomic.Bool
	// useMu is held shared while the channel's descriptor number is in a
	// command (CreateCQ), exclusively by Close.
	useMu sync.RWMutex
	// pending holds the CQ handles of events read but not yet returned.
	// A read happens only when it is empty and yields at most len(buf)/8
	// events, so pendingArr always has room: waiting allocates nothing.
	mu         sync.Mutex
	pending    []uint64
	pendingArr [16]uint64
	// last is the CQ of the last event, by handle (under mu): a channel
	// serves one CQ or a few, and the registry's lock and map are then
	// skipped. Weak, as the registry holds CQs: the cache must not keep a
	// dropped CQ from releasing itself.
	lastID uint64
	last   weak.Pointer[CQ]
	buf    [16 * 8]byte
	// readOp is tryRead, made with the channel; readN and readErr are
	// its results (under mu).
	readOp  func(fd uintptr) bool
	readN   int
	readErr unix.Errno
	// dlMu orders SetReadDeadline against a read that restores deadline
	// (the one SetReadDeadline set) before it waits. moved: a context's
	// wait has moved the file's deadline since it was last set to deadline.
	dlMu     sync.Mutex
	deadline time.Time
	moved    bool
	// hasDeadline is !deadline.IsZero(), for GetEventDirect's wait to
	// skip dlMu when there is none (the common case).
	hasDeadline atomic.Bool
	// sleeper names GetEventDirect's sleep under way that may outlast a
	// slice: the sleeping thread's ID in the low 32 bits, the sleep's
	// number (sleeps, under mu) in the high; 0 when there is none. Close
	// and SetReadDeadline end that sleep with a signal to the thread
	// (kick). dlGen counts SetReadDeadline's changes; directGen is the
	// count the sleep's bound was taken at (under mu).
	sleeper   atomic.Uint64
	sleeps    uint32
	dlGen     atomic.Uint32
	directGen uint32
	// CQ.Wait's reader (cqwait.go). waitMode: a CQ has waited, so the
	// events belong to Wait. Under waitMu: waitCQs, the open CQs that
	// have waited; reading, the reader runs; stopping, it has been asked
	// to stop. waitFailed is closed, with waitErr set, when the reader
	// ended for good (the channel closed or failed).
	waitMode   atomic.Bool
	waitMu     sync.Mutex
	waitCQs    int
	reading    bool
	stopping   bool
	waitFailed chan struct{}
	waitErr    error
}

// NewCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) NewCompChannel() (*CompChannel, error) {
	resp, err := writeCmd[abi.IbUverbsCreateCompChannelResp](c, abi.IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
		new(abi.IbUverbsCreateCompChannel), "create completion channel")
	if err != nil {
		return nil, err
	}
	f, err := pollableFile(int(resp.Fd), "comp_channel")
	if err != nil {
		unix.Close(int(resp.Fd))
		return nil, &Error{Op: "create completion channel", Err: err}
	}
	ch := &CompChannel{ctx: c, file: f, waitFailed: make(chan struct{})}
	ch.readOp = ch.tryRead
	if ch.conn, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, &Error{Op: "create completion channel", Err: err}
	}
	ch.raw = uintptr(resp.Fd)
	return ch, nil
}

// pollableFile makes fd non-blocking and hands it to the runtime poller,
// which owns it from then on (closing the file closes fd).
func pollableFile(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// GetEvent waits for the next completion event (ibv_get_cq_event) and
// returns the CQ it is for. Every event must eventually be acknowledged
// with CQ.AckEvents. The wait ends early, with ctx's error, when ctx is
// done.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	if ch == nil {
		return nil, errNil
	}
	if ch.waitMode.Load() {
		return nil, errWaitOwnsChannel
	}
	return ch.getEvent(ctx, false)
}

// getEvent returns the next event, reading more when none is pending:
// through the runtime poller, or with direct on the calling thread.
func (ch *CompChannel) getEvent(ctx context.Context, direct bool) (*CQ, error) {
	// No defer: the unlock is written on each return, which keeps a
	// direct wait's path short (it is on every sleep of a blocking
	// rsocket call); nothing between Lock and Unlock can panic.
	ch.mu.Lock()
	for len(ch.pending) == 0 {
		var err error
		if direct {
			err = ch.readDirect(ctx)
		} else {
			err = ch.read(ctx)
		}
		if err != nil {
			ch.mu.Unlock()
			return nil, err
		}
	}
	h := ch.pending[0]
	ch.pending = ch.pending[1:]
	var cq *CQ
	if h == ch.lastID {
		if cq = ch.last.Value(); cq != nil && cq.dead.Load() {
			cq = nil
		}
	}
	if cq == nil {
		if cq = ch.ctx.cqByID(h); cq == nil {
			ch.mu.Unlock()
			return nil, fmt.Errorf("%w (handle %d)", errUnknownCQ, h)
		}
		ch.lastID, ch.last = h, weak.Make(cq)
	}
	cq.eventsGot.Add(1)
	// Providers that arm CQs in user space count events: the next arm
	// carries the next sequence number (mlx5's arm_sn).
	if cq.eventer != nil {
		cq.eventer.CQEvent()
	}
	ch.mu.Unlock()
	return cq, nil
}

// read reads at least one event description (struct ib_uverbs_comp_event_desc).
func (ch *CompChannel) read(ctx context.Context) error {
	if ctx.Done() == nil {
		return ch.readUntil()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := pollctx.CancelRead(ctx, ch.file)
	n, err := ch.readPolled()
	stop()
	if err != nil {
		if cerr := pollctx.ReadErr(ctx, err); cerr != nil {
			err = cerr
		}
	}
	ch.dlMu.Lock()
	ch.moved = true // after the read: its cancellation is over by then
	ch.dlMu.Unlock()
	if err != nil {
		return err
	}
	ch.setPending(n)
	return nil
}

// readPolled reads event descriptions into buf, waiting in the runtime
// poller while there are none, with the file's read deadline, and returns
// ErrClosed once the channel is closed, File.Read's error in an Error
// otherwise. It is File.Read with a raw read(2): File.Read's system call
// goes through the runtime's entersyscall, which wakes the runtime's
// monitor (sysmon) whenever it sleeps, and it sleeps whenever the
// process's goroutines all wait, as a blocked rsocket call's does: every
// wake-up then cost a second thread's switch in and out, about 14,000
// instructions of a 64-byte rsocket round trip (docs/performance.md).
// A read of a completion channel never blocks (the file is
// non-blocking), so the raw call holds the thread no longer than the copy.
// Under mu.
func (ch *CompChannel) readPolled() (int, error) {
	ch.readN, ch.readErr = 0, 0
	var err error
	switch perr := ch.conn.Read(ch.readOp); {
	case perr != nil && ch.closed.Load():
		// The poller's "use of closed file", which File.Read turns
		// into os.ErrClosed.
		return 0, ErrClosed
	case perr != nil:
		err = &os.PathError{Op: "read", Path: ch.file.Name(), Err: perr}
	case ch.readErr != 0:
		err = &os.PathError{Op: "read", Path: ch.file.Name(), Err: ch.readErr}
	case ch.readN == 0:
		err = io.EOF
	default:
		return ch.readN, nil
	}
	return 0, &Error{Op: "get CQ event", Err: err}
}

// tryRead is readPolled's one non-blocking read, false while there is
// nothing to read.
func (ch *CompChannel) tryRead(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&ch.buf[0])), uintptr(len(ch.buf)))
		switch e {
		case 0:
			ch.readN = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		ch.readErr = e
		return true
	}
}

// readUntil is read for a context that is never done: the wait ends at
// the deadline SetReadDeadline set. A context's wait moves the file's
// deadline, so it is restored first if one did, under dlMu so that a
// SetReadDeadline made meanwhile is not lost.
func (ch *CompChannel) readUntil() error {
	ch.dlMu.Lock()
	if ch.moved {
		ch.file.SetReadDeadline(ch.deadline)
		ch.moved = false
	}
	ch.dlMu.Unlock()
	n, err := ch.readPolled()
	if err != nil {
		return err
	}
	ch.setPending(n)
	return nil
}

// SetReadDeadline bounds GetEvent's waits whose context is never done
// (context.Background): a wait under way when t passes, or when t is set
// in the past, ends with an error matching os.ErrDeadlineExceeded; the zero
// time means no deadline. It works as os.File's does and, unlike a context
// with a deadline, allocates nothing, for programs that wait with deadlines
// that move on every call (net.Conn's). GetEventDirect honours it too: it
// sleeps until the deadline at most, and a deadline set or moved while it
// sleeps ends that sleep (a signal to its thread). Waits with a
// context that can be done take their bound from the context instead.
func (ch *CompChannel) SetReadDeadline(t time.Time) error {
	if ch == nil {
		return errNil
	}
	ch.dlMu.Lock()
	if t == ch.deadline && !ch.moved && !ch.closed.Load() {
		// Unchanged: a loop that sets its deadline before every wait
		// pays for the runtime's timer only when it moves.
		ch.dlMu.Unlock()
		return nil
	}
	ch.deadline, ch.moved = t, false
	ch.hasDeadline.Store(!t.IsZero())
	ch.dlGen.Add(1)
	err := ch.file.SetReadDeadline(t)
	ch.dlMu.Unlock()
	// After dlGen: a direct sleep bounded by the old deadline, or by none,
	// is ended; one that begins after takes the new one.
	ch.kick()
	if err != nil {
		if errors.Is(err, os.ErrClosed) {
			return ErrClosed
		}
		return &Error{Op: "set deadline", Err: err}
	}
	return nil
}

// setPending records the n bytes of event descriptions in buf (under mu).
func (ch *CompChannel) setPending(n int) {
	ch.pending = parseCompEvents(ch.buf[:n], &ch.pendingArr)
}

// parseCompEvents decodes the completion event descriptions (struct
// ib_uverbs_comp_event_desc: the CQ's user handle, 8 bytes) in b into out;
// a trailing partial one is ignored.
func parseCompEvents(b []byte, out *[16]uint64) []uint64 {
	hs := out[:0]
	for i := 0; i+8 <= len(b) && len(hs) < len(out); i += 8 {
		hs = append(hs, binary.NativeEndian.Uint64(b[i:]))
	}
	return hs
}

// directSlice bounds each of GetEventDirect's sleeps in the kernel whose
// end nothing else brings: a context that can be done is looked at
// between them, and with GODEBUG=asyncpreemptoff=1 the scheduler sends no
// signal when it wants the thread back (GC's stop-the-world).
const directSlice = time.Millisecond

// GetEventDirect is GetEvent that waits in the kernel on the calling
// goroutine's thread, as libibverbs' blocking ibv_get_cq_event does,
// instead of parking the goroutine in the runtime's poller.
//
// The goroutine keeps its P while it waits, as a busy-polling loop would,
// but sleeps: the wake-up is one return from poll(2) and a read, with no
// trip through the scheduler, no other thread woken and no poller. That
// halves the system calls and context switches of an event-driven latency
// loop (docs/performance.md). The scheduler still takes the thread back:
// its preemption signal (SIGURG) interrupts the sleep, as it does when a
// goroutine has run for 10 ms or the GC stops the world.
//
// With a context that is never done (context.Background) and no deadline,
// the sleep has no bound, as libibverbs' is, and a kernel timer costs
// nothing; a deadline bounds it with the kernel's timer. Close and
// SetReadDeadline end such a sleep with the same signal, sent to the
// sleeping thread. A context that can be done is looked at
// between sleeps of a millisecond at most, as is everything with
// GODEBUG=asyncpreemptoff=1 (the runtime then sends no signal). A program
// must not ignore SIGURG (signal.Ignore), which the runtime needs too.
//
// Use it from a goroutine dedicated to a latency-critical channel, with
// GOMAXPROCS above the number of such goroutines: other goroutines of its
// P wait until the runtime preempts the sleep. Use GetEvent anywhere else.
func (ch *CompChannel) GetEventDirect(ctx context.Context) (*CQ, error) {
	if ch == nil {
		return nil, errNil
	}
	if ch.waitMode.Load() {
		return nil, errWaitOwnsChannel
	}
	return ch.getEvent(ctx, true)
}

// readDirect is read for GetEventDirect (under mu): it reads at least one
// event description, waiting on this thread. A context that is never done
// leaves the bound to SetReadDeadline's deadline, as for GetEvent: with
// none the sleep has no bound (directFor < 0), else it ends at the
// deadline (in slices with GODEBUG=asyncpreemptoff=1). A context that can
// be done is looked at between slices.
func (ch *CompChannel) readDirect(ctx context.Context) error {
	for {
		ch.directFor = directSlice
		if ctx.Done() == nil {
			// context.Background and the like: nothing to ask them, and
			// the deadline's lock only when one is set. dlGen first: a
			// deadline set after it ends the sleep (kick).
			ch.directGen = ch.dlGen.Load()
			if !ch.hasDeadline.Load() {
				if directUnbounded {
					ch.directFor = -1
				}
			} else {
				ch.dlMu.Lock()
				dl := ch.deadline
				ch.dlMu.Unlock()
				if !dl.IsZero() {
					left := time.Until(dl)
					if left <= 0 {
						return &Error{Op: "get CQ event", Err: os.ErrDeadlineExceeded}
					}
					if directUnbounded || left < ch.directFor {
						ch.directFor = left
					}
				}
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		// The descriptor is held as a command holds it (use), not with
		// RawConn.Control, which costs about a hundred instructions a
		// wait in its reference counting. Close ends the sleep under
		// way (kick) and waits for it.
		ch.useMu.RLock()
		if ch.closed.Load() {
			ch.useMu.RUnlock()
			return ErrClosed
		}
		ch.directN, ch.directErr = 0, nil
		ch.directRead(ch.raw)
		ch.useMu.RUnlock()
		switch err := ch.directErr; {
		case err == unix.EINTR || (err == nil && ch.directN == 0):
			// Interrupted, or a slice went by: let the scheduler run what
			// asked for the thread, then look at ctx, the deadline and
			// Close again.
			runtime.Gosched()
		case err != nil:
			return &Error{Op: "get CQ event", Err: err}
		default:
			ch.setPending(ch.directN)
			return nil
		}
	}
}

// SyscallConn gives the channel's descriptor to a program that polls it
// itself (syscall.Conn, as os.File does): it is readable while events are
// queued, stays non-blocking and belongs to the channel. After Close the
// channel answers ErrClosed.
func (ch *CompChannel) SyscallConn() (syscall.RawConn, error) {
	if ch.closed.Load() {
		return nil, ErrClosed
	}
	return ch.conn, nil
}

// fd is the channel's descriptor, -1 once it is closed.
func (ch *CompChannel) fd() int {
	fd := -1
	if ch.conn.Control(func(f uintptr) { fd = int(f) }) != nil {
		return -1
	}
	return fd
}

// use holds the channel open for a command that names its descriptor.
func (ch *CompChannel) use() error {
	ch.useMu.RLock()
	if ch.closed.Load() {
		ch.useMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (ch *CompChannel) done() { ch.useMu.RUnlock() }

// Close destroys the channel. CQs using it must be closed first (EBUSY).
// A GetEventDirect under way ends with ErrClosed; Close ends its sleep in
// the kernel (a signal to its thread) and waits for it first.
// A channel dropped without Close is closed once it is unreachable and no
// CQ uses it.
func (ch *CompChannel) Close() error {
	if ch == nil {
		return errNil
	}
	// closed first, then the kick, then useMu: a direct sleep holds
	// useMu (shared) and sees closed once woken, or before it sleeps.
	ch.closed.Store(true)
	ch.kick()
	ch.useMu.Lock()
	//lint:ignore SA2001 taking the lock waits for the holders of useMu to let go
	ch.useMu.Unlock()
	err := ch.file.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// CQ is a completion queue (struct ibv_cq). Poll, Wait and ReqNotify may
// be called from several goroutines at once (unless the CQ was made
// SingleThreaded), and Close waits for those under way before the queue
// is unmapped.
type CQ struct {
	// The object's rw lets Poll run without blocking other pollers
	// while Close waits for them.
	*object
	prov provider.CQ
	// rxe and mlx5: prov as its concrete type, as in QP.
	rxe     *rxe.CQ
	mlx5    *mlx5.CQ
	channel *CompChannel
	// notesFailed: the provider calls registry.noteFailed for each failed
	// completion as it polls (internal/failnote).
	notesFailed bool
	// eventer is prov if it counts its events (mlx5's arm sequence).
	eventer cqEventer
	cqe     int
	single  bool // SingleThreaded: Poll skips rw
	// soft holds completions the library made itself (receives posted to
	// a QP in the error state); Poll returns them after the device's.
	softMu sync.Mutex
	soft   []wr.Completion
	softN  atomic.Int32
	// ahead holds completions the keepalive polled (harvest), under
	// softMu; Poll returns them before the device's.
	ahead  []wr.Completion
	aheadN atomic.Int32
	// probing counts keepalive probes outstanding on QPs that send to this
	// CQ; Poll looks for their completions only while it is not zero.
	probing    atomic.Int32
	probeMu    sync.Mutex
	probeQPs   map[uint32]*probes
	eventsGot  atomic.Uint32
	eventsAckd atomic.Uint32
	// w is CQ.Wait's state, for a CQ with a channel (cqwait.go).
	w *waiter
}

// CQAttr configures a completion queue.
type CQAttr struct {
	// CQE is the minimum number of entries; the device may give more.
	CQE int
	// Channel, if set, receives an event when the CQ is armed with
	// ReqNotify and a completion arrives.
	Channel *CompChannel
	// CompVector selects the completion vector (interrupt) for events,
	// below Context.NumCompVectors.
	CompVector int
	// SingleThreaded promises that Poll is never called by two goroutines
	// at once, nor concurrently with Close: polling then takes no lock.
	SingleThreaded bool
	// Timestamps makes an extended CQ whose completions carry the
	// device's completion timestamp in wr.Completion.Timestamp
	// (ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
	// Devices have them where DeviceAttr.CompletionTimestampMask is not
	// zero, which is how a program probes; elsewhere CreateCQ fails with
	// an error that matches unix.EOPNOTSUPP and errors.ErrUnsupported.
	// rxe has none: its provider refuses before the kernel, as
	// rdma-core's does (the kernel's rxe would refuse too).
	Timestamps bool
}

// CreateCQ creates a completion queue (ibv_create_cq, or ibv_create_cq_ex
// for the extended attributes: Timestamps).
func (c *Context) CreateCQ(attr CQAttr) (*CQ, error) { return c.createCQ(attr, false) }

// createCQ is CreateCQ. kernelOnly sends the kernel the create flags attr
// asks for even when the provider cannot honour them, over a plain CQ of
// its own, so that a test learns what the kernel itself answers.
func (c *Context) createCQ(attr CQAttr, kernelOnly bool) (*CQ, error) {
	if attr.CQE < 1 || attr.CQE > math.MaxInt32 {
		return nil, &Error{Op: "create CQ", Err: fmt.Errorf("CQE %d, not in 1..2^31-1: %w", attr.CQE, unix.EINVAL)}
	}
	if attr.CompVector < 0 || (c.numCompVectors > 0 && attr.CompVector >= c.numCompVectors) {
		return nil, &Error{Op: "create CQ", Err: fmt.Errorf("completion vector %d, the device has %d: %w", attr.CompVector, c.numCompVectors, unix.EINVAL)}
	}
	if attr.Channel != nil && attr.Channel.ctx != c {
		return nil, &Error{Op: "create CQ", Err: fmt.Errorf("completion channel of another context: %w", unix.EINVAL)}
	}
	if attr.Channel != nil {
		// The channel's descriptor number goes to the kernel: hold the
		// channel open until the command is done.
		if err := attr.Channel.use(); err != nil {
			return nil, &Error{Op: "create CQ", Err: fmt.Errorf("completion channel: %w", err)}
		}
		defer attr.Channel.done()
	}
	pc, err := c.providerContext("create CQ")
	if err != nil {
		return nil, err
	}
	// The kernel's create flags (ib_uverbs_ex_create_cq_flags), as
	// libibverbs' ibv_icmd_create_cq_ex derives them from the wc_flags.
	var flags uint32
	var b provider.Builder[provider.CQ]
	if attr.Timestamps {
		flags |= abi.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION
		px, ok := pc.(provider.CQExContext)
		switch {
		case ok:
			b, err = px.NewCQEx(provider.CQAttr{CQE: attr.CQE, Timestamp: true})
		case kernelOnly:
			b, err = pc.NewCQ(attr.CQE)
		default:
			return nil, &Error{Op: "create CQ", Err: fmt.Errorf("the %s provider has no completion timestamps: %w", c.dev.Driver, unix.EOPNOTSUPP)}
		}
	} else {
		b, err = pc.NewCQ(attr.CQE)
	}
	if err != nil {
		return nil, wrapErr("create CQ", err)
	}
	cq := &CQ{channel: attr.Channel}
	if attr.Channel != nil {
		cq.w = &waiter{wake: make(chan struct{}, 1)}
	}
	id := c.nextID.Add(1)
	var respCQE uint32
	cmd := newCommand(abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	h := cmd.idrNew(abi.UVERBS_ATTR_CREATE_CQ_HANDLE)
	kernelCQE := uint32(attr.CQE)
	if s, ok := b.(provider.CQESizer); ok {
		kernelCQE = s.KernelCQE()
	}
	cmd.u32In(abi.UVERBS_ATTR_CREATE_CQ_CQE, kernelCQE)
	cmd.constIn(abi.UVERBS_ATTR_CREATE_CQ_USER_HANDLE, id)
	cmd.u32In(abi.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, uint32(attr.CompVector))
	if flags != 0 {
		// Mandatory, as in libibverbs: a kernel that does not know the
		// attribute fails the command instead of making a CQ without
		// what was asked for.
		cmd.u32In(abi.UVERBS_ATTR_CREATE_CQ_FLAGS, flags)
	}
	if attr.Channel != nil {
		cmd.fdIn(abi.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, attr.Channel.fd())
	}
	if c.asyncFD >= 0 {
		cmd.fdIn(abi.UVERBS_ATTR_CREATE_CQ_EVENT_FD, c.asyncFD)
	}
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, unsafe.Pointer(&respCQE), 4)
	if cq.object, err = c.createObject(cmd, h, b, kindCQ, id, "create CQ"); err != nil {
		return nil, err
	}
	if attr.Channel != nil {
		cq.deps = append(cq.deps, attr.Channel)
		// Not cq itself: the object must not keep its CQ reachable.
		ch, w := attr.Channel, cq.w
		cq.onFinish = func() { ch.removeWaiter(w) }
	}
	cq.cqe = int(respCQE)
	cq.single = attr.SingleThreaded
	if err := finishCreate(&cq.prov, cq.object, b, provider.Created{Handle: cq.handle, CQE: respCQE}, "create CQ", cq.single); err != nil {
		return nil, err
	}
	cq.rxe, cq.mlx5 = concrete[*rxe.CQ, *mlx5.CQ](cq.prov)
	cq.eventer, _ = cq.prov.(cqEventer)
	// The module's providers note failed QPs as they decode; pollDevice
	// looks for them itself only in other providers' completions.
	cq.notesFailed = failnote.Install(cq.prov, c.reg.noteFailed)
	if err := registered(registerCQ(c, cq), cq.object, "create CQ"); err != nil {
		return nil, err
	}
	return cq, nil
}

// cqEventer is a provider's CQ that counts the completion events read for
// it: its next arm carries the next sequence number (mlx5's arm_sn).
type cqEventer interface{ CQEvent() }

// CQE returns the number of entries the device allocated.
func (cq *CQ) CQE() int { return cq.cqe }

// Poll moves up to len(wc) completions into wc (ibv_poll_cq) and returns
// how many. It never blocks and does not allocate. A CQ whose completions
// overflowed it reports ErrCQOverrun once it is empty: size a CQ for every
// completion that can be outstanding at once.
func (cq *CQ) Poll(wc []wr.Completion) (int, error) {
	if cq == nil {
		return 0, errNil
	}
	var n int
	if cq.single {
		if cq.dead.Load() {
			return 0, ErrClosed
		}
		n = cq.pollDevice(wc)
	} else {
		cq.rw.RLock()
		if cq.dead.Load() {
			cq.rw.RUnlock()
			return 0, ErrClosed
		}
		if cq.aheadN.Load() > 0 {
			n = cq.takeAhead(wc)
			n += cq.pollDevice(wc[n:])
		} else {
			n = cq.pollDevice(wc)
		}
		cq.rw.RUnlock()
	}
	if n < len(wc) && cq.softN.Load() > 0 {
		n += cq.takeSoft(wc[n:])
	}
	if n == 0 && len(wc) > 0 && cq.overrun.Load() {
		return 0, ErrCQOverrun
	}
	return n, nil
}

// Pending reports whether Poll may find something now: a completion, or
// an error to report (the CQ closed or overrun). It takes nothing and never
// blocks. On rxe it reads the ring's two indices, a fraction of the cost of
// a Poll that finds the ring empty, so that a loop that polls until a
// condition holds (rsocket's wait) can skip the Poll while it says false;
// with other providers it is always true.
func (cq *CQ) Pending() bool {
	if cq == nil || cq.rxe == nil || cq.softN.Load() > 0 || cq.aheadN.Load() > 0 || cq.overrun.Load() {
		return true
	}
	if cq.single {
		return cq.dead.Load() || cq.rxe.Pending()
	}
	// As Poll: Close waits for the look before the ring is unmapped.
	cq.rw.RLock()
	p := cq.dead.Load() || cq.rxe.Pending()
	cq.rw.RUnlock()
	return p
}

// pollDevice moves the provider's completions into wc, noting failed QPs
// and taking the keepalive's probes out. Room a probe leaves is filled from
// the device again, so that fewer than len(wc) still means the CQ is
// empty: a program that stops polling on a short count and waits for the
// next event must not leave a completion behind a probe.
//
// The common case, a provider of this module's that notes failed QPs
// itself, with no probe out, is one call to it: none of the loop's
// bookkeeping, which callgrind counted at about 40 instructions a poll.
// probing is read after that call, never before: a probe is counted
// before it is posted, so one whose completion the call returned is
// counted by then, while one posted after a look before the call could
// complete and be returned to the caller as its own.
func (cq *CQ) pollDevice(wc []wr.Completion) int {
	if !cq.notesFailed || cq.rxe == nil && cq.mlx5 == nil {
		return cq.pollLoop(wc, -1)
	}
	var m int
	if cq.rxe != nil {
		m = cq.rxe.Poll(wc)
	} else {
		m = cq.mlx5.Poll(wc)
	}
	if cq.probing.Load() == 0 {
		return m
	}
	return cq.pollLoop(wc, m)
}

// pollLoop is pollDevice for the other cases. A polled count of zero or
// more is what pollDevice's own call already moved into wc.
func (cq *CQ) pollLoop(wc []wr.Completion, polled int) int {
	n := uint(0) // unsigned: the compiler then proves wc[n:] in bounds
	for n < uint(len(wc)) {
		rest := wc[n:]
		m := polled
		polled = -1
		if m < 0 {
			switch {
			case cq.rxe != nil:
				m = cq.rxe.Poll(rest)
			case cq.mlx5 != nil:
				m = cq.mlx5.Poll(rest)
			default:
				m = cq.prov.Poll(rest)
			}
		}
		done := rest[:m] // the one bounds check: a provider's count, not trusted
		if !cq.notesFailed {
			for i := range done {
				if done[i].Status != wr.Success {
					cq.ctx.reg.noteFailed(done[i].QPNum)
				}
			}
		}
		got := m
		if cq.probing.Load() > 0 {
			got = cq.dropProbes(done)
		}
		n += uint(got)
		if got == m {
			break // nothing taken out: the device had no more, or wc is full
		}
	}
	return int(n)
}

// takeSoft moves the library's own completions into wc.
func (cq *CQ) takeSoft(wc []wr.Completion) int { return cq.take(&cq.soft, &cq.softN, wc) }

// take moves completions from the front of q, one of the CQ's queues under
// softMu whose length n mirrors, into wc.
func (cq *CQ) take(q *[]wr.Completion, n *atomic.Int32, wc []wr.Completion) int {
	cq.softMu.Lock()
	defer cq.softMu.Unlock()
	k := copy(wc, *q)
	*q = (*q)[:copy(*q, (*q)[k:])]
	n.Store(int32(len(*q)))
	return k
}

// noteFailed records that an RC QP showed an error completion: the device
// has moved it to the error state, where receives are flushed by the
// library (QP.PostRecv). It is the registry's, not the Context's, so that
// a provider's CQ holding it (internal/failnote) does not keep the
// Context reachable from what releases a dropped one.
func (r *registry) noteFailed(qpn uint32) {
	if q := r.qpByNum(qpn); q != nil && q.typ == qp.RC {
		q.failed.Store(true)
	}
}

// ErrCQOverrun is Poll's error for a CQ that completions overflowed: the
// device reported a CQ error (IBV_EVENT_CQ_ERR, which rxe and mlx5 raise
// when a completion does not fit), so some were lost. Poll returns the
// completions the CQ still holds first, then this error each time it
// finds the queue empty. It wraps EOVERFLOW.
var ErrCQOverrun = &Error{Op: "poll CQ", Err: fmt.Errorf("completions overflowed the CQ and were lost: %w", unix.EOVERFLOW)}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion, or the
// next solicited one, raises an event on the CQ's completion channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq == nil {
		return errNil
	}
	if err := cq.use(); err != nil {
		return err
	}
	if cq.channel == nil {
		cq.done()
		return &Error{Op: "req notify CQ", Err: fmt.Errorf("CQ has no completion channel: %w", unix.EINVAL)}
	}
	// As PostSend: rxe's arm called by its type, and no defer; a blocking
	// call arms before each sleep. use is what lets rxe write the command
	// without its own guard on the file (provider.Kernel.Doorbell): the
	// context's Close releases the CQ, which waits for done, before it
	// closes the file.
	var err error
	if cq.rxe != nil {
		err = cq.rxe.ReqNotify(solicitedOnly)
	} else {
		err = cq.prov.ReqNotify(solicitedOnly)
	}
	cq.done()
	if err != nil {
		return wrapErr("req notify CQ", err)
	}
	return nil
}

// AckEvents acknowledges n events returned by CompChannel.GetEvent for this
// CQ (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) { cq.eventsAckd.Add(uint32(n)) }

// Close destroys the CQ (ibv_destroy_cq). Queue pairs using it must be
// closed first (the kernel answers EBUSY).
func (cq *CQ) Close() error {
	if cq == nil {
		return errNil
	}
	return cq.close()
}

// asyncPreemptOff reads GODEBUG as the runtime does: comma-separated
// name=value settings, the last one of a name winning.
func asyncPreemptOff(godebug string) bool {
	off := false
	for _, kv := range strings.Split(godebug, ",") {
		if v, ok := strings.CutPrefix(kv, "asyncpreemptoff="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				off = n != 0
			}
		}
	}
	return off
}
