package cm

import (
	"encoding/binary"
	"runtime"

	"github.com/rdmago/rdma/internal/abi"
)

// Options of SetOption: the kernel's RDMA_OPTION_* values (rdma_user_cm.h).
const (
	OptionLevelID = 0 // RDMA_OPTION_ID: level of the ID options below
	OptionLevelIB = 1 // RDMA_OPTION_IB

	OptionIDTOS        = 0 // RDMA_OPTION_ID_TOS, u8: type of service
	OptionIDReuseAddr  = 1 // RDMA_OPTION_ID_REUSEADDR, int: reuse the port while in timewait
	OptionIDAFOnly     = 2 // RDMA_OPTION_ID_AFONLY, int: an IPv6 bind excludes IPv4
	OptionIDAckTimeout = 3 // RDMA_OPTION_ID_ACK_TIMEOUT, u8: the QP's local ACK timeout
	OptionIBPath       = 1 // RDMA_OPTION_IB_PATH, struct ibv_path_data[]: set the route
)

// SetOption sets an option (rdma_set_option) with the value's bytes as the
// kernel reads them; the typed setters below are easier.
func (id *ID) SetOption(level, name uint32, value []byte) error {
	return id.withFile(func(f ucmaFile) error {
		// Heap memory, which the collector never moves; kept alive below
		// until the kernel has read it.
		val := make([]byte, max(len(value), 1))
		copy(val, value)
		c := newCmd[abi.RdmaUcmSetOption](abi.RDMA_USER_CM_CMD_SET_OPTION)
		c.body.Optval = ptr(&val[0])
		c.body.Id = id.handle
		c.body.Level = level
		c.body.Optname = name
		c.body.Optlen = uint32(len(value))
		err := exec(f, c)
		runtime.KeepAlive(val)
		return wrapErr("set option", err)
	})
}

func int32Bytes(v bool) []byte {
	b := make([]byte, 4)
	if v {
		binary.NativeEndian.PutUint32(b, 1)
	}
	return b
}

// SetTOS sets the type of service of the ID's traffic (RDMA_OPTION_ID_TOS).
func (id *ID) SetTOS(tos uint8) error { return id.SetOption(OptionLevelID, OptionIDTOS, []byte{tos}) }

// SetReuseAddr lets the ID bind a port still in timewait
// (RDMA_OPTION_ID_REUSEADDR).
func (id *ID) SetReuseAddr(on bool) error {
	return id.SetOption(OptionLevelID, OptionIDReuseAddr, int32Bytes(on))
}

// SetAFOnly makes an IPv6 bind exclude IPv4 (RDMA_OPTION_ID_AFONLY).
func (id *ID) SetAFOnly(on bool) error {
	return id.SetOption(OptionLevelID, OptionIDAFOnly, int32Bytes(on))
}

// SetAckTimeout sets the local ACK timeout of the ID's QP, 4.096 µs ×
// 2^timeout (RDMA_OPTION_ID_ACK_TIMEOUT).
func (id *ID) SetAckTimeout(timeout uint8) error {
	return id.SetOption(OptionLevelID, OptionIDAckTimeout, []byte{timeout})
}
