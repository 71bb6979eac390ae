package rxe

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
)

// queue is one of rxe's rings (struct rxe_queue_buf), allocated by the
// kernel and mapped into the process. Its header holds the element size, the
// index mask and the producer and consumer indices, each on its own cache
// line; the elements follow from offset 384.
//
// Each ring has one producer and one consumer, one of them the kernel:
// user space produces send and receive WQEs and consumes CQEs. The producer
// writes the element, then publishes the new producer index with a release
// store; the consumer reads the producer index with an acquire load before
// reading the element, and releases the slot by storing the consumer index.
// Go's sync/atomic operations are sequentially consistent, which gives at
// least those orderings on every architecture.
type queue struct {
	mem      []byte
	base     unsafe.Pointer // &mem[0]
	prod     *uint32
	cons     *uint32
	mask     uint32
	elemLog2 uint32
	data     uintptr // address of element 0
}

var (
	offProducer = unsafe.Offsetof(abi.RxeQueueBuf{}.Producer_index)
	offConsumer = unsafe.Offsetof(abi.RxeQueueBuf{}.Consumer_index)
)

// mapQueue maps a ring described by the kernel's mminfo.
func mapQueue(k provider.Kernel, mi abi.Mminfo) (*queue, error) {
	if mi.Size < abi.SizeofRxeQueueBuf {
		return nil, unix.EINVAL
	}
	mem, err := k.Mmap(int64(mi.Offset), int(mi.Size), unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, err
	}
	return newQueue(mem)
}

// newQueue wraps mapped (or, in tests, simulated) ring memory.
func newQueue(mem []byte) (*queue, error) {
	if len(mem) < abi.SizeofRxeQueueBuf {
		return nil, unix.EINVAL
	}
	base := unsafe.Pointer(&mem[0])
	hdr := (*abi.RxeQueueBuf)(base)
	q := &queue{
		mem:      mem,
		base:     base,
		prod:     (*uint32)(unsafe.Add(base, offProducer)),
		cons:     (*uint32)(unsafe.Add(base, offConsumer)),
		mask:     atomic.LoadUint32(&hdr.Index_mask),
		elemLog2: atomic.LoadUint32(&hdr.Log2_elem_size),
		data:     uintptr(base) + abi.SizeofRxeQueueBuf,
	}
	// The ring must fit in the mapping; a corrupt header must not let us
	// write outside it.
	if q.elemLog2 > 20 || (uint64(q.mask)+1)<<q.elemLog2+abi.SizeofRxeQueueBuf > uint64(len(mem)) {
		return nil, unix.EINVAL
	}
	return q, nil
}

func (q *queue) elemSize() int { return 1 << q.elemLog2 }

// elem returns the address of element i (masked). The shift's &31 changes
// nothing (newQueue refuses elemLog2 past 20) but spares the compiler's
// check for a shift of 64 or more.
func (q *queue) elem(i uint32) unsafe.Pointer {
	return unsafe.Add(q.base, abi.SizeofRxeQueueBuf+uintptr(i&q.mask)<<(q.elemLog2&31))
}

// Producer side (send, receive and SRQ rings).

// full reports whether the ring has no free slot after producer index
// prod, or already holds limit outstanding elements: the kernel may round a
// ring up, but the depth it granted (max_wr) is the contract.
func (q *queue) full(prod, limit uint32) bool { return q.used(prod) >= q.capacity(limit) }

// room returns how many elements may be produced after producer index
// prod: full is true after that many.
func (q *queue) room(prod, limit uint32) uint32 {
	used, capacity := q.used(prod), q.capacity(limit)
	if used >= capacity {
		return 0
	}
	return capacity - used
}

// used returns how many elements lie between the consumer index and
// producer index prod.
func (q *queue) used(prod uint32) uint32 { return (prod - atomic.LoadUint32(q.cons)) & q.mask }

// capacity is how many elements the ring holds at once: one slot stays
// empty (cons == prod means empty), and never more than limit.
func (q *queue) capacity(limit uint32) uint32 { return min(q.mask, limit) }

func (q *queue) producer() uint32 { return atomic.LoadUint32(q.prod) }

// publish makes every element up to (not including) prod visible.
func (q *queue) publish(prod uint32) { atomic.StoreUint32(q.prod, prod&q.mask) }

// Consumer side (completion ring).

func (q *queue) consumer() uint32 { return atomic.LoadUint32(q.cons) }

// empty reports whether the producer has produced nothing past cons (on a
// completion ring: the kernel; on a work ring: used with the kernel's
// consumer index, whether it has consumed everything).
func (q *queue) empty(cons uint32) bool { return atomic.LoadUint32(q.prod) == cons }

// release frees every element before cons.
func (q *queue) release(cons uint32) { atomic.StoreUint32(q.cons, cons&q.mask) }

func (q *queue) unmap(k provider.Kernel) error {
	if q == nil || q.mem == nil {
		return nil
	}
	err := k.Munmap(q.mem)
	q.mem = nil
	return err
}
