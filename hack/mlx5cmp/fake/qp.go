//go:build linux

package fake

import (
	"fmt"
	"syscall"

	"github.com/rdmago/rdma/internal/abi"
	qpv "github.com/rdmago/rdma/qp"
)

// MODIFY_QP and QUERY_QP: ib_uverbs_modify_qp/modify_qp, the core's
// ib_modify_qp_is_ok and mlx5_ib_modify_qp's range checks, and the
// attributes kept for QUERY_QP and the device side.

const (
	legacyAttrBits = 1<<21 - 1 // IB_USER_LEGACY_LAST_QP_ATTR_MASK << 1 - 1
	stateErr       = 6         // IB_QPS_ERR
)

func wModifyQP(w *wcall) error {
	f, p := w.f, w.f.k.p
	cmd := fromBytes[abi.IbUverbsModifyQp](w.core)
	qp, ok := lookup[*QP](f, objQP, cmd.Qp_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no QP %d", cmd.Qp_handle))
	}
	mask := cmd.Attr_mask
	if mask&^legacyAttrBits != 0 {
		return refuse(syscall.EOPNOTSUPP, fmt.Sprintf("attr_mask bits %#x", mask&^legacyAttrBits))
	}
	if mask&uint32(qpv.AttrPort) != 0 && cmd.Port_num != 1 {
		return refuse(syscall.EINVAL, fmt.Sprintf("port %d invalid", cmd.Port_num))
	}
	if (mask&uint32(qpv.AttrCurState) != 0 && cmd.Cur_qp_state > stateErr) || (mask&uint32(qpv.AttrState) != 0 && cmd.Qp_state > stateErr) {
		return refuse(syscall.EINVAL, "state out of range")
	}
	cur := qp.State
	if mask&uint32(qpv.AttrCurState) != 0 {
		cur = cmd.Cur_qp_state
	}
	next := cur
	if mask&uint32(qpv.AttrState) != 0 {
		next = cmd.Qp_state
	}
	// ib_modify_qp_is_ok's table. (It is the qp package's copy of the
	// kernel's table: a bug there would hide here.)
	if err := qpv.Validate(qpv.Type(qp.Type), qpv.State(cur), qpv.State(next), qpv.AttrMask(mask)); err != nil {
		return refuse(syscall.EINVAL, err.Error())
	}
	if mask&uint32(qpv.AttrPKeyIndex) != 0 && cmd.Pkey_index >= p.Device.Max_pkeys {
		return refuse(syscall.EINVAL, "pkey_index beyond the table")
	}
	if mask&uint32(qpv.AttrMaxQPRdAtomic) != 0 && uint32(cmd.Max_rd_atomic) > p.Device.Max_qp_init_rd_atom {
		return refuse(syscall.EINVAL, "max_rd_atomic above the device's")
	}
	if mask&uint32(qpv.AttrMaxDestRdAtomic) != 0 && uint32(cmd.Max_dest_rd_atomic) > p.Device.Max_qp_rd_atom {
		return refuse(syscall.EINVAL, "max_dest_rd_atomic above the device's")
	}
	if mask&uint32(qpv.AttrPathMTU) != 0 && (cmd.Path_mtu < 1 || cmd.Path_mtu > 5) {
		return refuse(syscall.EINVAL, fmt.Sprintf("path_mtu %d", cmd.Path_mtu))
	}
	if mask&uint32(qpv.AttrAV) != 0 {
		// RoCE: the address must be global (ib_resolve_eth_dmac) and
		// name a GID of the port.
		if p.Port.Link_layer == 2 && cmd.Dest.Is_global == 0 {
			return refuse(syscall.EINVAL, "RoCE address vector without GRH")
		}
		if cmd.Dest.Is_global != 0 {
			if _, ok := p.gidEntry(int(cmd.Dest.Sgid_index)); !ok {
				return refuse(syscall.EINVAL, fmt.Sprintf("sgid_index %d not in the GID table", cmd.Dest.Sgid_index))
			}
		}
	}
	for _, b := range w.uhwIn {
		if b != 0 {
			// mlx5_ib_modify_qp reads struct mlx5_ib_modify_qp; its
			// fields need capabilities the fake does not model.
			return refuse(syscall.EOPNOTSUPP, "mlx5 modify driver data")
		}
	}
	a := &qp.Attr
	set := func(bit qpv.AttrMask, apply func()) {
		if mask&uint32(bit) != 0 {
			apply()
		}
	}
	set(qpv.AttrQKey, func() { a.Qkey = cmd.Qkey })
	set(qpv.AttrRQPSN, func() { a.Rq_psn = cmd.Rq_psn })
	set(qpv.AttrSQPSN, func() { a.Sq_psn = cmd.Sq_psn })
	set(qpv.AttrDestQPN, func() { a.Dest_qp_num = cmd.Dest_qp_num })
	set(qpv.AttrAccessFlags, func() { a.Qp_access_flags = cmd.Qp_access_flags })
	set(qpv.AttrPKeyIndex, func() { a.Pkey_index = cmd.Pkey_index })
	set(qpv.AttrPathMTU, func() { a.Path_mtu = cmd.Path_mtu })
	set(qpv.AttrPathMigState, func() { a.Path_mig_state = cmd.Path_mig_state })
	set(qpv.AttrMaxQPRdAtomic, func() { a.Max_rd_atomic = cmd.Max_rd_atomic })
	set(qpv.AttrMaxDestRdAtomic, func() { a.Max_dest_rd_atomic = cmd.Max_dest_rd_atomic })
	set(qpv.AttrMinRNRTimer, func() { a.Min_rnr_timer = cmd.Min_rnr_timer })
	set(qpv.AttrPort, func() { a.Port_num = cmd.Port_num })
	set(qpv.AttrTimeout, func() { a.Timeout = cmd.Timeout })
	set(qpv.AttrRetryCnt, func() { a.Retry_cnt = cmd.Retry_cnt })
	set(qpv.AttrRNRRetry, func() { a.Rnr_retry = cmd.Rnr_retry })
	set(qpv.AttrAV, func() { a.Dest = cmd.Dest })
	set(qpv.AttrAltPath, func() {
		a.Alt_dest, a.Alt_pkey_index, a.Alt_port_num, a.Alt_timeout = cmd.Alt_dest, cmd.Alt_pkey_index, cmd.Alt_port_num, cmd.Alt_timeout
	})
	set(qpv.AttrEnSQDAsyncNotify, func() {})
	qp.State = next
	if next == 0 { // RESET clears the QP's progress
		a.Rq_psn, a.Sq_psn = 0, 0
	}
	return nil
}

func wQueryQP(w *wcall) error {
	req := fromBytes[abi.IbUverbsQueryQp](w.core)
	qp, ok := lookup[*QP](w.f, objQP, req.Qp_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no QP %d", req.Qp_handle))
	}
	r := qp.Attr
	r.Qp_state, r.Cur_qp_state = qp.State, qp.State
	r.Max_send_wr, r.Max_recv_wr = qp.Caps.Max_send_wr, qp.Caps.Max_recv_wr
	r.Max_send_sge, r.Max_recv_sge = qp.Caps.Max_send_sge, qp.Caps.Max_recv_sge
	r.Max_inline_data = qp.Caps.Max_inline_data
	if qp.SigAll {
		r.Sq_sig_all = 1
	}
	return w.respond(bytesOf(&r))
}
