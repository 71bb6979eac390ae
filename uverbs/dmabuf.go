package uverbs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// RegDMABufMR registers length bytes at offset of the dma-buf fd, a
// buffer another driver exports (a GPU's memory, a udmabuf), with the
// device (ibv_reg_dmabuf_mr, UVERBS_METHOD_REG_DMABUF_MR). iova is the
// address SGEs and peers name the region's first byte by (MR.Addr); the
// region has no memory in this process (MR.Bytes is nil). The kernel holds
// its own reference to the dma-buf: fd may be closed once this returns.
//
// A device or kernel without dma-buf registration refuses with an error
// matching errors.ErrUnsupported (EOPNOTSUPP; rxe has none); one whose
// kernel predates the method (before Linux 5.12) with EPROTONOSUPPORT.
// Unproven on GPU memory: no hardware here exports any.
func (pd *PD) RegDMABufMR(offset, length, iova uint64, fd int, access wr.Access) (*MR, error) {
	const op = "reg dma-buf MR"
	switch {
	case pd == nil:
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", errNil)}
	case length == 0:
		return nil, &Error{Op: op, Err: fmt.Errorf("empty region: %w", unix.EINVAL)}
	case fd < 0 || fd > 1<<31-1:
		return nil, &Error{Op: op, Err: fmt.Errorf("descriptor %d: %w", fd, unix.EBADF)}
	case offset+length < offset || iova+length < iova:
		return nil, &Error{Op: op, Err: fmt.Errorf("region wraps: %w", unix.EINVAL)}
	}
	if err := checkRegAccess(access); err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	if err := pd.use(); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("PD: %w", err)}
	}
	defer pd.done()
	var lkey, rkey uint32
	cmd := newCommand(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_REG_DMABUF_MR)
	defer cmd.release()
	cmd.driverID = pd.ctx.dev.DriverID
	h := cmd.idrNew(abi.UVERBS_ATTR_REG_DMABUF_MR_HANDLE)
	cmd.idrIn(abi.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE, pd.handle)
	cmd.constIn(abi.UVERBS_ATTR_REG_DMABUF_MR_OFFSET, offset)
	cmd.constIn(abi.UVERBS_ATTR_REG_DMABUF_MR_LENGTH, length)
	cmd.constIn(abi.UVERBS_ATTR_REG_DMABUF_MR_IOVA, iova)
	cmd.u32In(abi.UVERBS_ATTR_REG_DMABUF_MR_FD, uint32(fd))
	cmd.u32In(abi.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS, uint32(access))
	cmd.ptrOut(abi.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY, unsafe.Pointer(&lkey), 4)
	cmd.ptrOut(abi.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY, unsafe.Pointer(&rkey), 4)
	if err := cmd.execute(pd.ctx.f, op); err != nil {
		return nil, err
	}
	m := &MR{pd: pd, addr: iova, lkey: lkey, rkey: rkey}
	m.object = newObject(pd.ctx, kindMR, cmd.outIDR(h), pd)
	track(m, m.object)
	return m, nil
}
