package uverbs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
)

// XRCD is an XRC domain (struct ibv_xrcd): the scope of XRC receive QPs
// and XRC SRQs. An extended reliable connection (XRC) lets one send QP
// (qp.XRCSend) deliver into any XRC SRQ of the domain at the far end, each
// send naming its SRQ (wr.SendWR.RemoteSRQN), so N processes on a node
// need one connection per remote node instead of one per remote process.
// A domain opened on a file is shared by every process that opens it on
// the same file, and its receive QPs can be opened (OpenQP) by all of
// them.
type XRCD struct {
	*object
}

// OpenXRCD opens an XRC domain (ibv_open_xrcd). With fd -1 the domain is
// this context's own, and flags must hold unix.O_CREAT. With the
// descriptor of an open file, the kernel finds the domain of that file
// (its inode): flags unix.O_CREAT creates it when there is none yet, and
// unix.O_CREAT|unix.O_EXCL fails with EEXIST when there is one; without
// O_CREAT a file with no domain fails with EINVAL. Other flags are
// refused with EINVAL.
//
// A device without XRC (DeviceCaps lacks DeviceXRC; rxe on every kernel
// tested) refuses with EOPNOTSUPP, which matches errors.ErrUnsupported.
func (c *Context) OpenXRCD(fd int, flags int) (*XRCD, error) {
	const op = "open XRCD"
	if fd < -1 || fd > 1<<31-1 {
		return nil, &Error{Op: op, Err: fmt.Errorf("descriptor %d: %w", fd, unix.EBADF)}
	}
	if flags&^(unix.O_CREAT|unix.O_EXCL) != 0 {
		return nil, &Error{Op: op, Err: fmt.Errorf("flags %#x: only O_CREAT and O_EXCL are allowed: %w", flags, unix.EINVAL)}
	}
	req := &abi.IbUverbsOpenXrcd{Fd: uint32(int32(fd)), Oflags: uint32(flags)}
	resp, err := writeCmd[abi.IbUverbsOpenXrcdResp](c, abi.IB_USER_VERBS_CMD_OPEN_XRCD, req, op)
	if err != nil {
		return nil, err
	}
	x := &XRCD{object: newObject(c, kindXRCD, resp.Xrcd_handle)}
	track(x, x.object)
	return x, nil
}

// Context returns the context the domain was opened on.
func (x *XRCD) Context() *Context { return x.ctx }

// Close closes the domain (ibv_close_xrcd). The kernel refuses while XRC
// SRQs or receive QPs of this context use it (EBUSY); a domain shared
// through a file lives on while another process has it open.
func (x *XRCD) Close() error {
	if x == nil {
		return errNil
	}
	return x.close()
}

func (x *XRCD) xrcdObject() *object {
	if x == nil {
		return nil
	}
	return x.object
}

// CreateXRCSRQ creates an XRC SRQ in domain xrcd (ibv_create_srq_ex with
// IBV_SRQT_XRC): the receives of the domain's receive QPs for the sends
// that name its number (SRQ.Num). Its completions go to cq; the PD holds
// the memory its receives name.
func (pd *PD) CreateXRCSRQ(xrcd *XRCD, cq *CQ, attr SRQAttr) (*SRQ, error) {
	const op = "create XRC SRQ"
	if xrcd == nil || cq == nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("an XRC domain and a CQ are required: %w", unix.EINVAL)}
	}
	done, err := useAll(op, []*object{pd.pdObject(), xrcd.object, cq.object}, []string{"PD", "XRCD", "CQ"})
	if err != nil {
		return nil, err
	}
	defer done()
	if xrcd.ctx != pd.ctx || cq.ctx != pd.ctx {
		return nil, &Error{Op: op, Err: fmt.Errorf("XRCD or CQ of another context: %w", unix.EINVAL)}
	}
	return pd.createSRQ(op, attr, xrcd, cq)
}

// Num returns the SRQ's number (ibv_get_srq_num): what XRC sends name it
// by (wr.SendWR.RemoteSRQN). Only an XRC SRQ has one: another gets
// EOPNOTSUPP.
func (s *SRQ) Num() (uint32, error) {
	if s == nil {
		return 0, errNil
	}
	if s.xrcd == nil {
		return 0, &Error{Op: "get SRQ num", Err: fmt.Errorf("not an XRC SRQ: %w", unix.EOPNOTSUPP)}
	}
	return s.num, nil
}

// CreateRecvQP creates an XRC receive QP in the domain (ibv_create_qp_ex
// with IBV_QPT_XRC_RECV): the target of one XRC connection, with no queues
// of its own. What the peer's XRC send QP sends lands in the domain's XRC
// SRQ each send names, and completes on that SRQ's CQ. Move it through
// INIT, RTR and RTS as an RC QP (the transitions' attributes are XRC's,
// qp.Validate); it posts nothing. Other processes sharing the domain can
// open it by number (OpenQP).
func (x *XRCD) CreateRecvQP() (*QP, error) {
	const op = "create QP"
	if err := x.xrcdObject().use(); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("XRCD: %w", err)}
	}
	defer x.done()
	c := x.ctx
	pc, err := c.providerContext(op)
	if err != nil {
		return nil, err
	}
	b, err := pc.NewQP(provider.QPInitAttr{Type: qp.XRCRecv})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	q := &QP{typ: qp.XRCRecv, xrcd: x}
	id := c.nextID.Add(1)
	capIn, capOut := new(abi.IbUverbsQpCap), new(abi.IbUverbsQpCap)
	qpNum := new(uint32)
	cmd := newCommand(abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_CREATE)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	h := cmd.idrNew(abi.UVERBS_ATTR_CREATE_QP_HANDLE)
	// The kernel refuses a PD, CQs or an SRQ with an XRC_TGT QP: the
	// domain stands for all of them.
	cmd.idrIn(abi.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE, x.handle)
	cmd.constIn(abi.UVERBS_ATTR_CREATE_QP_USER_HANDLE, id)
	cmd.ptrIn(abi.UVERBS_ATTR_CREATE_QP_CAP, unsafe.Pointer(capIn), int(unsafe.Sizeof(*capIn)))
	cmd.constIn(abi.UVERBS_ATTR_CREATE_QP_TYPE, abi.IB_UVERBS_QPT_XRC_TGT)
	if c.asyncFD >= 0 {
		cmd.fdIn(abi.UVERBS_ATTR_CREATE_QP_EVENT_FD, c.asyncFD)
	}
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_QP_RESP_CAP, unsafe.Pointer(capOut), int(unsafe.Sizeof(*capOut)))
	cmd.ptrOut(abi.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, unsafe.Pointer(qpNum), 4)
	if q.object, err = c.createObject(cmd, h, b, kindQP, id, op, x); err != nil {
		return nil, err
	}
	q.num, q.qpn = *qpNum, *qpNum
	if err := finishCreate(&q.prov, q.object, b, provider.Created{Handle: q.handle, QPNum: q.num}, op, false); err != nil {
		return nil, err
	}
	if err := registered(registerQP(c, q), q.object, op); err != nil {
		return nil, err
	}
	return q, nil
}

// OpenQP opens the XRC receive QP numbered num of the domain
// (ibv_open_qp), which a process sharing the domain through its file
// created: this process can then modify and query it, and its async
// events reach this context too. Close closes this opening only; the QP
// lives until its creator and every opener closed it. The QP's state
// starts as the local view's RESET (libibverbs says UNKNOWN): Query asks
// the kernel.
func (x *XRCD) OpenQP(num uint32) (*QP, error) {
	const op = "open QP"
	if err := x.xrcdObject().use(); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("XRCD: %w", err)}
	}
	defer x.done()
	c := x.ctx
	id := c.nextID.Add(1)
	req := &abi.IbUverbsOpenQp{User_handle: id, Pd_handle: x.handle, Qpn: num, Qp_type: abi.IB_UVERBS_QPT_XRC_TGT}
	resp, err := writeCmd[abi.IbUverbsCreateQpResp](c, abi.IB_USER_VERBS_CMD_OPEN_QP, req, op)
	if err != nil {
		return nil, err
	}
	q := &QP{typ: qp.XRCRecv, xrcd: x, opened: true, num: num}
	q.object = newObject(c, kindQP, resp.Qp_handle, x)
	// The number stays out of the object (qpn) and the context's map of
	// numbers, which a creator in this context holds: closing this opening
	// must not forget it.
	q.id = id
	if err := registered(registerQP(c, q), q.object, op); err != nil {
		return nil, err
	}
	return q, nil
}
