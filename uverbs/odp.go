package uverbs

import (
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// ODPGeneralCaps are a device's on-demand paging capabilities
// (ODPCaps.GeneralCaps, enum ibv_odp_general_caps).
type ODPGeneralCaps uint64

// On-demand paging capabilities.
const (
	// ODPSupport: regions registered with wr.OnDemand are paged in by the
	// device as it touches them, not pinned at registration.
	ODPSupport ODPGeneralCaps = 1 << 0
	// ODPSupportImplicit: RegImplicitODP can register the whole address
	// space.
	ODPSupportImplicit ODPGeneralCaps = 1 << 1
)

// ODPTransportCaps are what one transport can do with on-demand-paging
// memory (ODPCaps.RCODPCaps and the others, enum
// ibv_odp_transport_cap_bits).
type ODPTransportCaps uint32

// What a transport can do with on-demand-paging memory.
const (
	ODPSupportSend    ODPTransportCaps = 1 << 0 // send from it
	ODPSupportRecv    ODPTransportCaps = 1 << 1 // receive into it
	ODPSupportWrite   ODPTransportCaps = 1 << 2 // be the target of RDMA writes
	ODPSupportRead    ODPTransportCaps = 1 << 3 // be the target of RDMA reads
	ODPSupportAtomic  ODPTransportCaps = 1 << 4 // be the target of atomics
	ODPSupportSRQRecv ODPTransportCaps = 1 << 5 // receive into it through an SRQ
)

// RegImplicitODP registers the process's whole address space as one
// on-demand-paging region (ibv_reg_mr(pd, NULL, SIZE_MAX,
// IBV_ACCESS_ON_DEMAND | access)): any SGE with the region's lkey may
// name any address, and the device faults pages in as it touches them.
// The region's Addr is 0 and its Bytes nil; nothing keeps memory named
// through it alive, so the program must, until the requests that use it
// complete.
//
// A device without implicit ODP (ODPCaps.GeneralCaps lacks
// ODPSupportImplicit: rxe, to Linux 7.2 at least) is refused before the
// kernel is asked, with an error matching errors.ErrUnsupported.
func (pd *PD) RegImplicitODP(access wr.Access) (*MR, error) {
	const op = "reg implicit ODP MR"
	if pd == nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", errNil)}
	}
	if err := checkRegAccess(access); err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	if err := pd.ctx.requireODP(ODPSupportImplicit); err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	if err := pd.use(); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	req := &abi.IbUverbsRegMr{Length: math.MaxUint64, Pd_handle: pd.handle, Access_flags: uint32(access | wr.OnDemand)}
	resp, err := writeCmd[abi.IbUverbsRegMrResp](pd.ctx, abi.IB_USER_VERBS_CMD_REG_MR, req, op)
	if err != nil {
		return nil, err
	}
	m := &MR{pd: pd, lkey: resp.Lkey, rkey: resp.Rkey}
	m.object = newObject(pd.ctx, kindMR, resp.Mr_handle, pd)
	track(m, m.object)
	return m, nil
}

// requireODP fails with EOPNOTSUPP unless the device reports every bit of
// caps in its general ODP capabilities.
func (c *Context) requireODP(caps ODPGeneralCaps) error {
	attr, err := c.QueryDevice()
	if err != nil {
		return err
	}
	if attr.ODPCaps.GeneralCaps&caps != caps {
		return fmt.Errorf("the device has no on-demand paging of this kind (general ODP caps %#x, want %#x): %w", attr.ODPCaps.GeneralCaps, caps, unix.EOPNOTSUPP)
	}
	return nil
}

// Advice is what AdviseMR tells the device (enum ibv_advise_mr_advice).
type Advice uint32

// Advices.
const (
	// AdvicePrefetch faults the pages in for reading.
	AdvicePrefetch Advice = 0 // IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH
	// AdvicePrefetchWrite faults them in for writing.
	AdvicePrefetchWrite Advice = 1 // IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE
	// AdvicePrefetchNoFault maps the pages already present, faulting none.
	AdvicePrefetchNoFault Advice = 2 // IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT
)

// AdviseFlags modify AdviseMR (enum ibv_advise_mr_flags).
type AdviseFlags uint32

// AdviseFlush makes AdviseMR return only once the pages are mapped;
// without it the prefetch runs in the background.
const AdviseFlush AdviseFlags = 1 // IB_UVERBS_ADVISE_MR_FLAG_FLUSH

// AdviseMR advises the device about the on-demand-paging regions the SGEs
// name (ibv_advise_mr, UVERBS_METHOD_ADVISE_MR): chiefly to prefetch
// pages before the traffic that needs them, so that the first requests do
// not wait for page faults. Each SGE names part of a region registered
// with wr.OnDemand, by its lkey. A device or kernel without the method
// refuses with an error matching errors.ErrUnsupported.
func (pd *PD) AdviseMR(advice Advice, flags AdviseFlags, sges []wr.SGE) error {
	const op = "advise MR"
	switch {
	case pd == nil:
		return &Error{Op: op, Err: fmt.Errorf("PD: %w", errNil)}
	case len(sges) == 0 || len(sges)*int(unsafe.Sizeof(abi.IbUverbsSge{})) > 0xffff:
		return &Error{Op: op, Err: fmt.Errorf("%d SGEs: %w", len(sges), unix.EINVAL)}
	case advice > AdvicePrefetchNoFault:
		return &Error{Op: op, Err: fmt.Errorf("advice %d: %w", advice, unix.EINVAL)}
	case flags&^AdviseFlush != 0:
		return &Error{Op: op, Err: fmt.Errorf("flags %#x: %w", flags, unix.EINVAL)}
	}
	if err := pd.use(); err != nil {
		return &Error{Op: op, Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	// Copied into the kernel's struct ib_uverbs_sge, not viewed in place:
	// the kernel reads it, and wr.SGE's layout is Go's to choose.
	list := make([]abi.IbUverbsSge, len(sges))
	for i, s := range sges {
		list[i] = abi.IbUverbsSge{Addr: s.Addr, Length: s.Length, Lkey: s.LKey}
	}
	cmd := newCommand(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_ADVISE_MR)
	defer cmd.release()
	cmd.driverID = pd.ctx.dev.DriverID
	cmd.idrIn(abi.UVERBS_ATTR_ADVISE_MR_PD_HANDLE, pd.handle)
	cmd.constIn(abi.UVERBS_ATTR_ADVISE_MR_ADVICE, uint64(advice))
	cmd.u32In(abi.UVERBS_ATTR_ADVISE_MR_FLAGS, uint32(flags))
	cmd.ptrIn(abi.UVERBS_ATTR_ADVISE_MR_SGE_LIST, unsafe.Pointer(&list[0]), len(list)*int(unsafe.Sizeof(list[0])))
	return cmd.execute(pd.ctx.f, op)
}
