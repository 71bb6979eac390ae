package uverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
)

// Context is an open device (struct ibv_context): the uverbs command file,
// the kernel's user context on it and the asynchronous event file. Its
// methods are safe for concurrent use. Close releases everything and is
// idempotent; any use after Close returns ErrClosed.
type Context struct {
	dev            Device
	f              cmdFile
	asyncFD        int
	numCompVectors int
	coreSupport    uint64
	// prov is the provider's state for this context; nil when no provider
	// knows the device's driver (then only queries work).
	prov provider.Context
	// drv is the provider Open chose, kept so that a RegisterProvider
	// afterwards does not change what this context does.
	drv provider.Driver
	// quick: the provider's device is software (provider.CPUBound), so
	// creating and modifying its CQs, QPs, SRQs and AHs are quick
	// commands (command.quick).
	quick bool
	// res is what releasing the context needs; a context dropped without
	// Close is released by its cleanup, which gets res and not the
	// Context.
	res *ctxRes

	// nextID numbers the user handles given to the kernel for CQs, QPs and
	// SRQs, which events carry back.
	nextID atomic.Uint64
	reg    *registry
	events *asyncEvents // the async event file and its reader

	closeOnce sync.Once
	closeErr  error
}

// registry maps the user handles that events carry back to objects. It
// holds only weak pointers: the async event reader keeps it, and must keep
// neither the objects nor, through them, the Context alive.
type registry struct {
	mu     sync.Mutex
	closed bool // the context's Close has begun
	cqs    map[uint64]entry[CQ]
	qps    map[uint64]entry[QP]
	srqs   map[uint64]entry[SRQ]
	byQPN  map[uint32]weak.Pointer[QP] // completions name QPs by number
}

// entry is a registered object: its object, for the context's Close and
// the CQ overrun flag, and its public value, for the events that name it.
type entry[T any] struct {
	o weak.Pointer[object]
	w weak.Pointer[T]
}

// ctxRes is what a context owns in the kernel and the process: the command
// file and the provider's state (its mappings). Its cleanup runs only once
// every object on the context is gone, because each object's own state
// points to the Context.
type ctxRes struct {
	f     cmdFile
	prov  provider.Context
	async *os.File // the async event file, owned by the runtime poller
	once  sync.Once
	err   error
}

// close releases the provider's state, then closes the command file,
// which makes the kernel destroy the ucontext and everything still on it.
func (r *ctxRes) close() error {
	r.once.Do(func() {
		if r.prov != nil {
			r.err = r.prov.Close()
		}
		if r.async != nil {
			// This also ends the event reader.
			if err := r.async.Close(); err != nil && r.err == nil {
				r.err = err
			}
		}
		if err := r.f.Close(); err != nil && r.err == nil {
			r.err = err
		}
	})
	return r.err
}

// Open opens the named device. An unknown name gives an error that lists the
// devices that exist; a host without devices gives an error matching
// ErrNoDevice (and syscall.ENOSYS when the kernel has no RDMA at all, as
// for Devices).
func Open(name string) (*Context, error) {
	d, err := findDevice(name)
	if err != nil {
		return nil, err
	}
	return d.Open()
}

// Open opens the device: it opens the uverbs character device and creates
// the kernel's user context through the ioctl interface.
func (d Device) Open() (*Context, error) {
	if err := supported("open"); err != nil {
		return nil, err
	}
	f, err := openDevFile(d.DevPath)
	if err != nil {
		switch {
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("uverbs: open %s for device %s (needs read-write access to %s: run as root or grant access with a udev rule): %w", d.DevPath, d.Name, devRoot, err)
		case errors.Is(err, unix.ENOENT):
			return nil, fmt.Errorf("uverbs: open %s for device %s (is %s populated? devtmpfs must be mounted on /dev): %w", d.DevPath, d.Name, devRoot, err)
		}
		return nil, fmt.Errorf("uverbs: open %s for device %s: %w", d.DevPath, d.Name, err)
	}
	c, err := newContext(d, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// newContext creates the user context on an open command file. It is split
// from Open so tests can run it against a fake kernel.
func newContext(d Device, f cmdFile) (*Context, error) {
	c := &Context{dev: d, f: f, asyncFD: -1, res: &ctxRes{f: f},
		reg: &registry{cqs: map[uint64]entry[CQ]{}, qps: map[uint64]entry[QP]{}, srqs: map[uint64]entry[SRQ]{},
			byQPN: map[uint32]weak.Pointer[QP]{}}}
	var b provider.Builder[provider.Context]
	c.drv = driverFor(&d)
	if drv := c.drv; drv != nil {
		var err error
		// The provider keeps the port: it must not reach the Context, or
		// the context's cleanup could never run.
		if b, err = drv.NewContext(newKernelPort(f, d.DriverID)); err != nil {
			return nil, wrapErr("get context", err)
		}
	}
	var in, out []byte
	if b != nil {
		in, out = b.Udata()
	}
	if err := c.getContext(in, out); err != nil {
		if b != nil {
			b.Abort()
		}
		return nil, err
	}
	if c.asyncFD < 0 {
		if err := c.allocAsyncFD(); err != nil {
			if b != nil {
				b.Abort()
			}
			return nil, err
		}
	}
	if b != nil {
		p, err := b.Finish(provider.Created{})
		if err != nil {
			c.Close()
			return nil, wrapErr("get context", err)
		}
		c.prov, c.res.prov = p, p
		_, c.quick = p.(provider.CPUBound)
	}
	// Hand the async event file to the runtime poller and its reader now:
	// the reader must see a CQ overrun when it happens.
	if err := c.startEvents(); err != nil {
		c.Close()
		return nil, err
	}
	runtime.AddCleanup(c, (*ctxRes).collect, c.res)
	return c, nil
}

// collect is the cleanup of a context dropped without Close.
func (r *ctxRes) collect() { r.close() }

// providerContext returns the provider state, or an error saying that no
// provider drives this device's data path.
func (c *Context) providerContext(op string) (provider.Context, error) {
	if c.prov == nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("no rdmago provider for driver %q (id %d) of device %s: %w",
			c.dev.Driver, c.dev.DriverID, c.dev.Name, unix.EOPNOTSUPP)}
	}
	return c.prov, nil
}

// register records a new CQ, QP or SRQ under the user handle its events
// carry, and tracks it, as every object is, so that dropping v releases o,
// unless the context's Close has begun: then it reports false, and the
// caller releases the object's provider side (the kernel object goes with
// the command file). Close releases every registered object before it
// closes the file, which is what lets QPs ring their doorbells without a
// guard (devFile.doorbell).
func register[T any](r *registry, m map[uint64]entry[T], o *object, v *T) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	m[o.id] = entry[T]{o: weak.Make(o), w: weak.Make(v)}
	r.mu.Unlock()
	track(v, o)
	return true
}

// registered ends the creation of an object: it is registered and tracked,
// or, when the context is closing, released and ErrClosed returned.
func registered(ok bool, o *object, op string) error {
	if ok {
		return nil
	}
	o.finish()
	return &Error{Op: op, Err: ErrClosed}
}

func lookup[T any](r *registry, m map[uint64]entry[T], id uint64) *T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[id].w.Value()
}

func registerCQ(c *Context, cq *CQ) bool { return register(c.reg, c.reg.cqs, cq.object, cq) }
func registerQP(c *Context, q *QP) bool {
	if !register(c.reg, c.reg.qps, q.object, q) {
		return false
	}
	if q.opened {
		return true // XRCD.OpenQP: the number is its creator's
	}
	c.reg.mu.Lock()
	c.reg.byQPN[q.num] = weak.Make(q)
	c.reg.mu.Unlock()
	return true
}

// qpByNum returns the live QP with number n, or nil.
func (r *registry) qpByNum(n uint32) *QP {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byQPN[n].Value()
}
func registerSRQ(c *Context, s *SRQ) bool { return register(c.reg, c.reg.srqs, s.object, s) }
func (c *Context) cqByID(id uint64) *CQ   { return lookup(c.reg, c.reg.cqs, id) }
func (c *Context) qpByID(id uint64) *QP   { return lookup(c.reg, c.reg.qps, id) }
func (c *Context) srqByID(id uint64) *SRQ { return lookup(c.reg, c.reg.srqs, id) }

// forget drops a closed object from its registry.
func (c *Context) forget(o *object) {
	r := c.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o.kind {
	case kindCQ:
		delete(r.cqs, o.id)
	case kindQP:
		delete(r.qps, o.id)
		delete(r.byQPN, o.qpn)
	case kindSRQ:
		delete(r.srqs, o.id)
	}
}

// close refuses later registrations and returns the registered objects
// still alive, QPs first.
func (r *registry) close() []*object {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var out []*object
	add := func(w weak.Pointer[object]) {
		if o := w.Value(); o != nil {
			out = append(out, o)
		}
	}
	for _, e := range r.qps {
		add(e.o)
	}
	for _, e := range r.srqs {
		add(e.o)
	}
	for _, e := range r.cqs {
		add(e.o)
	}
	return out
}

// kernelPort is what providers see of the context (provider.Kernel).
type kernelPort struct {
	f        cmdFile
	driverID uint32
}

func newKernelPort(f cmdFile, driverID uint32) provider.Kernel {
	return &kernelPort{f: f, driverID: driverID}
}

func (k *kernelPort) Mmap(offset int64, length int, prot int) ([]byte, error) {
	fd := k.f.fd()
	if fd < 0 {
		return nil, ErrClosed
	}
	// A raw system call, as the runtime makes its own mmap and munmap:
	// mapping a device's queue or doorbell page is CPU work in the
	// kernel. unix.Mmap would also take a lock and record the mapping in
	// a map, which Munmap looks up; the providers unmap each mapping once,
	// under their own locks, and drop the slice.
	p, _, e := unix.RawSyscall6(unix.SYS_MMAP, 0, uintptr(length), uintptr(prot), unix.MAP_SHARED, uintptr(fd), uintptr(offset))
	if e != 0 {
		return nil, &Error{Op: "mmap", Err: e}
	}
	// p is the address of memory outside the Go heap; converting it
	// through memory keeps vet's check for heap pointers hidden in
	// integers quiet, as the mapping is no such pointer.
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), length), nil
}

func (k *kernelPort) Munmap(b []byte) error {
	if len(b) == 0 {
		return unix.EINVAL
	}
	_, _, e := unix.RawSyscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func (k *kernelPort) Write(b []byte) error { return k.f.fastWrite(b) }

// Doorbell rings a device file's doorbell with devFile.doorbell's body
// written out: every post on rxe comes through here, and the interface
// call and the call to doorbell were 39 of the path's instructions
// (BenchmarkDoorbell under the instruction-counting clock, 705 -> 666 with
// rawWrite). Unit tests' fake files get their own doorbell.
func (k *kernelPort) Doorbell(b []byte) error {
	d, ok := k.f.(*devFile)
	if !ok {
		return k.f.doorbell(b)
	}
	if n, e := rawWrite(d.raw, unsafe.Pointer(unsafe.SliceData(b)), len(b)); n != len(b) {
		return shortWrite(e)
	}
	return nil
}

// Invoke sends one driver method call, tagged with the device's driver id
// as rdma-core's execute_ioctl tags it, and reads back the handles of the
// objects it created.
func (k *kernelPort) Invoke(object, method uint16, attrs []provider.Attr) error {
	op := fmt.Sprintf("driver method %#x of object %#x", method, object)
	cmd := newCommand(object, method)
	defer cmd.release()
	cmd.driverID = k.driverID
	for i := range attrs {
		a := &attrs[i]
		switch a.Kind {
		case provider.AttrConstIn:
			cmd.constIn(a.ID, a.Value)
		case provider.AttrPtrIn:
			if len(a.In) == 0 {
				return &Error{Op: op, Err: fmt.Errorf("empty input attribute %#x: %w", a.ID, unix.EINVAL)}
			}
			cmd.ptrIn(a.ID, unsafe.Pointer(&a.In[0]), len(a.In))
		case provider.AttrPtrOut:
			if len(a.Out) == 0 {
				return &Error{Op: op, Err: fmt.Errorf("empty output attribute %#x: %w", a.ID, unix.EINVAL)}
			}
			cmd.ptrOut(a.ID, unsafe.Pointer(&a.Out[0]), len(a.Out))
		case provider.AttrIDR:
			cmd.idrIn(a.ID, uint32(a.Value))
		case provider.AttrIDRNew:
			cmd.idrNew(a.ID)
		default:
			return &Error{Op: op, Err: fmt.Errorf("attribute %#x of kind %d: %w", a.ID, a.Kind, unix.EINVAL)}
		}
	}
	if err := cmd.execute(k.f, op); err != nil {
		return err
	}
	for i := range attrs {
		if attrs[i].Kind == provider.AttrIDRNew {
			attrs[i].Value = uint64(cmd.outIDR(i))
		}
	}
	return nil
}

// getContext creates the kernel's ucontext. The ioctl method is the modern
// path; the legacy write command remains only for kernels without the ioctl
// framework (ENOTTY) or without this method (EPROTONOSUPPORT).
func (c *Context) getContext(uhwIn, uhwOut []byte) error {
	out := new(struct {
		numCompVectors uint32
		_              uint32
		coreSupport    uint64
	})
	cmd := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	cmd.ptrOut(abi.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, unsafe.Pointer(&out.numCompVectors), 4)
	cmd.ptrOut(abi.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, unsafe.Pointer(&out.coreSupport), 8)
	cmd.udata(uhwIn, uhwOut)
	err := cmd.execute(c.f, "get context")
	switch {
	case err == nil:
		c.numCompVectors = int(out.numCompVectors)
		c.coreSupport = out.coreSupport
		return nil
	case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EPROTONOSUPPORT):
		if len(uhwIn) > 0 || len(uhwOut) > 0 {
			// The legacy command carries driver data differently; no
			// kernel this library supports needs it.
			errno := unix.ENOTTY
			if errors.Is(err, unix.EPROTONOSUPPORT) {
				errno = unix.EPROTONOSUPPORT
			}
			return &Error{Op: "get context", Err: fmt.Errorf("the kernel has no uverbs ioctl method for it, and rdmago sends a provider's context data only through that (Linux 5.x and later): %w", errno)}
		}
		return c.getContextWrite()
	}
	return err
}

func (c *Context) getContextWrite() error {
	resp := new(abi.IbUverbsGetContextResp)
	// The request embeds resp's address as a plain integer, which the
	// garbage collector does not see: pin resp (which also moves it to the
	// heap) until the kernel has written it.
	var pin runtime.Pinner
	pin.Pin(resp)
	defer pin.Unpin()
	req := new(struct {
		hdr abi.IbUverbsCmdHdr
		cmd abi.IbUverbsGetContext
	})
	req.hdr.Command = abi.IB_USER_VERBS_CMD_GET_CONTEXT
	req.hdr.In_words = uint16(unsafe.Sizeof(*req) / 4)
	req.hdr.Out_words = uint16(unsafe.Sizeof(*resp) / 4)
	req.cmd.Response = uint64(uintptr(unsafe.Pointer(resp)))
	err := c.f.write(unsafe.Slice((*byte)(unsafe.Pointer(req)), unsafe.Sizeof(*req)))
	if err != nil {
		return wrapErr("get context", err)
	}
	c.asyncFD = int(resp.Async_fd)
	c.numCompVectors = int(resp.Num_comp_vectors)
	return nil
}

// allocAsyncFD creates the file that carries asynchronous events (port
// changes, QP and CQ errors) for this context.
func (c *Context) allocAsyncFD() error {
	cmd := newCommand(abi.UVERBS_OBJECT_ASYNC_EVENT, abi.UVERBS_METHOD_ASYNC_EVENT_ALLOC)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	i := cmd.fdNew(abi.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE)
	if err := cmd.execute(c.f, "alloc async event fd"); err != nil {
		return err
	}
	c.asyncFD = cmd.outFD(i)
	return nil
}

// Device returns the device the context was opened on.
func (c *Context) Device() Device { return c.dev }

// NumCompVectors returns the number of completion vectors (interrupts) the
// device offers for completion channels.
func (c *Context) NumCompVectors() int { return c.numCompVectors }

// ReadSysfs reads a file of the device's sysfs directory, such as
// "board_id", trimmed of surrounding space. It reports false when the file
// does not exist or cannot be read.
func (c *Context) ReadSysfs(name string) (string, bool) {
	if strings.Contains(name, "..") {
		return "", false
	}
	v, err := readSysfs(filepath.Join(c.dev.SysfsPath, name))
	return v, err == nil
}

// Close destroys the user context and closes its files. It is idempotent.
// Objects still open on the context are destroyed with it; their methods
// then return ErrClosed. A context dropped without Close is closed once it
// is unreachable and every object made on it is gone.
func (c *Context) Close() error {
	if c == nil {
		return errNil
	}
	c.closeOnce.Do(func() {
		// Closing the command file destroys every kernel object of the
		// context; first release the user-space side of those still open
		// (the providers' ring mappings), so nothing outlives the context
		// and later use of them reports ErrClosed.
		for _, o := range c.reg.close() {
			o.release()
		}
		if err := c.res.close(); err != nil && c.closeErr == nil {
			c.closeErr = err
		}
	})
	return c.closeErr
}

// QueryDevice returns the device's attributes, extended ones included
// (ibv_query_device_ex). The firmware version is formatted as the device's
// rdma-core provider formats it.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	var a DeviceAttr
	req := new(abi.IbUverbsExQueryDevice)
	resp := new(abi.IbUverbsExQueryDeviceResp)
	err := c.invokeWrite(abi.IB_USER_VERBS_CMD_FLAG_EXTENDED|abi.IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
		unsafe.Pointer(req), int(unsafe.Sizeof(*req)), unsafe.Pointer(resp), int(unsafe.Sizeof(*resp)), "query device")
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		// A driver without the extended command: ask for the base attributes.
		*resp = abi.IbUverbsExQueryDeviceResp{}
		base := new(abi.IbUverbsQueryDevice)
		err = c.invokeWrite(abi.IB_USER_VERBS_CMD_QUERY_DEVICE,
			unsafe.Pointer(base), int(unsafe.Sizeof(*base)), unsafe.Pointer(&resp.Base), int(unsafe.Sizeof(resp.Base)), "query device")
		resp.Response_length = uint32(unsafe.Sizeof(resp.Base))
	}
	if err != nil {
		return a, err
	}
	decodeDeviceAttr(&a, resp)
	if drv := c.drv; drv != nil {
		a.FWVer = drv.FormatFWVer(a.FWVerRaw)
	} else {
		a.FWVer = formatFWVer(c.dev.Driver, a.FWVerRaw)
	}
	a.PhysPortCntEx = uint32(a.PhysPortCnt)
	return a, nil
}

// decodeDeviceAttr copies the kernel's response, taking extended fields only
// when the kernel's response_length says it wrote them.
func decodeDeviceAttr(a *DeviceAttr, r *abi.IbUverbsExQueryDeviceResp) {
	b := &r.Base
	a.FWVerRaw = b.Fw_ver
	binary.NativeEndian.PutUint64(a.NodeGUID[:], b.Node_guid)
	binary.NativeEndian.PutUint64(a.SysImageGUID[:], b.Sys_image_guid)
	a.MaxMRSize = b.Max_mr_size
	a.PageSizeCap = b.Page_size_cap
	a.VendorID = b.Vendor_id
	a.VendorPartID = b.Vendor_part_id
	a.HWVer = b.Hw_ver
	a.DeviceCapFlags = DeviceCaps(b.Device_cap_flags)
	a.AtomicCap = AtomicCap(b.Atomic_cap)
	// The kernel's u32 limits are ibv_device_attr's ints, as rdma-core
	// copies them.
	for _, f := range []struct {
		dst *int
		src uint32
	}{
		{&a.MaxQP, b.Max_qp}, {&a.MaxQPWR, b.Max_qp_wr}, {&a.MaxSGE, b.Max_sge}, {&a.MaxSGERd, b.Max_sge_rd},
		{&a.MaxCQ, b.Max_cq}, {&a.MaxCQE, b.Max_cqe}, {&a.MaxMR, b.Max_mr}, {&a.MaxPD, b.Max_pd},
		{&a.MaxQPRdAtom, b.Max_qp_rd_atom}, {&a.MaxEERdAtom, b.Max_ee_rd_atom},
		{&a.MaxResRdAtom, b.Max_res_rd_atom}, {&a.MaxQPInitRdAtom, b.Max_qp_init_rd_atom},
		{&a.MaxEEInitRdAtom, b.Max_ee_init_rd_atom}, {&a.MaxEE, b.Max_ee}, {&a.MaxRDD, b.Max_rdd},
		{&a.MaxMW, b.Max_mw}, {&a.MaxRawIPv6QP, b.Max_raw_ipv6_qp}, {&a.MaxRawEthyQP, b.Max_raw_ethy_qp},
		{&a.MaxMcastGrp, b.Max_mcast_grp}, {&a.MaxMcastQPAttach, b.Max_mcast_qp_attach},
		{&a.MaxTotalMcastQPAttach, b.Max_total_mcast_qp_attach}, {&a.MaxAH, b.Max_ah}, {&a.MaxFMR, b.Max_fmr},
		{&a.MaxMapPerFMR, b.Max_map_per_fmr}, {&a.MaxSRQ, b.Max_srq}, {&a.MaxSRQWR, b.Max_srq_wr},
		{&a.MaxSRQSGE, b.Max_srq_sge},
	} {
		*f.dst = int(int32(f.src))
	}
	a.MaxPKeys = b.Max_pkeys
	a.LocalCAAckDelay = b.Local_ca_ack_delay
	a.PhysPortCnt = b.Phys_port_cnt

	n := uintptr(r.Response_length)
	has := func(end uintptr) bool { return n >= end }
	if has(unsafe.Offsetof(r.Odp_caps) + unsafe.Sizeof(r.Odp_caps)) {
		a.ODPCaps = ODPCaps{
			GeneralCaps: ODPGeneralCaps(r.Odp_caps.General_caps),
			RCODPCaps:   ODPTransportCaps(r.Odp_caps.Per_transport_caps.Rc_odp_caps),
			UCODPCaps:   ODPTransportCaps(r.Odp_caps.Per_transport_caps.Uc_odp_caps),
			UDODPCaps:   ODPTransportCaps(r.Odp_caps.Per_transport_caps.Ud_odp_caps),
		}
	}
	if has(unsafe.Offsetof(r.Timestamp_mask) + 8) {
		a.CompletionTimestampMask = r.Timestamp_mask
	}
	if has(unsafe.Offsetof(r.Hca_core_clock) + 8) {
		a.HCACoreClock = r.Hca_core_clock
	}
	if has(unsafe.Offsetof(r.Device_cap_flags_ex) + 8) {
		a.DeviceCapFlagsEx = DeviceCaps(r.Device_cap_flags_ex)
	}
	if has(unsafe.Offsetof(r.Rss_caps) + unsafe.Sizeof(r.Rss_caps)) {
		a.RSSCaps.SupportedQPTs = r.Rss_caps.Supported_qpts
		a.RSSCaps.MaxRWQIndirectionTables = r.Rss_caps.Max_rwq_indirection_tables
		a.RSSCaps.MaxRWQIndirectionTableSize = r.Rss_caps.Max_rwq_indirection_table_size
	}
	if has(unsafe.Offsetof(r.Max_wq_type_rq) + 4) {
		a.MaxWQTypeRQ = r.Max_wq_type_rq
	}
	if has(unsafe.Offsetof(r.Raw_packet_caps) + 4) {
		a.RawPacketCaps = r.Raw_packet_caps
	}
	if has(unsafe.Offsetof(r.Tm_caps) + unsafe.Sizeof(r.Tm_caps)) {
		a.TMCaps = TMCaps{
			MaxRndvHdrSize: r.Tm_caps.Max_rndv_hdr_size,
			MaxNumTags:     r.Tm_caps.Max_num_tags,
			Flags:          r.Tm_caps.Flags,
			MaxOps:         r.Tm_caps.Max_ops,
			MaxSGE:         r.Tm_caps.Max_sge,
		}
	}
	if has(unsafe.Offsetof(r.Cq_moderation_caps) + unsafe.Sizeof(r.Cq_moderation_caps)) {
		a.CQModCaps = CQModerationCaps{
			MaxCQCount:  r.Cq_moderation_caps.Max_cq_moderation_count,
			MaxCQPeriod: r.Cq_moderation_caps.Max_cq_moderation_period,
		}
	}
	if has(unsafe.Offsetof(r.Max_dm_size) + 8) {
		a.MaxDMSize = r.Max_dm_size
	}
	if has(unsafe.Offsetof(r.Xrc_odp_caps) + 4) {
		a.XRCODPCaps = ODPTransportCaps(r.Xrc_odp_caps)
	}
}

// invokeWrite runs a legacy write command through the ioctl interface
// (UVERBS_METHOD_INVOKE_WRITE), the way rdma-core does on kernels that offer
// it: the request and response travel as attributes, so no user pointer is
// embedded in the request. req and resp must point to heap memory.
func (c *Context) invokeWrite(cmdID uint32, req unsafe.Pointer, reqLen int, resp unsafe.Pointer, respLen int, op string) error {
	return c.invokeWriteUdata(cmdID, false, req, reqLen, resp, respLen, nil, nil, op)
}

// writeCmd is invokeWrite for a command with a request and a response of
// fixed size: it sends req, which must point to heap memory, and returns
// the response the kernel wrote.
func writeCmd[Resp, Req any](c *Context, cmdID uint32, req *Req, op string) (*Resp, error) {
	resp := new(Resp)
	err := c.invokeWrite(cmdID, unsafe.Pointer(req), int(unsafe.Sizeof(*req)), unsafe.Pointer(resp), int(unsafe.Sizeof(*resp)), op)
	return resp, err
}

// invokeWriteUdata is invokeWrite with driver data, which travels in
// UVERBS_ATTR_UHW_IN and UVERBS_ATTR_UHW_OUT, and quick for a command
// that is quick on this context (command.quick).
func (c *Context) invokeWriteUdata(cmdID uint32, quick bool, req unsafe.Pointer, reqLen int, resp unsafe.Pointer, respLen int, uhwIn, uhwOut []byte, op string) error {
	cmd := c.writeCommand(cmdID, quick)
	defer cmd.release()
	if reqLen > 0 {
		cmd.ptrIn(abi.UVERBS_ATTR_CORE_IN, req, reqLen)
	}
	if respLen > 0 {
		cmd.ptrOut(abi.UVERBS_ATTR_CORE_OUT, resp, respLen)
	}
	cmd.udata(uhwIn, uhwOut)
	return cmd.execute(c.f, op)
}

// writeCommand starts the ioctl that runs legacy write command cmdID
// (UVERBS_METHOD_INVOKE_WRITE); the caller adds the request and response
// and releases it.
func (c *Context) writeCommand(cmdID uint32, quick bool) *command {
	cmd := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE)
	cmd.driverID = c.dev.DriverID
	cmd.quick = quick
	cmd.constIn(abi.UVERBS_ATTR_WRITE_CMD, uint64(cmdID))
	return cmd
}

// QueryPort returns the attributes of port (numbered from 1).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	var a PortAttr
	if port == 0 {
		return a, &Error{Op: "query port", Err: unix.EINVAL}
	}
	resp := new(abi.IbUverbsQueryPortRespEx)
	cmd := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	cmd.constIn(abi.UVERBS_ATTR_QUERY_PORT_PORT_NUM, uint64(port))
	cmd.ptrOut(abi.UVERBS_ATTR_QUERY_PORT_RESP, unsafe.Pointer(resp), int(unsafe.Sizeof(*resp)))
	if err := cmd.execute(c.f, fmt.Sprintf("query port %d", port)); err != nil {
		return a, err
	}
	r := &resp.Legacy_resp
	a = PortAttr{
		State:         PortState(r.State),
		MaxMTU:        qp.MTU(r.Max_mtu),
		ActiveMTU:     qp.MTU(r.Active_mtu),
		GIDTblLen:     int(r.Gid_tbl_len),
		PortCapFlags:  r.Port_cap_flags,
		MaxMsgSz:      r.Max_msg_sz,
		BadPKeyCntr:   r.Bad_pkey_cntr,
		QKeyViolCntr:  r.Qkey_viol_cntr,
		PKeyTblLen:    r.Pkey_tbl_len,
		LID:           r.Lid,
		SMLID:         r.Sm_lid,
		LMC:           r.Lmc,
		MaxVLNum:      r.Max_vl_num,
		SMSL:          r.Sm_sl,
		SubnetTimeout: r.Subnet_timeout,
		InitTypeReply: r.Init_type_reply,
		ActiveWidth:   r.Active_width,
		ActiveSpeed:   r.Active_speed,
		PhysState:     r.Phys_state,
		LinkLayer:     LinkLayer(r.Link_layer),
		Flags:         r.Flags,
		PortCapFlags2: resp.Port_cap_flags2,
		// Kernels before 6.12 leave it zero (their response is shorter).
		ActiveSpeedEx: resp.Active_speed_ex,
	}
	return a, nil
}

// QueryGIDTable returns every valid entry of every port's GID table, with
// its type and netdev (ibv_query_gid_table). Kernels without the ioctl
// method are answered from sysfs.
func (c *Context) QueryGIDTable() ([]GIDEntry, error) {
	dattr, err := c.QueryDevice()
	if err != nil {
		return nil, err
	}
	max := 0
	for p := 1; p <= int(dattr.PhysPortCnt); p++ {
		pa, err := c.QueryPort(uint8(p))
		if err != nil {
			return nil, err
		}
		max += pa.GIDTblLen
	}
	if max == 0 {
		return nil, nil
	}
	const entrySize = int(unsafe.Sizeof(abi.IbUverbsGidEntry{}))
	raw := make([]abi.IbUverbsGidEntry, max)
	num := new(uint64)
	cmd := newCommand(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_GID_TABLE)
	defer cmd.release()
	cmd.driverID = c.dev.DriverID
	cmd.constIn(abi.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE, uint64(entrySize))
	cmd.constIn(abi.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, 0) // as libibverbs sends it
	cmd.ptrOut(abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, unsafe.Pointer(&raw[0]), entrySize*max)
	cmd.ptrOut(abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, unsafe.Pointer(num), 8)
	err = cmd.execute(c.f, "query GID table")
	if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EOPNOTSUPP) {
		return c.sysfsGIDTable(int(dattr.PhysPortCnt))
	}
	if err != nil {
		return nil, err
	}
	if *num > uint64(max) {
		return nil, &Error{Op: "query GID table", Err: unix.EOVERFLOW}
	}
	out := make([]GIDEntry, 0, *num)
	for _, e := range raw[:*num] {
		var g GIDEntry
		binary.NativeEndian.PutUint64(g.GID[0:], e.Gid[0])
		binary.NativeEndian.PutUint64(g.GID[8:], e.Gid[1])
		if e.Gid_index > 0xff || e.Port_num > 0xff {
			continue // no AH or QP can name it (GIDEntry)
		}
		g.Index, g.Port, g.Type, g.NetdevIndex = uint8(e.Gid_index), uint8(e.Port_num), GIDType(e.Gid_type), e.Netdev_ifindex
		out = append(out, g)
	}
	return out, nil
}

// sysfsGIDTable reads the GID tables from sysfs, as libibverbs does on
// kernels without UVERBS_METHOD_QUERY_GID_TABLE.
func (c *Context) sysfsGIDTable(ports int) ([]GIDEntry, error) {
	var out []GIDEntry
	for p := 1; p <= ports; p++ {
		dir := filepath.Join(c.dev.SysfsPath, "ports", fmt.Sprint(p))
		ents, err := os.ReadDir(filepath.Join(dir, "gids"))
		if err != nil {
			return nil, fmt.Errorf("uverbs: reading GID table: %w", err)
		}
		for i := 0; i < len(ents) && i <= 0xff; i++ {
			s, err := readSysfs(filepath.Join(dir, "gids", fmt.Sprint(i)))
			if err != nil {
				continue
			}
			gid, ok := parseGIDString(s)
			if !ok || gid.IsZero() {
				continue
			}
			e := GIDEntry{GID: gid, Index: uint8(i), Port: uint8(p), Type: GIDTypeIB}
			if t, err := readSysfs(filepath.Join(dir, "gid_attrs/types", fmt.Sprint(i))); err == nil {
				switch t {
				case "RoCE v2":
					e.Type = GIDTypeRoCEv2
				case "IB/RoCE v1":
					if c.linkLayerEthernet(p) {
						e.Type = GIDTypeRoCEv1
					}
				}
			}
			if nd, err := readSysfs(filepath.Join(dir, "gid_attrs/ndevs", fmt.Sprint(i))); err == nil {
				if ifi, err := netInterfaceIndex(nd); err == nil {
					e.NetdevIndex = ifi
				}
			}
			out = append(out, e)
		}
	}
	return out, nil
}

func (c *Context) linkLayerEthernet(port int) bool {
	v, err := readSysfs(filepath.Join(c.dev.SysfsPath, "ports", fmt.Sprint(port), "link_layer"))
	return err == nil && v == "Ethernet"
}

func netInterfaceIndex(name string) (uint32, error) {
	v, err := readSysfs(filepath.Join(sysfsRoot, "class/net", name, "ifindex"))
	if err != nil {
		return 0, err
	}
	var n uint32
	_, err = fmt.Sscan(v, &n)
	return n, err
}

// parseGIDString parses sysfs's "fe80:0000:...:0001".
func parseGIDString(s string) (qp.GID, bool) {
	var g qp.GID
	parts := strings.Split(s, ":")
	if len(parts) != 8 {
		return g, false
	}
	for i, p := range parts {
		var v uint16
		if _, err := fmt.Sscanf(p, "%x", &v); err != nil {
			return g, false
		}
		binary.BigEndian.PutUint16(g[2*i:], v)
	}
	return g, true
}
