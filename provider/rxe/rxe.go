// Package rxe is the data path of soft-RoCE, the kernel's rdma_rxe driver.
//
// rxe allocates every queue in the kernel and lets user space map it: the
// create responses carry an mmap offset and size for each ring (struct
// mminfo). Send and receive work requests are written straight into the
// mapped rings; completions are read from the mapped CQ ring. Receives need
// no doorbell, because the kernel looks at the ring when a packet arrives;
// sends are started by a zero-length IB_USER_VERBS_CMD_POST_SEND written to
// the command file, which makes the kernel run the QP's requester.
//
// Programs need not import this package: package uverbs serves rxe devices
// with it. Its Driver is exported for a program's own provider that wraps
// it (uverbs.RegisterProvider); the other exported types are what its
// builders make, used through package provider's interfaces.
package rxe

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/failnote"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/wr"
)

// Driver is the rxe provider.
type Driver struct{}

// Name returns "rxe".
func (Driver) Name() string { return "rxe" }

// FormatFWVer prints the firmware version as rdma-core's rxe provider does.
func (Driver) FormatFWVer(raw uint64) string {
	return fmt.Sprintf("%d.%d.%d", (raw>>32)&0xffff, (raw>>16)&0xffff, raw&0xffff)
}

// NewContext returns the builder of an rxe context. rxe's context carries no
// driver data.
func (Driver) NewContext(k provider.Kernel) (provider.Builder[provider.Context], error) {
	return ctxBuilder{k}, nil
}

type ctxBuilder struct{ k provider.Kernel }

func (ctxBuilder) Udata() (in, out []byte) { return nil, nil }
func (b ctxBuilder) Finish(provider.Created) (provider.Context, error) {
	return &Context{k: b.k}, nil
}
func (ctxBuilder) Abort() {}

// Context is the rxe state of one device context.
type Context struct{ k provider.Kernel }

// Close releases nothing: every ring belongs to its object.
func (c *Context) Close() error { return nil }

// CPUBound says that rxe is software: the kernel creates and modifies its
// objects with CPU work alone.
func (c *Context) CPUBound() {}

// response is what every rxe builder has: rxe sends no driver data and
// allocates nothing before the create command, so a builder is the buffer
// the kernel writes its driver response into (the rings' mmap offsets, an
// AH's number), and Abort has nothing to release.
type response[T any] struct{ resp T }

func (b *response[T]) Udata() (in, out []byte) { return nil, bytesOf(&b.resp) }
func (*response[T]) Abort()                    {}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// CQ

type cqBuilder struct {
	response[abi.RxeCreateCqResp]
	k provider.Kernel
}

// NewCQ prepares a completion queue.
func (c *Context) NewCQ(cqe int) (provider.Builder[provider.CQ], error) {
	return &cqBuilder{k: c.k}, nil
}

func (b *cqBuilder) Finish(c provider.Created) (provider.CQ, error) {
	q, err := mapQueue(b.k, b.resp.Mi)
	if err != nil {
		return nil, fmt.Errorf("rxe: mapping the CQ ring: %w", err)
	}
	if q.elemSize() < abi.SizeofIbUverbsWc {
		q.unmap(b.k)
		return nil, fmt.Errorf("rxe: CQ element of %d bytes is smaller than a completion: %w", q.elemSize(), unix.EINVAL)
	}
	cq := &CQ{k: b.k, q: q}
	for i := range cq.notify {
		n := &cq.notify[i]
		n.hdr.Command = abi.IB_USER_VERBS_CMD_REQ_NOTIFY_CQ
		n.hdr.In_words = uint16(unsafe.Sizeof(*n) / 4)
		n.cmd.Cq_handle = c.Handle
		n.cmd.Solicited_only = uint32(i)
	}
	return cq, nil
}

// CQ is an rxe completion queue.
type CQ struct {
	k  provider.Kernel
	mu queueLock
	q  *queue
	// notify holds the prebuilt IB_USER_VERBS_CMD_REQ_NOTIFY_CQ commands,
	// for every completion and for solicited ones (index 1). Never
	// written after Finish, so arming takes no lock.
	notify [2]struct {
		hdr abi.IbUverbsCmdHdr
		cmd abi.IbUverbsReqNotifyCq
	}
	// onError, set by uverbs before the first poll (internal/failnote),
	// is called with the QP number of each failed completion Poll
	// returns.
	onError func(qpn uint32)
}

func init() { failnote.For(func(c *CQ) *func(uint32) { return &c.onError }) }

// Poll copies up to len(wc) completions out of the ring, converting the
// kernel's struct ib_uverbs_wc, which rxe writes there, to wr.Completion.
//
// It reads the producer index once: what the kernel adds meanwhile is the
// next call's, as it would be had it come a moment later. The conversion
// is written out in the loop rather than called: Go's calling convention
// keeps no register across a call, so a call per completion would spill
// the loop's state and reload it each time.
func (cq *CQ) Poll(wc []wr.Completion) int {
	cq.mu.Lock()
	q := cq.q
	cons := q.consumer()
	n := min(int((q.producer()-cons)&q.mask), len(wc))
	for i := range wc[:n] {
		w := (*abi.IbUverbsWc)(q.elem(cons))
		cons++
		flags := wcFlags(w.Wc_flags)
		// Immediate data travels big endian; an invalidated rkey is in
		// host order. One load: NativeEndian.Uint32 would share the
		// branch's four byte loads.
		imm := *(*uint32)(unsafe.Pointer(&w.Ex))
		if flags&wr.WCWithImm != 0 {
			imm = binary.BigEndian.Uint32(w.Ex[:])
		}
		// Field by field: a composite literal is built on the stack and
		// then copied.
		c := &wc[i]
		c.ID = w.Wr_id
		c.Status = wr.Status(w.Status)
		c.Opcode = wr.WCOpcode(w.Opcode)
		c.VendorErr = w.Vendor_err
		c.ByteLen = w.Byte_len
		c.Imm = imm
		c.QPNum = w.Qp_num
		c.SrcQP = w.Src_qp
		c.Flags = flags
		c.PKeyIndex = w.Pkey_index
		c.SLID = w.Slid
		c.SL = w.Sl
		c.DLIDPathBits = w.Dlid_path_bits
		c.Timestamp = 0
		if c.Status != wr.Success && cq.onError != nil {
			cq.onError(c.QPNum)
		}
	}
	if n > 0 {
		q.release(cons)
	}
	cq.mu.Unlock()
	return n
}

// Pending reports whether the ring holds completions Poll has not taken:
// its two indices, read without the lock (the kernel moves one, Poll the
// other), which costs a fraction of a Poll that finds the ring empty.
func (cq *CQ) Pending() bool {
	q := cq.q
	return !q.empty(q.consumer())
}

// The kernel's enum ib_wc_flags (include/rdma/ib_verbs.h, not uapi), which
// rxe writes into the CQ ring unchanged. Its invalidate and checksum bits
// are the other way round from enum ibv_wc_flags (wr.WCFlags).
const (
	kernWCGRH      = 1 << 0
	kernWCWithImm  = 1 << 1
	kernWCWithInv  = 1 << 2
	kernWCIPCsumOK = 1 << 3
)

// wcFlags converts rxe's completion flags to libibverbs' values. rdma-core's
// rxe copies the kernel's completion as it is, so a C program on rxe reads
// a send with invalidate's IB_WC_WITH_INVALIDATE as IBV_WC_IP_CSUM_OK and
// never sees IBV_WC_WITH_INV. The kernel-only bits (SMAC, VLAN, network
// header type) have no user-space meaning here and are dropped.
func wcFlags(k uint32) wr.WCFlags {
	f := wr.WCFlags(k & (kernWCGRH | kernWCWithImm))
	if k&kernWCWithInv != 0 {
		f |= wr.WCWithInv
	}
	if k&kernWCIPCsumOK != 0 {
		f |= wr.WCIPCsumOK
	}
	return f
}

// ReqNotify arms the CQ with IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: rxe has no
// user-space arming. The command is written as a doorbell is
// (provider.Kernel.Doorbell), without Write's guard on the file: the core
// calls ReqNotify only while it holds the CQ open (uverbs' CQ.ReqNotify),
// and it releases every CQ before it closes the file.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	n := &cq.notify[0]
	if solicitedOnly {
		n = &cq.notify[1]
	}
	return cq.k.Doorbell(bytesOf(n))
}

// Close unmaps the ring.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.q.unmap(cq.k)
}

// The provider's objects implement the core's interfaces, the optional
// ones included (docs/providers.md lists which provider has which).
var (
	_ provider.Driver         = Driver{}
	_ provider.Context        = (*Context)(nil)
	_ provider.CPUBound       = (*Context)(nil)
	_ provider.CQ             = (*CQ)(nil)
	_ provider.QP             = (*QP)(nil)
	_ provider.SRQ            = (*SRQ)(nil)
	_ provider.AH             = (*AH)(nil)
	_ provider.Drainer        = (*QP)(nil)
	_ provider.SendRetirer    = (*QP)(nil)
	_ provider.SingleThreader = (*QP)(nil)
	_ provider.SingleThreader = (*CQ)(nil)
	_ provider.SRQModifier    = (*SRQ)(nil)
)
