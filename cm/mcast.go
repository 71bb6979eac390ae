package cm

import (
	"context"
	"net/netip"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
)

// JoinFlags say how a UD ID joins a multicast group (RDMA_MC_JOIN_FLAG_*).
type JoinFlags uint16

// Join flags.
const (
	// JoinFullMember sends to and receives from the group.
	JoinFullMember JoinFlags = 0 // RDMA_MC_JOIN_FLAG_FULLMEMBER
	// JoinSendOnlyFullMember only sends; the QP is not attached.
	JoinSendOnlyFullMember JoinFlags = 1 // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
)

// multicast is one group an ID joined (librdmacm's struct cma_multicast).
type multicast struct {
	id       weak.Pointer[ID] // weak: the ID's idRes holds the group
	uid      uint64
	handle   uint32
	userData any
	addr     netip.Addr
	flags    JoinFlags
	joined   bool // the JOIN event came and the QP was attached
	mgid     qp.GID
	mlid     uint16
}

func registerMulticast(mc *multicast) {
	registry.mu.Lock()
	registry.mcs[mc.uid] = mc
	registry.mu.Unlock()
}

func unregisterMulticast(mc *multicast) {
	registry.mu.Lock()
	if registry.mcs[mc.uid] == mc {
		delete(registry.mcs, mc.uid)
	}
	registry.mu.Unlock()
}

func lookupMulticast(uid uint64) *multicast {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.mcs[uid]
}

// JoinMulticast joins the UD ID to the multicast group addr
// (rdma_join_multicast), which on RoCE is an IP multicast address. The ID
// must be bound to a device (BindAddr with a specific address, or
// ResolveAddr of the group). When the MULTICAST_JOIN event comes, the
// ID's QP, if it has one, is attached to the group; the event's UDParam
// gives the group's address vector, QP number (0xffffff) and Q_Key for
// sending to it. flags say how to join (JoinFullMember, the zero value, as
// rdma_join_multicast; JoinSendOnlyFullMember as rdma_join_multicast_ex
// allows). userData comes back as the event's UserData. A synchronous ID
// waits for the join.
func (id *ID) JoinMulticast(ctx context.Context, addr netip.Addr, flags JoinFlags, userData any) error {
	const op = "join multicast"
	if id.destroyed.Load() {
		return ErrClosed
	}
	if flags != JoinFullMember && flags != JoinSendOnlyFullMember {
		return errf(op, unix.EINVAL, "join flags %d", flags)
	}
	f, err := id.lockFile()
	if err != nil {
		return err
	}
	mc := &multicast{id: id.self, uid: newUID(), userData: userData, addr: addr, flags: flags}
	c := newCall[abi.RdmaUcmJoinMcast, abi.RdmaUcmCreateIdResp](abi.RDMA_USER_CM_CMD_JOIN_MCAST)
	resp := &c.resp
	c.body.Response = ptr(resp)
	c.body.Uid = mc.uid
	c.body.Id = id.handle
	c.body.Join_flags = uint16(flags)
	if err := setSockaddr(op, c.body.Addr.Anon0[:], &c.body.Addr_size, netip.AddrPortFrom(addr, 0)); err != nil {
		id.mu.Unlock()
		return err
	}
	// Registered first: the event may come before the write returns.
	registerMulticast(mc)
	if err := exec(f, &c.ucmaCmd); err != nil {
		unregisterMulticast(mc)
		id.mu.Unlock()
		return wrapErr(op, err)
	}
	mc.handle = resp.Id
	id.mcs = append(id.mcs, mc)
	id.mu.Unlock()
	return id.complete(ctx, op, EventMulticastJoin)
}

// processJoin completes a MULTICAST_JOIN: it records the group's GID and
// LID and attaches the ID's QP (ucma_process_join). The caller holds id.mu.
func (id *ID) processJoin(mc *multicast, ud *UDParam) error {
	mc.mgid = ud.AHAttr.DGID
	mc.mlid = ud.AHAttr.DLID
	q := id.qp.Load()
	if q == nil || mc.flags == JoinSendOnlyFullMember {
		return nil
	}
	if err := q.AttachMcast(mc.mgid, mc.mlid); err != nil {
		return err
	}
	mc.joined = true
	return nil
}

// LeaveMulticast leaves a group JoinMulticast joined
// (rdma_leave_multicast), detaching the ID's QP. A group never joined
// gives unix.EADDRNOTAVAIL.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	const op = "leave multicast"
	return id.withFile(func(f ucmaFile) error {
		var mc *multicast
		for i, m := range id.mcs {
			if m.addr == addr {
				mc = m
				id.mcs = append(id.mcs[:i], id.mcs[i+1:]...)
				break
			}
		}
		if mc == nil {
			return errf(op, unix.EADDRNOTAVAIL, "not a member of %v", addr)
		}
		unregisterMulticast(mc)
		if q := id.qp.Load(); q != nil && mc.joined {
			q.DetachMcast(mc.mgid, mc.mlid)
		}
		c := newCall[abi.RdmaUcmDestroyId, abi.RdmaUcmDestroyIdResp](abi.RDMA_USER_CM_CMD_LEAVE_MCAST)
		c.body.Response = ptr(&c.resp)
		c.body.Id = mc.handle
		return wrapErr(op, exec(f, &c.ucmaCmd))
	})
}
