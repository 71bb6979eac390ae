package rxe

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

type srqBuilder struct {
	response[abi.RxeCreateSrqResp]
	k    provider.Kernel
	attr provider.SRQInitAttr
}

// NewSRQ prepares a shared receive queue.
func (c *Context) NewSRQ(attr provider.SRQInitAttr) (provider.Builder[provider.SRQ], error) {
	if attr.XRC {
		// Linux's rxe has no XRC domains, so no XRC SRQ can be asked of it.
		return nil, fmt.Errorf("rxe: XRC SRQ: %w", unix.EOPNOTSUPP)
	}
	return &srqBuilder{k: c.k, attr: attr}, nil
}

func (b *srqBuilder) Finish(c provider.Created) (provider.SRQ, error) {
	q, err := mapQueue(b.k, b.resp.Mi)
	if err != nil {
		return nil, fmt.Errorf("rxe: mapping the SRQ ring: %w", err)
	}
	s := &SRQ{k: b.k, q: q, maxSGE: c.Caps.MaxRecvSGE, maxWR: c.Caps.MaxRecvWR, mi: b.resp.Mi}
	if err := checkElem(q, recvSGEOffset, s.maxSGE*abi.SizeofRxeSge); err != nil {
		q.unmap(b.k)
		return nil, err
	}
	s.modify.Mmap_info_addr = uint64(uintptr(unsafe.Pointer(&s.newMI)))
	return s, nil
}

// SRQ is an rxe shared receive queue.
type SRQ struct {
	k      provider.Kernel
	mu     sync.Mutex
	q      *queue
	maxSGE uint32
	maxWR  uint32
	mi     abi.Mminfo
	// modify is the driver data of every modify command: where the kernel
	// writes the new ring's mminfo when the SRQ is resized.
	modify abi.RxeModifySrqCmd
	newMI  abi.Mminfo
}

// PostRecv writes receive requests into the shared ring.
func (s *SRQ) PostRecv(wrs []wr.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == nil {
		return 0, unix.EINVAL
	}
	return postRecv(s.q, s.maxSGE, s.maxWR, wrs)
}

// ModifyUdata returns the driver data rxe needs on every SRQ modify.
func (s *SRQ) ModifyUdata() []byte {
	s.newMI = abi.Mminfo{}
	return bytesOf(&s.modify)
}

// Resized remaps the ring after the kernel resized it.
func (s *SRQ) Resized() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q.unmap(s.k)
	s.q = nil
	q, err := mapQueue(s.k, s.newMI)
	if err != nil {
		return fmt.Errorf("rxe: remapping the resized SRQ ring: %w", err)
	}
	s.q, s.mi = q, s.newMI
	return nil
}

// Close unmaps the ring.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.unmap(s.k)
}

type ahBuilder struct {
	response[abi.RxeCreateAhResp]
}

// NewAH prepares an address handle. The kernel builds the address vector;
// since Linux 5.12 it returns an AH number that UD WQEs name.
func (c *Context) NewAH(qp.AHAttr) (provider.Builder[provider.AH], error) {
	return &ahBuilder{}, nil
}

func (b *ahBuilder) Finish(provider.Created) (provider.AH, error) {
	if b.resp.Ah_num == 0 {
		// Older kernels want the address vector in every WQE; every kernel
		// this library supports returns a number.
		return nil, fmt.Errorf("rxe: kernel returned no AH number: %w", unix.EOPNOTSUPP)
	}
	return &AH{num: b.resp.Ah_num}, nil
}

// AH is an rxe address handle: the kernel's AH number.
type AH struct{ num uint32 }
