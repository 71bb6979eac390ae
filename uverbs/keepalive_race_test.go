package uverbs

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/rxe"
	"github.com/rdmago/rdma/wr"
)

// ringKernel is a provider.Kernel whose one mapping is a simulated rxe
// CQ ring, which the test fills as the kernel would.
type ringKernel struct{ mem []byte }

func (k *ringKernel) Mmap(offset int64, length int, prot int) ([]byte, error) {
	if offset != 0 || length != len(k.mem) {
		return nil, unix.EINVAL
	}
	return k.mem, nil
}
func (k *ringKernel) Munmap([]byte) error                          { return nil }
func (k *ringKernel) Write([]byte) error                           { return nil }
func (k *ringKernel) Doorbell([]byte) error                        { return nil }
func (k *ringKernel) Invoke(uint16, uint16, []provider.Attr) error { return unix.EPROTONOSUPPORT }

// newRingCQ makes a CQ whose provider is rxe's own, on a ring of 8
// slots of 64 bytes in ordinary memory, the way CreateCQ sets one up
// (the provider notes failed QPs itself). It returns the ring's header
// and a function that writes a completion into the ring as the kernel
// does: the element, then the producer index with a release store.
func newRingCQ(t *testing.T, c *Context) (*CQ, func(abi.IbUverbsWc)) {
	t.Helper()
	const slots, log2 = 8, 6
	k := &ringKernel{mem: make([]byte, abi.SizeofRxeQueueBuf+slots<<log2)}
	hdr := (*abi.RxeQueueBuf)(unsafe.Pointer(&k.mem[0]))
	hdr.Log2_elem_size, hdr.Index_mask = log2, slots-1
	cb, err := rxe.Driver{}.NewContext(k)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := cb.Finish(provider.Created{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pc.NewCQ(slots - 1)
	if err != nil {
		t.Fatal(err)
	}
	_, out := b.Udata()
	*(*abi.RxeCreateCqResp)(unsafe.Pointer(&out[0])) = abi.RxeCreateCqResp{Mi: abi.Mminfo{Size: uint32(len(k.mem))}}
	p, err := b.Finish(provider.Created{Handle: 1, CQE: slots - 1})
	if err != nil {
		t.Fatal(err)
	}
	cq := &CQ{object: newObject(c, kindCQ, 1), prov: p, cqe: slots - 1}
	cq.rxe = p.(*rxe.CQ)
	cq.notesFailed = true
	produce := func(w abi.IbUverbsWc) {
		prod := atomic.LoadUint32(&hdr.Producer_index)
		*(*abi.IbUverbsWc)(unsafe.Pointer(&k.mem[abi.SizeofRxeQueueBuf+int(prod&(slots-1))<<log2])) = w
		atomic.StoreUint32(&hdr.Producer_index, (prod+1)&(slots-1))
	}
	return cq, produce
}

// A keepalive probe is counted before it is posted, so a probe's
// completion that a poll finds was counted before the poll read the ring.
// The poll path looks at the count after the provider's poll for that
// reason: a look before it could see no probe out, then poll a probe
// counted and completed in between, and hand it to the program as its
// own (CI's arm64 guest saw it: a flushed probe returned by
// rsocket's poll). Here a goroutine plays the keepalive and the kernel,
// posting probe after probe as fast as each is taken, while another
// polls as a program does.
func TestKeepAliveProbeCountedBeforePoll(t *testing.T) {
	// The two must run at once: interleaved on one P, they switch only
	// at preemptions, and the window is a few instructions wide.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	_, c := objectContext(t)
	cq, produce := newRingCQ(t, c)
	const qpn = 0x11
	p := cq.probesOf(qpn)
	stop, done := make(chan struct{}), make(chan struct{})
	var probes atomic.Int64
	go func() { // the keepalive, and the kernel completing its probes
		defer close(done)
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			p.sent.Add(1)
			cq.probing.Add(1)
			produce(abi.IbUverbsWc{Wr_id: probeWRID, Qp_num: qpn, Opcode: abi.IB_UVERBS_WC_RDMA_WRITE})
			probes.Add(1)
			for cq.probing.Load() != 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
		}
	}()
	var wc [4]wr.Completion
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			close(stop)
			<-done
			t.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.ID == probeWRID {
				close(stop)
				<-done
				t.Fatalf("a probe's completion reached the program after %d probes: %+v", probes.Load(), w)
			}
		}
		select {
		case <-done:
			if probes.Load() < 10 {
				t.Errorf("only %d probes in the run", probes.Load())
			}
			return
		default:
		}
	}
}
