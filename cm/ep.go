package cm

import (
	"context"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/uverbs"
)

// CreateEP creates a synchronous endpoint from an address-info result
// (rdma_create_ep). For a passive result (AIPassive) the ID is bound to its
// source address, ready for Listen and GetRequest; qpInit, if not nil, is
// kept for the QPs of the IDs GetRequest returns, and pd, if not nil,
// for their PD. For an active result the ID's address and route to the
// destination are resolved (2 s each, as librdmacm), and a QP is created
// from qpInit if it is not nil, with the result's QP type; the result's
// connect data goes first in Connect's private data. On failure
// everything made is destroyed.
func CreateEP(ctx context.Context, res *AddrInfo, pd *uverbs.PD, qpInit *uverbs.QPInitAttr) (*ID, error) {
	if res == nil {
		return nil, errf("create ep", unix.EINVAL, "no address info")
	}
	id, err := createID(nil, nil, res.PortSpace, res.QPType)
	if err != nil {
		return nil, err
	}
	if err := id.initEP(ctx, res, pd, qpInit); err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

func (id *ID) initEP(ctx context.Context, res *AddrInfo, pd *uverbs.PD, qpInit *uverbs.QPInitAttr) error {
	if res.Flags&AIPassive != 0 {
		if err := id.BindAddr(res.SrcAddr); err != nil {
			return err
		}
		id.mu.Lock()
		defer id.mu.Unlock()
		if pd != nil {
			id.pd = pd
		}
		if qpInit != nil {
			a := *qpInit
			a.Type = res.QPType
			id.qpInit = &a
		}
		return nil
	}
	if err := id.ResolveAddr(ctx, res.SrcAddr, res.DstAddr, 0); err != nil {
		return err
	}
	if len(res.Route) > 0 {
		if err := id.SetOption(OptionLevelIB, OptionIBPath, res.Route); err != nil {
			return err
		}
		if err := id.complete(ctx, "resolve route", EventRouteResolved); err != nil {
			return err
		}
	} else if err := id.ResolveRoute(ctx, 0); err != nil {
		return err
	}
	if qpInit != nil {
		a := *qpInit
		a.Type = res.QPType
		if err := id.CreateQP(pd, a); err != nil {
			return err
		}
	}
	if len(res.Connect) > 0 {
		id.mu.Lock()
		id.connectData = append([]byte(nil), res.Connect...)
		id.mu.Unlock()
	}
	return nil
}

// GetRequest waits for the next connection request on a synchronous
// listening ID (rdma_get_request) and returns the new, synchronous ID of
// the connection, with a QP made from CreateEP's qpInit if one was given.
// The request, with the peer's private data, is the new ID's Event. Accept
// or Reject it, then Close it. A listener on a channel of its own only:
// an asynchronous one gets unix.EINVAL.
func (id *ID) GetRequest(ctx context.Context) (*ID, error) {
	const op = "get request"
	id.mu.Lock()
	if id.destroyed.Load() {
		id.mu.Unlock()
		return nil, ErrClosed
	}
	if !id.sync {
		id.mu.Unlock()
		return nil, errf(op, unix.EINVAL, "the listening ID is not synchronous")
	}
	ev, err := id.nextSyncEvent(ctx, op)
	if err != nil {
		return nil, err
	}
	if ev.Type != EventConnectRequest || ev.Status != 0 {
		id.mu.Lock()
		id.event = ev
		id.mu.Unlock()
		if ev.Type == EventConnectRequest {
			return nil, eventErr(op, ev, EventConnectRequest)
		}
		if err := eventErr(op, ev, EventConnectRequest); err != nil && ev.Type == EventRejected {
			return nil, err
		}
		return nil, &Error{Op: op, Event: ev.Type, Status: ev.Status, HasEvent: true, Err: unix.EINVAL}
	}
	nid := ev.ID
	id.mu.Lock()
	qpInit := id.qpInit
	pd := id.pd
	id.mu.Unlock()
	if qpInit != nil {
		if err := nid.CreateQP(pd, *qpInit); err != nil {
			// Nobody will ever answer this request: refuse it.
			nid.Reject(nil)
			nid.Close()
			ev.Ack()
			return nil, err
		}
	}
	nid.mu.Lock()
	nid.event = ev
	nid.mu.Unlock()
	return nid, nil
}
