package uverbs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
)

// What package cm (rdma_cm) needs of the verbs beyond the rest of the API.

// DeviceByGUID returns the device with the given node GUID, as rdma_cm names
// the device an ID is bound to. index is the kernel's device index, which
// tells apart devices that share a GUID (several rxe devices on one host
// may); ^uint32(0) matches any index, as does a device whose index is
// unknown.
func DeviceByGUID(guid GUID, index uint32) (Device, error) {
	devs, err := Devices()
	if err != nil {
		return Device{}, err
	}
	for _, d := range devs {
		if d.NodeGUID == guid && (index == ^uint32(0) || d.Index == 0 || d.Index == index) {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("uverbs: no RDMA device with node GUID %v (index %d): %w", guid, index, unix.ENODEV)
}

// AttachMcast attaches the QP, which must be UD, to the multicast group gid
// with LID lid (ibv_attach_mcast): it then receives the group's messages.
func (q *QP) AttachMcast(gid qp.GID, lid uint16) error {
	return q.mcast(abi.IB_USER_VERBS_CMD_ATTACH_MCAST, gid, lid, "attach mcast")
}

// DetachMcast undoes AttachMcast (ibv_detach_mcast).
func (q *QP) DetachMcast(gid qp.GID, lid uint16) error {
	return q.mcast(abi.IB_USER_VERBS_CMD_DETACH_MCAST, gid, lid, "detach mcast")
}

func (q *QP) mcast(cmdID uint32, gid qp.GID, lid uint16, op string) error {
	if q == nil {
		return errNil
	}
	if err := q.use(); err != nil {
		return err
	}
	defer q.done()
	// ib_uverbs_attach_mcast and ib_uverbs_detach_mcast have one layout.
	req := &abi.IbUverbsAttachMcast{Gid: gid, Qp_handle: q.handle, Mlid: lid}
	return q.ctx.invokeWrite(cmdID, unsafe.Pointer(req), int(unsafe.Sizeof(*req)), nil, 0, op)
}
