// Package provider defines what the verbs core (package uverbs) asks of a
// device-specific provider, and what it offers it in return.
//
// The core owns every kernel object: it sends the create and destroy
// commands, keeps handles and closes them. A provider owns the data path:
// the private data ("udata") each create command carries for its driver, the
// queues those commands set up, and posting, polling and doorbells on them.
//
// The interface fits both kinds of device rdmago supports:
//
//   - rxe (soft-RoCE): the kernel allocates the queues; the create responses
//     carry mmap offsets (struct mminfo) that the provider maps through
//     Kernel.Mmap, and the send doorbell is a write(2) of a zero-length
//     IB_USER_VERBS_CMD_POST_SEND (Kernel.Write).
//   - mlx5 (ConnectX): the provider allocates queue buffers and doorbell
//     records itself, passes their addresses in the create requests, and
//     rings doorbells by storing to UAR pages it maps from the command file.
//
// Each creation goes through a Builder: the core asks it for the udata to
// send, runs the command, then calls Finish with the kernel's answer (or
// Abort if the command failed), and Finish returns the provider's object.
//
// The module's own providers (packages rxe and mlx5) serve their devices
// without a program importing them. A program that carries a provider of
// its own, for a device the module does not support or as a wrapper of one
// it does, registers it with uverbs.RegisterProvider. The core asks for the
// interfaces Driver, Context, CQ, QP and SRQ only, and probes for the
// optional ones (CapsSizer, SendBatcher, Drainer, ...): a provider
// implements those it can use. docs/providers.md has the rules a provider
// keeps, and hack/extprovider one written in a module of its own.
package provider

import (
	"errors"

	"github.com/rdmago/rdma/internal/seal"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Kernel is what a provider may use of an open device directly.
type Kernel interface {
	// Mmap maps length bytes of the uverbs command file at offset, shared.
	Mmap(offset int64, length int, prot int) ([]byte, error)
	// Munmap undoes Mmap.
	Munmap(b []byte) error
	// Write sends one legacy write command, header included, with write(2).
	// It is the doorbell of providers whose doorbell is a system call, and
	// their CQ arming. It is for commands the kernel runs without sleeping
	// only: it is issued as a raw system call, which keeps the calling
	// thread's P for the duration (see docs/performance.md).
	Write(b []byte) error
	// Doorbell is Write for a QP's send doorbell, without Write's guard
	// against a closed command file: the provider rings it only for a QP
	// that is not stopped, under the send queue's lock (or from the one
	// goroutine a single-threaded QP allows), and the core stops every QP
	// (QP.Stop, QP.Close) before it closes the file. The guard would be a
	// second lock on every post. A CQ's arming may use it too: the core
	// calls CQ.ReqNotify only while it holds the CQ open, and it releases
	// every CQ before it closes the file.
	Doorbell(b []byte) error
	// Invoke calls one driver-specific method of the ioctl interface
	// (RDMA_VERBS_IOCTL): object and method are ids in the driver's
	// namespace (mlx5's MLX5_IB_OBJECT_UAR and MLX5_IB_METHOD_UAR_OBJ_ALLOC,
	// for instance), attrs its attributes in order, each mandatory, so a
	// kernel that does not know one fails the call with EPROTONOSUPPORT
	// instead of ignoring it. On success the kernel has filled every
	// AttrPtrOut buffer and the Value of every AttrIDRNew attribute holds
	// the new object's handle. It is for commands outside the data path
	// (it may sleep in the kernel, and it allocates).
	Invoke(object, method uint16, attrs []Attr) error
}

// AttrKind says how the kernel reads one attribute of a driver method
// (the attribute types of the kernel's uverbs_attr_spec).
type AttrKind uint8

// Attribute kinds.
const (
	// AttrConstIn: Value, sent inline as 8 bytes (UVERBS_ATTR_CONST_IN and
	// other inline values).
	AttrConstIn AttrKind = iota
	// AttrPtrIn: In, bytes the kernel reads (UVERBS_ATTR_PTR_IN).
	AttrPtrIn
	// AttrPtrOut: Out, bytes the kernel writes (UVERBS_ATTR_PTR_OUT).
	AttrPtrOut
	// AttrIDR: Value is the handle of an existing object
	// (UVERBS_ATTR_IDR with read, write or destroy access).
	AttrIDR
	// AttrIDRNew: the method creates an object (UVERBS_ATTR_IDR with new
	// access); Value receives its handle.
	AttrIDRNew
)

// Attr is one attribute of a driver method call.
type Attr struct {
	ID    uint16 // the attribute id in the method's namespace
	Kind  AttrKind
	Value uint64 // AttrConstIn, AttrIDR, AttrIDRNew
	In    []byte // AttrPtrIn; not empty
	Out   []byte // AttrPtrOut; not empty
}

// Driver is one provider, registered for a kernel driver id.
type Driver interface {
	// Name is the provider's name, as rdma-core names it ("rxe", "mlx5").
	Name() string
	// FormatFWVer renders the kernel's raw firmware version as the
	// rdma-core provider does.
	FormatFWVer(raw uint64) string
	// NewContext returns a builder for the provider's per-context state.
	NewContext(k Kernel) (Builder[Context], error)
}

// Created is what the kernel answered to a create command.
type Created struct {
	Handle uint32 // the object's handle in the context
	// For CQs: the number of entries the kernel allocated.
	CQE uint32
	// For QPs: the QP number and the capabilities the kernel granted.
	QPNum uint32
	Caps  qp.Caps
	// For SRQs: the SRQ number (XRC) and the granted sizes.
	SRQNum uint32
}

// Builder carries one object through its creation.
type Builder[T any] interface {
	// Udata returns the driver data to send with the create command and the
	// buffer the kernel writes the driver response into. Either may be nil.
	Udata() (in, out []byte)
	// Finish makes the provider's object once the kernel has created it and
	// written the response into the out buffer.
	Finish(c Created) (T, error)
	// Abort releases what the builder allocated when creation failed.
	Abort()
}

// CapsSizer is implemented by QP builders whose provider sizes the
// queues itself and tells the kernel what it computed: the core sends
// KernelCaps instead of the user's caps in the create command, as libmlx5
// writes its inline-data size into the attributes before libibverbs sends
// them.
type CapsSizer interface {
	KernelCaps(requested qp.Caps) qp.Caps
}

// CQESizer is implemented by CQ builders whose provider sizes the ring
// itself: the core asks the kernel for KernelCQE entries instead of the
// user's count, as libmlx5 asks for its power-of-two ring less one. The
// kernel rounds both to the same ring; the command then carries what
// rdma-core's would.
type CQESizer interface {
	KernelCQE() uint32
}

// Context is the provider's per-device-context state.
type Context interface {
	NewCQ(cqe int) (Builder[CQ], error)
	NewQP(attr QPInitAttr) (Builder[QP], error)
	NewSRQ(attr SRQInitAttr) (Builder[SRQ], error)
	NewAH(attr qp.AHAttr) (Builder[AH], error)
	Close() error
}

// CPUBound is implemented by the contexts of providers whose device is
// software in the kernel (rxe): the kernel creates and modifies their
// CQs, QPs, SRQs and AHs with CPU work alone, waiting on no hardware,
// peer or I/O. The core sends those commands as raw system calls, which
// keep the calling goroutine's P, as the runtime does for its own mmap:
// with the ordinary call, each one long enough to span the runtime
// monitor's 20 µs tick made the monitor hand the P to another thread,
// and kept it waking every 20 µs (docs/performance.md). A hardware
// provider's commands go to firmware that may take milliseconds, so they
// keep the ordinary call; destroys and memory registration always do.
type CPUBound interface {
	CPUBound()
}

// CQAttr is what an extended CQ (ibv_create_cq_ex) asks of the provider
// beyond its size: the completion fields that change its data path.
type CQAttr struct {
	CQE int
	// Timestamp: every completion carries the device's completion
	// timestamp (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP), in
	// wr.Completion.Timestamp.
	Timestamp bool
}

// CQExContext is implemented by the contexts of providers that make
// extended CQs. The core asks a context without it for no more than
// NewCQ makes, and refuses the rest with EOPNOTSUPP, as rdma-core's
// providers refuse the wc_flags they lack.
type CQExContext interface {
	NewCQEx(attr CQAttr) (Builder[CQ], error)
}

// Clock is implemented by the contexts of providers that read the
// device's free-running clock, the one completion timestamps count.
type Clock interface {
	// ReadClock returns the clock's current value in cycles (the raw
	// clock of ibv_query_rt_values_ex).
	ReadClock() (uint64, error)
	// TimestampNS converts a completion timestamp into nanoseconds since
	// the Unix epoch, with the parameters the kernel keeps for the clock
	// (mlx5dv_get_clock_info and mlx5dv_ts_to_ns).
	TimestampNS(ts uint64) (uint64, error)
}

// CQ is a completion queue's data path.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	// It never blocks and never allocates.
	Poll(wc []wr.Completion) int
	// ReqNotify arms the CQ: the next completion (the next solicited one,
	// with solicitedOnly) raises an event on its completion channel.
	ReqNotify(solicitedOnly bool) error
	// Close releases the provider's mappings and buffers. The core calls it
	// after the kernel object is destroyed.
	Close() error
}

// QPInitAttr is what the provider needs to know to lay out a queue pair.
type QPInitAttr struct {
	// Type is also qp.XRCSend (a send queue, no receive queue) or
	// qp.XRCRecv (no queues: its messages land in XRC SRQs); a provider
	// without XRC refuses both with unix.EOPNOTSUPP.
	Type   qp.Type
	Caps   qp.Caps
	HasSRQ bool // receives come from a shared receive queue: no RQ
	// SRQ is the provider's SRQ the receives come from when HasSRQ, else
	// nil. A provider whose receive completions name the QP rather than
	// the SRQ (mlx5 with CQE version 1) finds the SRQ's WQE through it.
	SRQ SRQ
	// SignalAll: every send work request completes with a completion,
	// whatever its Signaled flag (sq_sig_all).
	SignalAll bool
	// CreateFlags are the caller's creation flags (enum
	// ib_uverbs_qp_create_flags): a provider refuses, with EOPNOTSUPP,
	// those it cannot honour.
	CreateFlags uint32
}

// SingleThreader is implemented by the QPs and CQs of providers that lock
// their queues. uverbs calls SetSingleThreaded once, after creation and
// before anyone else holds the object, when the user promised to post to
// each queue (or poll the CQ) from one goroutine at a time, as a thread
// domain (ibv_alloc_td) promises rdma-core's providers: the queue then
// takes no lock.
type SingleThreader interface {
	SetSingleThreaded()
}

// QP is a queue pair's data path.
type QP interface {
	// PostSend posts wrs in order and rings the doorbell once. It returns
	// the number posted; when that is less than len(wrs), err says why
	// wrs[n] was refused (as ibv_post_send's bad_wr does), and nothing of
	// wrs[n] or later reached the queue.
	PostSend(wrs []wr.SendWR) (int, error)
	// PostRecv posts receive requests, with the same contract.
	PostRecv(wrs []wr.RecvWR) (int, error)
	// Stop makes every later post return ErrStopped, and returns once no
	// post is under way: the core calls it before it destroys the kernel
	// object, so no post rings a doorbell with a destroyed QP's handle or
	// touches the rings after they are unmapped, without a lock of its
	// own around every post. Resume undoes it when the destroy failed.
	Stop()
	Resume()
	// Close stops the QP and releases the provider's mappings and buffers.
	Close() error
}

// SendBatcher is implemented by the QPs of providers that can write send
// work requests into the queue one at a time and publish them together
// later, as rdma-core's ibv_wr_start, ibv_wr_* and ibv_wr_complete do.
//
// BeginBatch takes the send queue's lock (ErrStopped, and no lock, for a
// stopped QP). Each AddToBatch checks one request and writes it to the
// queue unpublished, as the batch's next; the device sees none of them
// until EndBatch publishes them all and rings the doorbell once. A request
// refused by AddToBatch leaves the queue as it was before that call.
// AbortBatch instead forgets every request of the batch, as if none had
// been written. EndBatch and AbortBatch release the lock.
type SendBatcher interface {
	BeginBatch() error
	AddToBatch(w *wr.SendWR) error
	EndBatch() (int, error)
	AbortBatch()
}

// QueueSizer is implemented by the QPs of providers that size their
// queues themselves, as libmlx5 does: a send ring is a power of two in
// bytes and often holds more requests, and more inline data, than were
// asked for. The provider lets the user post all of it, and the core
// reports these sizes as the QP's caps instead of the kernel's response,
// as ibv_create_qp reports what libmlx5 writes back into its attributes.
type QueueSizer interface {
	GrantedCaps() qp.Caps
}

// ErrStopped is what a stopped QP's posts return (QP.Stop); the core
// reports it as its own closed-object error.
var ErrStopped = errors.New("provider: the queue pair is stopped")

// SRQInitAttr sizes a shared receive queue.
type SRQInitAttr struct {
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
	// XRC: the SRQ belongs to an XRC domain and receives what XRC sends
	// name by its number (Created.SRQNum). A provider without XRC refuses
	// it with unix.EOPNOTSUPP.
	XRC bool
}

// SRQ is a shared receive queue's data path.
type SRQ interface {
	PostRecv(wrs []wr.RecvWR) (int, error)
	Close() error
}

// AH is an address handle as a provider's UD sends need it: whatever the
// provider's Builder made. Package uverbs hands it back to the provider's
// PostSend inside the opaque wr.AH of each UD send (uverbs.AH.Dest), and
// AHValue opens it.
type AH any

// AHValue is the AH a provider's builder made, from the wr.AH a UD send
// carries (SendWR.AH.Dest()); nil for the zero wr.AH. A provider's PostSend
// calls it and checks the value is one of its own: a send may name an AH
// of another device. For anyone but the provider the value stays opaque.
func AHValue(a wr.AH) AH { return seal.Value(&a) }

// SRQModifier is implemented by SRQs whose driver needs private data on
// ibv_modify_srq (rxe: where to write the resized ring's mmap info).
type SRQModifier interface {
	// ModifyUdata returns the driver data to send with the modify command.
	ModifyUdata() []byte
	// Resized is called after the kernel resized the SRQ (max_wr changed).
	Resized() error
}

// Drainer is implemented by QPs that can tell when the device has consumed
// every posted work request. The core uses it when closing a QP: after
// moving it to the error state it waits, briefly, for the device to flush
// outstanding requests into their CQs before destroying it.
type Drainer interface {
	Drained() bool
}

// SendRetirer is implemented by QPs whose send queue shows, without
// polling a CQ, how far the device has retired work requests: rxe's
// completer advances the send ring's consumer index only once a request is
// acknowledged. The core's keepalive (uverbs.QP.SetKeepAlive) uses it to
// tell a busy send queue from a stuck one.
type SendRetirer interface {
	// SendsRetired returns a counter that changes whenever the device
	// retires a send work request. Only changes are meaningful.
	SendsRetired() uint32
}
