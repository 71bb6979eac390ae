//go:build linux

package fake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// The write commands (uverbs_cmd.c), reached by write(2) or wrapped in
// UVERBS_METHOD_INVOKE_WRITE. Both paths end in one handler that sees the
// core request, the driver data and where the responses go.

// writeSpec is a write command as DECLARE_UVERBS_WRITE declares it.
type writeSpec struct {
	name     string
	ex       bool
	req      any // *zero uapi request struct
	resp     any // *zero uapi response struct, nil without one
	reqSize  int // the kernel's req_size
	respSize int // resp_size
	udIn     any // driver data structs, for the event
	udOut    any
	run      func(w *wcall) error
}

// wcall is one write command being handled.
type wcall struct {
	f       *File
	m       Mem
	ev      *Event
	core    []byte // the core request (after the headers)
	uhwIn   []byte
	outAddr uint64 // core response
	outLen  int
	udAddr  uint64 // driver response
	udLen   int
	spec    *writeSpec
	// invoke: the INVOKE_WRITE call, whose CORE_OUT and UHW_OUT are
	// marked valid when written.
	invoke *call
}

// respond writes the core response as uverbs_response does: at most
// outLen bytes, the rest of the caller's buffer zeroed.
func (w *wcall) respond(b []byte) error {
	if w.invoke != nil {
		return w.invoke.out(abi.UVERBS_ATTR_CORE_OUT, b)
	}
	buf := make([]byte, w.outLen)
	copy(buf, b)
	if w.outLen > 0 {
		if err := w.m.WriteAt(buf, w.outAddr); err != nil {
			return refuse(syscall.EFAULT, "writing the response")
		}
	}
	w.ev.Out = append(w.ev.Out, decodeStruct("core", w.spec.resp, b[:min(len(b), w.outLen)])...)
	return nil
}

// udata writes driver data as ib_copy_to_udata, at most the room given.
func (w *wcall) udata(b []byte) error {
	if w.invoke != nil {
		return w.invoke.out(abi.UVERBS_ATTR_UHW_OUT, b)
	}
	n := min(len(b), w.udLen)
	if n == 0 {
		return nil
	}
	if err := w.m.WriteAt(b[:n], w.udAddr); err != nil {
		return refuse(syscall.EFAULT, "writing driver data")
	}
	w.ev.Out = append(w.ev.Out, decodeStruct("UHW_OUT", w.spec.udOut, b[:n])...)
	return nil
}

func sizeOf[T any]() int { var z T; return int(unsafe.Sizeof(z)) }

var writes = map[uint32]*writeSpec{}

func init() {
	ex := abi.IB_USER_VERBS_CMD_FLAG_EXTENDED
	for cmd, s := range map[uint32]*writeSpec{
		abi.IB_USER_VERBS_CMD_QUERY_DEVICE: {name: "QUERY_DEVICE", req: new(abi.IbUverbsQueryDevice), resp: new(abi.IbUverbsQueryDeviceResp),
			reqSize: sizeOf[abi.IbUverbsQueryDevice](), respSize: sizeOf[abi.IbUverbsQueryDeviceResp](), run: wQueryDevice},
		uint32(ex) | abi.IB_USER_VERBS_EX_CMD_QUERY_DEVICE: {name: "EX_QUERY_DEVICE", ex: true,
			req: new(abi.IbUverbsExQueryDevice), resp: new(abi.IbUverbsExQueryDeviceResp),
			reqSize:  sizeOf[abi.IbUverbsExQueryDevice](),
			respSize: int(unsafe.Offsetof(abi.IbUverbsExQueryDeviceResp{}.Response_length)) + 4,
			udOut:    new(abi.Mlx5IbQueryDeviceResp), run: wExQueryDevice},
		abi.IB_USER_VERBS_CMD_QUERY_PORT: {name: "QUERY_PORT", req: new(abi.IbUverbsQueryPort), resp: new(abi.IbUverbsQueryPortResp),
			reqSize: sizeOf[abi.IbUverbsQueryPort](), respSize: sizeOf[abi.IbUverbsQueryPortResp](), run: wQueryPort},
		abi.IB_USER_VERBS_CMD_ALLOC_PD: {name: "ALLOC_PD", req: new(abi.IbUverbsAllocPd), resp: new(abi.IbUverbsAllocPdResp),
			reqSize: sizeOf[abi.IbUverbsAllocPd](), respSize: sizeOf[abi.IbUverbsAllocPdResp](),
			udOut: new(abi.Mlx5IbAllocPdResp), run: wAllocPD},
		abi.IB_USER_VERBS_CMD_DEALLOC_PD: {name: "DEALLOC_PD", req: new(abi.IbUverbsDeallocPd),
			reqSize: sizeOf[abi.IbUverbsDeallocPd](), run: wDeallocPD},
		abi.IB_USER_VERBS_CMD_REG_MR: {name: "REG_MR", req: new(abi.IbUverbsRegMr), resp: new(abi.IbUverbsRegMrResp),
			reqSize: sizeOf[abi.IbUverbsRegMr](), respSize: sizeOf[abi.IbUverbsRegMrResp](), run: wRegMR},
		abi.IB_USER_VERBS_CMD_DEREG_MR: {name: "DEREG_MR", req: new(abi.IbUverbsDeregMr),
			reqSize: sizeOf[abi.IbUverbsDeregMr](), run: wDeregMR},
		abi.IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: {name: "CREATE_COMP_CHANNEL", req: new(abi.IbUverbsCreateCompChannel),
			resp: new(abi.IbUverbsCreateCompChannelResp), reqSize: sizeOf[abi.IbUverbsCreateCompChannel](),
			respSize: sizeOf[abi.IbUverbsCreateCompChannelResp](), run: wCreateCompChannel},
		abi.IB_USER_VERBS_CMD_MODIFY_QP: {name: "MODIFY_QP", req: new(abi.IbUverbsModifyQp),
			reqSize: sizeOf[abi.IbUverbsModifyQp](), udIn: new(abi.Mlx5IbModifyQp), run: wModifyQP},
		abi.IB_USER_VERBS_CMD_QUERY_QP: {name: "QUERY_QP", req: new(abi.IbUverbsQueryQp), resp: new(abi.IbUverbsQueryQpResp),
			reqSize: sizeOf[abi.IbUverbsQueryQp](), respSize: sizeOf[abi.IbUverbsQueryQpResp](), run: wQueryQP},
		abi.IB_USER_VERBS_CMD_DESTROY_QP: {name: "DESTROY_QP", req: new(abi.IbUverbsDestroyQp), resp: new(abi.IbUverbsDestroyQpResp),
			reqSize: sizeOf[abi.IbUverbsDestroyQp](), respSize: sizeOf[abi.IbUverbsDestroyQpResp](), run: wDestroyQP},
		abi.IB_USER_VERBS_CMD_DESTROY_CQ: {name: "DESTROY_CQ", req: new(abi.IbUverbsDestroyCq), resp: new(abi.IbUverbsDestroyCqResp),
			reqSize: sizeOf[abi.IbUverbsDestroyCq](), respSize: sizeOf[abi.IbUverbsDestroyCqResp](), run: wDestroyCQ},
	} {
		writes[cmd] = s
	}
}

// writeName names a write command for events, known or not.
func writeName(cmd uint32) string {
	if s := writes[cmd]; s != nil {
		return s.name
	}
	if cmd&abi.IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
		return fmt.Sprintf("EX_CMD_%d", cmd&0xff)
	}
	return fmt.Sprintf("CMD_%d", cmd)
}

// lookupWrite is uapi_get_method.
func lookupWrite(cmd uint32) (*writeSpec, error) {
	if cmd&^(abi.IB_USER_VERBS_CMD_FLAG_EXTENDED|abi.IB_USER_VERBS_CMD_COMMAND_MASK) != 0 {
		return nil, refuse(syscall.EINVAL, "command bits")
	}
	s := writes[cmd]
	if s == nil {
		return nil, refuse(syscall.EOPNOTSUPP, "command not emulated")
	}
	return s, nil
}

// runInvokeWrite is UVERBS_METHOD_INVOKE_WRITE.
func runInvokeWrite(c *call) error {
	cmd := uint32(c.u64(abi.UVERBS_ATTR_WRITE_CMD))
	ev := c.ev
	ev.Path, ev.Object, ev.Method = "invoke_write", "", writeName(cmd)
	ev.In = nil
	s, err := lookupWrite(cmd)
	if err != nil {
		return err
	}
	w := &wcall{f: c.f, m: c.m, ev: ev, spec: s, invoke: c, core: c.in(abi.UVERBS_ATTR_CORE_IN), uhwIn: c.in(abi.UVERBS_ATTR_UHW_IN)}
	if a, ok := c.attrs[abi.UVERBS_ATTR_CORE_OUT]; ok {
		w.outLen = int(a.len)
		a.spec = &attrSpec{id: a.spec.id, name: "core", kind: ptrOut, typ: s.resp}
	}
	if a, ok := c.attrs[abi.UVERBS_ATTR_UHW_OUT]; ok {
		w.udLen = int(a.len)
		a.spec = &attrSpec{id: a.spec.id, name: "UHW_OUT", kind: ptrOut, typ: s.udOut}
	}
	w.decodeIn()
	if len(w.core) < s.reqSize || w.outLen < s.respSize {
		return refuse(syscall.ENOSPC, fmt.Sprintf("core in %d/%d, out %d/%d bytes", len(w.core), s.reqSize, w.outLen, s.respSize))
	}
	return w.run()
}

func (w *wcall) decodeIn() {
	if w.core != nil || w.spec.reqSize == 0 {
		w.ev.In = append(w.ev.In, decodeStruct("core", w.spec.req, w.core)...)
	}
	if len(w.uhwIn) > 0 {
		if w.spec.udIn != nil {
			w.ev.In = append(w.ev.In, decodeStruct("UHW_IN", w.spec.udIn, w.uhwIn)...)
		} else {
			w.ev.In = append(w.ev.In, Field{"UHW_IN", append([]byte(nil), w.uhwIn...)})
		}
	}
	if w.invoke == nil || w.outLen > 0 {
		w.ev.In = append(w.ev.In, Field{"core_out.len", uint64(w.outLen)})
	}
	if w.udLen > 0 {
		w.ev.In = append(w.ev.In, Field{"UHW_OUT.len", uint64(w.udLen)})
	}
}

func (w *wcall) run() error {
	if w.f.ctx == nil {
		return refuse(syscall.EINVAL, "no ucontext yet")
	}
	return w.spec.run(w)
}

// Write handles write(2) of a command on the device file; buf is what
// the target wrote.
func (f *File) Write(m Mem, buf []byte) (int64, syscall.Errno) {
	k := f.k
	k.mu.Lock()
	k.seq++
	ev := Event{Seq: k.seq, File: f.ID, Path: "write"}
	err := f.write(m, buf, &ev)
	if err != nil {
		var en *errno
		if !errors.As(err, &en) {
			en = &errno{syscall.EINVAL, err.Error()}
		}
		ev.Errno, ev.Note, ev.Ret = en.e, en.note, -1
	} else {
		ev.Ret = int64(len(buf))
	}
	k.mu.Unlock()
	k.emit(ev)
	return ev.Ret, ev.Errno
}

// write is ib_uverbs_write with verify_hdr.
func (f *File) write(m Mem, buf []byte, ev *Event) error {
	le := binary.LittleEndian
	if len(buf) < 8 {
		ev.Method = "?"
		return refuse(syscall.EINVAL, "shorter than the header")
	}
	cmd, inWords, outWords := le.Uint32(buf), int(le.Uint16(buf[4:])), int(le.Uint16(buf[6:]))
	ev.Method = writeName(cmd)
	if f.closed {
		return refuse(syscall.EIO, "file closed")
	}
	s, err := lookupWrite(cmd)
	if err != nil {
		return err
	}
	w := &wcall{f: f, m: m, ev: ev, spec: s}
	if !s.ex {
		if inWords*4 != len(buf) {
			return refuse(syscall.EINVAL, "in_words*4 != count")
		}
		inLen, outLen := len(buf)-8, outWords*4
		if inLen < s.reqSize || outLen < s.respSize {
			return refuse(syscall.ENOSPC, "request or response too short")
		}
		w.core = buf[8 : 8+s.reqSize]
		w.uhwIn = buf[8+s.reqSize:]
		if s.resp != nil {
			// The request's first field is the response's address.
			w.outAddr, w.outLen = le.Uint64(w.core), s.respSize
			w.udAddr, w.udLen = w.outAddr+uint64(s.respSize), outLen-s.respSize
		}
	} else {
		if len(buf) < 8+16 {
			return refuse(syscall.EINVAL, "shorter than the extended header")
		}
		exh := fromBytes[abi.IbUverbsExCmdHdr](buf[8:24])
		if exh.Cmd_hdr_reserved != 0 {
			return refuse(syscall.EINVAL, "cmd_hdr_reserved")
		}
		if (inWords+int(exh.Provider_in_words))*8 != len(buf)-24 {
			return refuse(syscall.EINVAL, "in words do not match the count")
		}
		if exh.Response != 0 && outWords == 0 && exh.Provider_out_words == 0 {
			return refuse(syscall.EINVAL, "response without out words")
		}
		if exh.Response == 0 && (outWords != 0 || exh.Provider_out_words != 0) {
			return refuse(syscall.EINVAL, "out words without a response")
		}
		w.core = buf[24 : 24+inWords*8]
		w.uhwIn = buf[24+inWords*8:]
		w.outAddr, w.outLen = exh.Response, outWords*8
		w.udAddr, w.udLen = exh.Response+uint64(outWords*8), int(exh.Provider_out_words)*8
		ev.In = append(ev.In, Field{"ex_hdr.response", Addr(exh.Response)})
		if len(w.core) < s.reqSize || w.outLen < s.respSize {
			return refuse(syscall.ENOSPC, "request or response too short")
		}
	}
	w.decodeIn()
	return w.run()
}

// request decodes the core request, requiring a longer one's tail to be
// zero (uverbs_request).
func request[T any](w *wcall) (*T, error) {
	n := sizeOf[T]()
	for _, b := range w.core[min(n, len(w.core)):] {
		if b != 0 {
			return nil, refuse(syscall.EOPNOTSUPP, "non-zero bytes past the request")
		}
	}
	return fromBytes[T](w.core), nil
}

func wQueryDevice(w *wcall) error {
	r := w.f.k.p.Device
	return w.respond(bytesOf(&r))
}

func wExQueryDevice(w *wcall) error {
	req, err := request[abi.IbUverbsExQueryDevice](w)
	if err != nil {
		return err
	}
	if req.Comp_mask != 0 || req.Reserved != 0 {
		return refuse(syscall.EINVAL, "comp_mask or reserved")
	}
	for _, b := range w.uhwIn {
		if b != 0 {
			return refuse(syscall.EINVAL, "driver data not cleared")
		}
	}
	p := w.f.k.p
	r := p.DeviceEx
	r.Base = p.Device
	r.Comp_mask = 0
	r.Response_length = uint32(min(w.outLen, sizeOf[abi.IbUverbsExQueryDeviceResp]()))
	if err := w.respond(bytesOf(&r)); err != nil {
		return err
	}
	if w.udLen > 0 {
		d := p.Mlx5QueryDevice
		d.Response_length = uint32(min(w.udLen, sizeOf[abi.Mlx5IbQueryDeviceResp]()))
		return w.udata(bytesOf(&d))
	}
	return nil
}

func wQueryPort(w *wcall) error {
	req := fromBytes[abi.IbUverbsQueryPort](w.core)
	if req.Port_num != 1 {
		return refuse(syscall.EINVAL, fmt.Sprintf("port %d invalid", req.Port_num))
	}
	r := w.f.k.p.Port
	return w.respond(bytesOf(&r))
}

func wAllocPD(w *wcall) error {
	f := w.f
	pd := &PD{File: f}
	h := f.alloc(objPD, pd)
	pd.Handle = h
	r := abi.IbUverbsAllocPdResp{Pd_handle: h}
	if err := w.respond(bytesOf(&r)); err != nil {
		delete(f.ids[objPD], h)
		return err
	}
	pdn := abi.Mlx5IbAllocPdResp{Pdn: f.k.nextPDN()}
	return w.udata(bytesOf(&pdn))
}

func wDeallocPD(w *wcall) error {
	req := fromBytes[abi.IbUverbsDeallocPd](w.core)
	return w.f.deallocPD(req.Pd_handle, syscall.EINVAL)
}

// Access flags (enum ib_access_flags).
const (
	accessLocalWrite   = 1
	accessRemoteWrite  = 2
	accessRemoteRead   = 4
	accessRemoteAtomic = 8
	accessMWBind       = 16
	accessZeroBased    = 32
	accessOnDemand     = 64
	accessSupported    = 0x1fffff // IB_ACCESS_SUPPORTED on 6.x, with the optional range
)

func wRegMR(w *wcall) error {
	f := w.f
	req := fromBytes[abi.IbUverbsRegMr](w.core)
	if req.Start&(pageSize-1) != req.Hca_va&(pageSize-1) {
		return refuse(syscall.EINVAL, "start and hca_va differ within the page")
	}
	// ib_check_mr_access.
	a := req.Access_flags
	if a&^accessSupported != 0 {
		return refuse(syscall.EINVAL, "unknown access flags")
	}
	if a&(accessRemoteWrite|accessRemoteAtomic) != 0 && a&accessLocalWrite == 0 {
		return refuse(syscall.EINVAL, "remote write or atomic without local write")
	}
	if a&accessOnDemand != 0 && f.k.p.DeviceEx.Odp_caps.General_caps == 0 {
		return refuse(syscall.EOPNOTSUPP, "on-demand paging")
	}
	pd, ok := lookup[*PD](f, objPD, req.Pd_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no PD %d", req.Pd_handle))
	}
	if req.Length == 0 || !readable(w.m, req.Start, req.Length) {
		return refuse(syscall.EFAULT, "region not mapped (ib_umem_get)")
	}
	k := f.k
	key := k.mkeyIdx<<8 | uint32(k.mkeyVar)
	mr := &MR{File: f, PD: pd.Handle, Addr: Addr(req.Start), Length: req.Length, IOVA: req.Hca_va,
		Access: Hex(a), LKey: key, RKey: key}
	mr.Handle = f.alloc(objMR, mr)
	r := abi.IbUverbsRegMrResp{Mr_handle: mr.Handle, Lkey: key, Rkey: key}
	if err := w.respond(bytesOf(&r)); err != nil {
		delete(f.ids[objMR], mr.Handle)
		return err
	}
	k.mkeyIdx++
	k.mkeyVar++
	pd.users++
	k.mrs = append(k.mrs, mr)
	return nil
}

func wDeregMR(w *wcall) error {
	req := fromBytes[abi.IbUverbsDeregMr](w.core)
	return w.f.deregMR(req.Mr_handle, syscall.EINVAL)
}

func wCreateCompChannel(w *wcall) error {
	fd, err := w.f.newFD("comp_channel")
	if err != nil {
		return err
	}
	r := abi.IbUverbsCreateCompChannelResp{Fd: uint32(fd)}
	return w.respond(bytesOf(&r))
}

func wDestroyQP(w *wcall) error {
	req := fromBytes[abi.IbUverbsDestroyQp](w.core)
	qp, ok := lookup[*QP](w.f, objQP, req.Qp_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no QP %d", req.Qp_handle))
	}
	var r abi.IbUverbsDestroyQpResp
	if err := w.respond(bytesOf(&r)); err != nil {
		return err
	}
	w.f.destroyLocked(qp)
	delete(w.f.ids[objQP], req.Qp_handle)
	return nil
}

func wDestroyCQ(w *wcall) error {
	req := fromBytes[abi.IbUverbsDestroyCq](w.core)
	cq, ok := lookup[*CQ](w.f, objCQ, req.Cq_handle)
	if !ok {
		return refuse(syscall.EINVAL, fmt.Sprintf("no CQ %d", req.Cq_handle))
	}
	if cq.users > 0 {
		return refuse(syscall.EBUSY, "CQ in use")
	}
	var r abi.IbUverbsDestroyCqResp
	if err := w.respond(bytesOf(&r)); err != nil {
		return err
	}
	w.f.destroyLocked(cq)
	delete(w.f.ids[objCQ], req.Cq_handle)
	return nil
}
