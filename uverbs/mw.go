package uverbs

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint8

// Memory window types. A type 1 window is bound with QP.BindMW and stays
// bound until rebound; a type 2 window is bound by posting an OpBindMW
// request on a QP, belongs to that QP's connection, and is invalidated by
// OpLocalInv, or by the peer's OpSendWithInv.
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MW is a memory window (struct ibv_mw): a remote key that grants a peer
// part of a region, which can be moved or revoked without registering the
// region again.
type MW struct {
	*object
	typ MWType
	mu  sync.Mutex
	// rkey is the window's current rkey: the one the kernel gave it, then
	// the one BindMW last posted.
	rkey uint32
}

// AllocMW allocates a memory window of type typ (ibv_alloc_mw). Devices
// without windows refuse with an error matching errors.ErrUnsupported
// (EOPNOTSUPP).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	const op = "alloc MW"
	if pd == nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", errNil)}
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, &Error{Op: op, Err: fmt.Errorf("%v: %w", typ, unix.EINVAL)}
	}
	if err := pd.use(); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	req := &abi.IbUverbsAllocMw{Pd_handle: pd.handle, Mw_type: uint8(typ)}
	resp, err := writeCmd[abi.IbUverbsAllocMwResp](pd.ctx, abi.IB_USER_VERBS_CMD_ALLOC_MW, req, op)
	if err != nil {
		return nil, err
	}
	mw := &MW{object: newObject(pd.ctx, kindMW, resp.Mw_handle, pd), typ: typ, rkey: resp.Rkey}
	track(mw, mw.object)
	return mw, nil
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// RKey returns the window's rkey: the kernel's at first, then the one
// the last successful QP.BindMW posted, or SetRKey set. An OpBindMW
// request the program posts for a type 2 window names the new rkey
// itself (wr.IncRKey of the old, usually), and SetRKey records it.
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.rkey
}

// Close deallocates the window (ibv_dealloc_mw): its rkey stops granting
// anything.
func (mw *MW) Close() error {
	if mw == nil {
		return errNil
	}
	return mw.close()
}

// BindMW binds the type 1 window mw to length bytes at addr of mr, for the
// peer's access (RemoteRead, RemoteWrite, RemoteAtomic), by posting an
// OpBindMW request with ID wrID and flags on q (ibv_bind_mw). The window
// takes a new rkey (wr.IncRKey of the old), which RKey returns once the
// post succeeded; the binding itself is done when the request completes
// (WCBindMW), and a bind the device refuses completes with MWBindErr, after
// which the old rkey is what the window has, as the caller may restore
// with SetRKey. A zero length with a nil mr unbinds the window. mr must be
// registered with wr.MWBind; ZeroBased access is refused (EINVAL), as
// rdma-core's rxe refuses it.
func (q *QP) BindMW(mw *MW, wrID uint64, flags wr.SendFlags, mr *MR, addr, length uint64, access wr.Access) error {
	const op = "bind MW"
	switch {
	case mw == nil:
		return &Error{Op: op, Err: fmt.Errorf("MW: %w", errNil)}
	case mw.typ != MWType1:
		return &Error{Op: op, Err: fmt.Errorf("a %v window is bound by posting OpBindMW: %w", mw.typ, unix.EINVAL)}
	case access&wr.ZeroBased != 0:
		return &Error{Op: op, Err: fmt.Errorf("zero-based access: %w", unix.EINVAL)}
	case mr == nil && length != 0:
		return &Error{Op: op, Err: fmt.Errorf("%d bytes of no region: %w", length, unix.EINVAL)}
	}
	if err := mw.use(); err != nil {
		return &Error{Op: op, Err: fmt.Errorf("MW: %w", err)}
	}
	defer mw.done()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	b := &wr.BindInfo{MWRKey: mw.rkey, NewRKey: wr.IncRKey(mw.rkey), Addr: addr, Length: length, Access: access}
	if mr != nil {
		if err := mr.use(); err != nil {
			return &Error{Op: op, Err: fmt.Errorf("MR: %w", err)}
		}
		defer mr.done()
		b.LKey = mr.LKey()
	}
	w := []wr.SendWR{{ID: wrID, Opcode: wr.OpBindMW, Flags: flags, Bind: b}}
	if _, err := q.PostSend(w); err != nil {
		return err
	}
	mw.rkey = b.NewRKey
	return nil
}

// SetRKey sets the rkey RKey returns, for a program that bound a type 2
// window with OpBindMW, or whose type 1 bind failed in its completion.
func (mw *MW) SetRKey(rkey uint32) {
	mw.mu.Lock()
	mw.rkey = rkey
	mw.mu.Unlock()
}
