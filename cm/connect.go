package cm

import (
	"context"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/uverbs"
)

// Listen listens for connection requests (rdma_listen) on the bound
// address; backlog ≤ 0 means the kernel's maximum. Requests arrive as
// CONNECT_REQUEST events, or through GetRequest on a synchronous ID.
func (id *ID) Listen(backlog int) error {
	return id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmListen](abi.RDMA_USER_CM_CMD_LISTEN)
		c.body.Id = id.handle
		if backlog > 0 {
			c.body.Backlog = uint32(min(backlog, 1<<31-1))
		}
		if err := exec(f, c); err != nil {
			return wrapErr("listen", err)
		}
		return id.queryRoute()
	})
}

// complete waits, on a synchronous ID, for the event that ends op and
// returns its outcome (librdmacm's ucma_complete); asynchronous IDs return
// at once.
func (id *ID) complete(ctx context.Context, op string, want EventType) error {
	id.mu.Lock()
	if !id.sync {
		id.mu.Unlock()
		return nil
	}
	ev, err := id.nextSyncEvent(ctx, op)
	if err != nil {
		return err
	}
	id.mu.Lock()
	id.event = ev
	id.mu.Unlock()
	if ev.ID != id && ev.ListenID != id {
		return &Error{Op: op, Event: ev.Type, Status: ev.Status, HasEvent: true,
			Err: fmt.Errorf("event of another ID on a synchronous ID's channel: %w", unix.EPROTO)}
	}
	return eventErr(op, ev, want)
}

// nextSyncEvent acknowledges the synchronous ID's last event and waits on
// its own channel for the next one. The caller holds id.mu, which
// nextSyncEvent releases.
func (id *ID) nextSyncEvent(ctx context.Context, op string) (*Event, error) {
	ch := id.ch
	if id.event != nil {
		id.event.Ack()
		id.event = nil
	}
	id.mu.Unlock()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		var ce *Error
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, &Error{Op: op, Err: err}
	}
	return ev, nil
}

// lockConnecting locks id.mu for Connect or Accept (op) and checks what
// both need: a live ID, a valid param and a device, hint saying how an ID
// gets one. It returns the ID's file, or an error with id.mu unlocked.
func (id *ID) lockConnecting(op string, param *ConnParam, hint string) (ucmaFile, error) {
	f, err := id.lockFile()
	if err != nil {
		return nil, err
	}
	err = id.validParam(op, param)
	if err == nil && id.dev == nil {
		err = errf(op, unix.EINVAL, "the ID is not bound to a device (%s)", hint)
	}
	if err != nil {
		id.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// validParam checks a connection parameter as librdmacm's ucma_valid_param.
// The caller holds id.mu.
func (id *ID) validParam(op string, p *ConnParam) error {
	if id.ps != PSTCP {
		return nil
	}
	if id.qp.Load() == nil && p == nil {
		return errf(op, unix.EINVAL, "an ID without a QP needs a ConnParam with its QP number")
	}
	if p == nil {
		return nil
	}
	if id.dev == nil {
		return errf(op, unix.EINVAL, "the ID is not bound to a device (resolve its address and route first)")
	}
	if p.ResponderResources != MaxRespRes && p.ResponderResources > id.dev.maxRespRes {
		return errf(op, unix.EINVAL, "responder resources %d exceed the device's %d", p.ResponderResources, id.dev.maxRespRes)
	}
	if p.InitiatorDepth != MaxInitDepth && p.InitiatorDepth > id.dev.maxInitDepth {
		return errf(op, unix.EINVAL, "initiator depth %d exceeds the device's %d", p.InitiatorDepth, id.dev.maxInitDepth)
	}
	return nil
}

// connParamToKern fills the kernel's connection parameter as librdmacm's
// ucma_copy_conn_param_to_kern. The caller holds id.mu.
func (id *ID) connParamToKern(op string, dst *abi.RdmaUcmConnParam, src *ConnParam, qpNum uint32, srq bool) error {
	dst.Qp_num = qpNum
	if srq {
		dst.Srq = 1
	}
	dst.Responder_resources = id.respRes
	dst.Initiator_depth = id.initiatorDepth
	dst.Valid = 1
	n := copy(dst.Private_data[:], id.connectData)
	if src != nil {
		dst.Flow_control = src.FlowControl
		dst.Retry_count = src.RetryCount
		dst.Rnr_retry_count = src.RNRRetryCount
		// The kernel's buffer has 256 bytes but its length is one byte
		// (as librdmacm's private_data_len): 256 would go as 0.
		if n+len(src.PrivateData) > math.MaxUint8 {
			return errf(op, unix.EINVAL, "%d bytes of private data, more than %d", n+len(src.PrivateData), math.MaxUint8)
		}
		n += copy(dst.Private_data[n:], src.PrivateData)
	} else {
		dst.Retry_count = 7
		dst.Rnr_retry_count = 7
	}
	dst.Private_data_len = uint8(n)
	return nil
}

// ibOrRoCE reports whether the ID is on an IB or RoCE device, where the
// connection commands post a CM message and return (quickCmd). The
// caller holds id.mu.
func (id *ID) ibOrRoCE() bool {
	return id.dev != nil && id.dev.transport() == uverbs.TransportIB
}

// qpNumOf returns the QP number and SRQ flag Connect and Accept announce.
func (id *ID) qpNumOf(p *ConnParam) (uint32, bool) {
	if q := id.qp.Load(); q != nil {
		return q.Num(), id.verbs.hasSRQ
	}
	if p != nil {
		return p.QPNum, p.SRQ
	}
	return 0, false
}

// Connect connects to the peer whose address and route were resolved
// (rdma_connect): an RC connection, or on a UD ID a service ID resolution
// that returns the peer's QP number and Q_Key in the ESTABLISHED event. A
// nil param means DefaultConnParam. With a QP on the ID, the QP is moved to
// RTS when the peer accepts; without one, the peer's acceptance is a
// CONNECT_RESPONSE event, after which the program moves its own QP (see
// InitQPAttr) and calls Establish. A synchronous ID waits until the
// connection is established (or, without a QP, accepted): a rejection,
// including the peer's kernel's when nobody listens on the port, gives an
// error wrapping unix.ECONNREFUSED, an unreachable peer unix.ETIMEDOUT or
// the like (see Error).
func (id *ID) Connect(ctx context.Context, param *ConnParam) error {
	f, err := id.lockConnecting("connect", param, "resolve its address and route first")
	if err != nil {
		return err
	}
	if param != nil && param.InitiatorDepth != MaxInitDepth {
		id.initiatorDepth = param.InitiatorDepth
	} else {
		id.initiatorDepth = id.dev.maxInitDepth
	}
	if param != nil && param.ResponderResources != MaxRespRes {
		id.respRes = param.ResponderResources
	} else {
		id.respRes = id.dev.maxRespRes
	}
	c := newCmd[abi.RdmaUcmConnect](abi.RDMA_USER_CM_CMD_CONNECT)
	c.body.Id = id.handle
	n, srq := id.qpNumOf(param)
	if err := id.connParamToKern("connect", &c.body.Conn_param, param, n, srq); err != nil {
		id.mu.Unlock()
		return err
	}
	err = execOn(f, c, id.ibOrRoCE())
	if err == nil {
		id.connectData = nil
		id.connectErr = false
	}
	// Without a QP on an RC ID the connection stops at CONNECT_RESPONSE,
	// for the program to move its QP and call Establish.
	want := EventEstablished
	if id.qp.Load() == nil && id.qpType != qp.UD {
		want = EventConnectResponse
	}
	id.mu.Unlock()
	if err != nil {
		return wrapErr("connect", err)
	}
	return id.complete(ctx, "connect", want)
}

// Accept accepts the connection request that created the ID (rdma_accept).
// With a QP on an RC ID, the QP is moved to RTS first. A nil param keeps
// the depths the peer asked for, within the device's limits. A synchronous
// RC ID waits until the connection is established; UD IDs do not wait.
func (id *ID) Accept(ctx context.Context, param *ConnParam) error {
	f, err := id.lockConnecting("accept", param, "not from a connection request?")
	if err != nil {
		return err
	}
	if param == nil || param.InitiatorDepth == MaxInitDepth {
		id.initiatorDepth = min(id.initiatorDepth, id.dev.maxInitDepth)
	} else {
		id.initiatorDepth = param.InitiatorDepth
	}
	if param == nil || param.ResponderResources == MaxRespRes {
		id.respRes = min(id.respRes, id.dev.maxRespRes)
	} else {
		id.respRes = param.ResponderResources
	}
	if id.qpType != qp.UD {
		if err := id.modifyQPRTR(id.respRes); err != nil {
			id.mu.Unlock()
			return wrapErr("accept", err)
		}
		if err := id.modifyQPRTS(id.initiatorDepth); err != nil {
			id.mu.Unlock()
			return wrapErr("accept", err)
		}
	}
	c := newCmd[abi.RdmaUcmAccept](abi.RDMA_USER_CM_CMD_ACCEPT)
	c.body.Id = id.handle
	c.body.Uid = id.uid
	n, srq := id.qpNumOf(param)
	if err := id.connParamToKern("accept", &c.body.Conn_param, param, n, srq); err != nil {
		id.mu.Unlock()
		return err
	}
	if err := execOn(f, c, id.ibOrRoCE()); err != nil {
		id.modifyQPErr()
		id.mu.Unlock()
		return wrapErr("accept", err)
	}
	ud := id.qpType == qp.UD
	id.mu.Unlock()
	if ud {
		return nil
	}
	return id.complete(ctx, "accept", EventEstablished)
}

// Reject rejects the connection request that created the ID (rdma_reject),
// sending privateData (at most MaxRejectPrivateData bytes on IB and RoCE)
// with the reject. The peer's REJECTED event carries it, with status 28
// (IB_CM_REJ_CONSUMER_DEFINED). The ID still has to be destroyed.
func (id *ID) Reject(privateData []byte) error {
	return id.reject(privateData, 0)
}

// RejectECE rejects with reason 35, "vendor option not supported"
// (rdma_reject_ece), for a peer whose enhanced connection establishment
// options are refused.
func (id *ID) RejectECE(privateData []byte) error {
	return id.reject(privateData, 35)
}

func (id *ID) reject(privateData []byte, reason uint8) error {
	return id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmReject](abi.RDMA_USER_CM_CMD_REJECT)
		c.body.Id = id.handle
		c.body.Reason = reason
		if len(privateData) > math.MaxUint8 {
			return errf("reject", unix.EINVAL, "%d bytes of private data, more than %d (the length is one byte)", len(privateData), math.MaxUint8)
		}
		c.body.Private_data_len = uint8(copy(c.body.Private_data[:], privateData))
		return wrapErr("reject", execOn(f, c, id.ibOrRoCE()))
	})
}

// Establish completes a connection on an ID without a QP (rdma_establish):
// after the CONNECT_RESPONSE event, once the program has moved its own QP
// to RTS, it tells the peer the connection is up.
func (id *ID) Establish() error {
	return id.withFile(func(ucmaFile) error {
		if id.qp.Load() != nil {
			return errf("establish", unix.EINVAL, "the ID has a QP; its CONNECT_RESPONSE is handled by GetEvent")
		}
		if err := id.establish(); err != nil {
			return err
		}
		id.setState(stateConnected)
		return nil
	})
}

// establish is librdmacm's ucma_process_conn_resp: the QP, if any, to RTR
// and RTS with the kernel's attributes, then the ready-to-use message (an
// ACCEPT without parameters). The caller holds id.mu.
func (id *ID) establish() error {
	if err := id.modifyQPRTR(MaxRespRes); err != nil {
		id.modifyQPErr()
		return err
	}
	if err := id.modifyQPRTS(MaxInitDepth); err != nil {
		id.modifyQPErr()
		return err
	}
	f, err := id.file()
	if err != nil {
		return err
	}
	c := newCmd[abi.RdmaUcmAccept](abi.RDMA_USER_CM_CMD_ACCEPT)
	c.body.Id = id.handle
	if err := execOn(f, c, id.ibOrRoCE()); err != nil {
		id.modifyQPErr()
		return wrapErr("establish", err)
	}
	return nil
}

// Notify reports an asynchronous QP event to the rdma_cm (rdma_notify),
// such as uverbs.EventCommEst when a message arrives on a QP before its
// ESTABLISHED event.
func (id *ID) Notify(event uverbs.EventType) error {
	return id.withFile(func(f ucmaFile) error {
		c := newCmd[abi.RdmaUcmNotify](abi.RDMA_USER_CM_CMD_NOTIFY)
		c.body.Id = id.handle
		c.body.Event = uint32(event)
		return wrapErr("notify", exec(f, c))
	})
}

// Disconnect disconnects (rdma_disconnect): it moves the ID's QP to the
// error state, which flushes its outstanding work requests, and tells the
// peer. A synchronous ID waits for the DISCONNECTED event, which comes when
// the peer disconnects too or stops answering, unless the peer's
// DISCONNECTED came first (its DREP is then sent, and nothing more comes).
// Disconnecting again does nothing, as does disconnecting after the
// keepalive (SetKeepAlive) reported the peer gone: the keepalive
// disconnected already.
func (id *ID) Disconnect(ctx context.Context) error {
	f, err := id.lockFile()
	if err != nil {
		return err
	}
	if id.disconnected {
		id.mu.Unlock()
		return nil
	}
	if id.dev == nil {
		id.mu.Unlock()
		return errf("disconnect", unix.EINVAL, "the ID is not bound to a device")
	}
	// ucma_shutdown: IB and RoCE flush the QP, iWARP drains it.
	if id.dev.transport() == uverbs.TransportIWARP {
		err = id.modifyQPState(qp.StateSQD)
	} else {
		err = id.modifyQPErr()
	}
	if err != nil {
		id.mu.Unlock()
		return wrapErr("disconnect", err)
	}
	err = id.sendDisconnect(f)
	id.setState(stateDisconnected)
	id.disconnected = err == nil
	peerDead, peerLeft := id.kaErr != nil, !id.peerGone.IsZero()
	id.mu.Unlock()
	if err != nil {
		return wrapErr("disconnect", err)
	}
	if peerDead || peerLeft {
		// The keepalive reported the peer gone: the DREQ will not be
		// answered, and the kernel's DISCONNECTED comes only when its
		// resends give up. Or the peer disconnected first, and its
		// DISCONNECTED was processed already: the command sent the
		// DREP, and no second DISCONNECTED follows (librdmacm's
		// rdma_disconnect then waits for TIMEWAIT_EXIT, the end of the
		// CM's time-wait, which tells the caller nothing). Nothing is
		// waiting for either.
		return nil
	}
	return id.complete(ctx, "disconnect", EventDisconnected)
}

// sendDisconnect sends the disconnect command (rdma_disconnect's write):
// the kernel sends the DREQ, or the DREP to a peer's. The caller holds
// id.mu.
func (id *ID) sendDisconnect(f ucmaFile) error {
	c := newCmd[abi.RdmaUcmDisconnect](abi.RDMA_USER_CM_CMD_DISCONNECT)
	c.body.Id = id.handle
	return execOn(f, c, id.ibOrRoCE())
}
