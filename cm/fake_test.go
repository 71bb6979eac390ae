package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/uverbs"
)

// fakeKernel stands in for the rdma_cm character device in unit tests. Each
// open file is a fakeFile; every write is decoded as the kernel's
// ucma_write does (header, then the command struct of hdr.in bytes) and
// handed to the handler registered for the command, which may answer
// through the command's response pointer. Events are queued per file and
// returned by GET_EVENT.
type fakeKernel struct {
	t        *testing.T
	mu       sync.Mutex
	handlers map[uint32]func(f *fakeFile, c *fakeCmd) error
	cmds     []fakeCmd
	files    []*fakeFile
	nextID   uint32
	nextFD   int
}

type fakeCmd struct {
	Cmd     uint32
	In, Out uint16
	Body    []byte // a copy of the command struct
	Quick   bool   // sent as a raw system call (quickCmd)
	raw     []byte // the caller's command struct, for response pointers
}

type fakeFile struct {
	k      *fakeKernel
	fdNum  int
	mu     sync.Mutex
	events []abi.RdmaUcmEventResp
	ready  chan struct{} // closed and replaced when an event is queued
	closed bool
}

// newFakeKernel makes a fake kernel, installed for the test: the package
// opens its channels on it (see install).
func newFakeKernel(t *testing.T) *fakeKernel {
	k := &fakeKernel{t: t, handlers: map[uint32]func(*fakeFile, *fakeCmd) error{}, nextID: 100, nextFD: 1000}
	// Commands that only need to succeed.
	for _, c := range []uint32{abi.RDMA_USER_CM_CMD_BIND, abi.RDMA_USER_CM_CMD_RESOLVE_ADDR,
		abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE, abi.RDMA_USER_CM_CMD_LISTEN, abi.RDMA_USER_CM_CMD_CONNECT,
		abi.RDMA_USER_CM_CMD_ACCEPT, abi.RDMA_USER_CM_CMD_REJECT, abi.RDMA_USER_CM_CMD_DISCONNECT,
		abi.RDMA_USER_CM_CMD_NOTIFY, abi.RDMA_USER_CM_CMD_SET_OPTION} {
		k.handlers[c] = func(*fakeFile, *fakeCmd) error { return nil }
	}
	k.handlers[abi.RDMA_USER_CM_CMD_CREATE_ID] = func(f *fakeFile, c *fakeCmd) error {
		req := body[abi.RdmaUcmCreateId](c)
		k.nextID++
		respond(req.Response, abi.RdmaUcmCreateIdResp{Id: k.nextID})
		return nil
	}
	k.handlers[abi.RDMA_USER_CM_CMD_DESTROY_ID] = func(f *fakeFile, c *fakeCmd) error {
		respond(body[abi.RdmaUcmDestroyId](c).Response, abi.RdmaUcmDestroyIdResp{Events_reported: 3})
		return nil
	}
	// Without a device: the ID is bound to none.
	k.handlers[abi.RDMA_USER_CM_CMD_QUERY_ROUTE] = func(f *fakeFile, c *fakeCmd) error {
		respond(body[abi.RdmaUcmQuery](c).Response, abi.RdmaUcmQueryRouteResp{})
		return nil
	}
	k.install(t)
	return k
}

// syncBoundID is the start of the tests of a synchronous ID: one for TCP,
// bound to vmTestAddr on k's device (see withDevice) and destroyed at the
// test's end, with the fake file of its channel.
func syncBoundID(t *testing.T, k *fakeKernel) (*ID, *fakeFile) {
	t.Helper()
	id, err := CreateID(nil, nil, PSTCP)
	mustT(t, err)
	t.Cleanup(func() { id.destroy() })
	mustT(t, id.BindAddr(vmTestAddr))
	return id, id.Channel().f.(*fakeFile)
}

// install makes the package open channels on k.
func (k *fakeKernel) install(t *testing.T) {
	old := newChannel
	newChannel = func() (*EventChannel, error) { return &EventChannel{f: k.open()}, nil }
	t.Cleanup(func() { newChannel = old })
}

func (k *fakeKernel) open() *fakeFile {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextFD++
	f := &fakeFile{k: k, fdNum: k.nextFD, ready: make(chan struct{})}
	k.files = append(k.files, f)
	return f
}

func (k *fakeKernel) channel() *EventChannel { return &EventChannel{f: k.open()} }

// channelFile is a new channel on k with its fake file, on which a test
// queues the channel's events.
func (k *fakeKernel) channelFile() (*EventChannel, *fakeFile) {
	f := k.open()
	return &EventChannel{f: f}, f
}

func (k *fakeKernel) handle(cmd uint32, h func(f *fakeFile, c *fakeCmd) error) {
	k.mu.Lock()
	k.handlers[cmd] = h
	k.mu.Unlock()
}

// last returns the last command of type cmd.
func (k *fakeKernel) last(cmd uint32) *fakeCmd {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := len(k.cmds) - 1; i >= 0; i-- {
		if k.cmds[i].Cmd == cmd {
			return &k.cmds[i]
		}
	}
	k.t.Fatalf("no command %d was sent", cmd)
	return nil
}

func (k *fakeKernel) count(cmd uint32) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, c := range k.cmds {
		if c.Cmd == cmd {
			n++
		}
	}
	return n
}

// body views a command's struct as the kernel's copy_from_user sees it.
func body[T any](c *fakeCmd) *T {
	if len(c.Body) < int(unsafe.Sizeof(*new(T))) {
		panic(fmt.Sprintf("command %d: %d bytes, want %d", c.Cmd, len(c.Body), unsafe.Sizeof(*new(T))))
	}
	v := new(T)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v)), c.Body)
	return v
}

// respond writes v where a command's response field points, as
// copy_to_user does.
func respond[T any](p uint64, v T) {
	*(*T)(userPtr(p)) = v
}

func userPtr(v uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&v)) }

func (f *fakeFile) write(b []byte, quick bool) error {
	if len(b) < 8 {
		return unix.EINVAL
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ne := binary.NativeEndian
	c := fakeCmd{Cmd: ne.Uint32(b), In: ne.Uint16(b[4:]), Out: ne.Uint16(b[6:]), Quick: quick}
	if int(c.In)+8 > len(b) {
		return unix.EINVAL
	}
	c.raw = b[8 : 8+int(c.In)]
	c.Body = append([]byte(nil), c.raw...)
	k := f.k
	k.mu.Lock()
	k.cmds = append(k.cmds, c)
	h := k.handlers[c.Cmd]
	k.mu.Unlock()
	if h == nil {
		return unix.ENOSYS
	}
	return h(f, &c)
}

// queue adds an event for GET_EVENT.
func (f *fakeFile) queue(ev abi.RdmaUcmEventResp) {
	f.mu.Lock()
	f.events = append(f.events, ev)
	close(f.ready)
	f.ready = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeFile) waitReadable(ctx context.Context) error {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return ErrClosed
		}
		if len(f.events) > 0 {
			f.mu.Unlock()
			return nil
		}
		ready := f.ready
		f.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fakeFile) getEvent(ctx context.Context, b []byte) error {
	for {
		if err := f.waitReadable(ctx); err != nil {
			return err
		}
		f.mu.Lock()
		if len(f.events) == 0 {
			f.mu.Unlock()
			continue
		}
		ev := f.events[0]
		f.events = f.events[1:]
		f.mu.Unlock()
		req := (*abi.RdmaUcmGetEvent)(unsafe.Pointer(&b[8]))
		if binary.NativeEndian.Uint32(b) != abi.RDMA_USER_CM_CMD_GET_EVENT ||
			int(binary.NativeEndian.Uint16(b[6:])) < int(unsafe.Sizeof(ev)) {
			return unix.EINVAL
		}
		respond(req.Response, ev)
		return nil
	}
}

func (f *fakeFile) fd() int { return f.fdNum }

func (f *fakeFile) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.ready)
	}
	return nil
}

// withDevice makes QUERY_ROUTE name a device, and opening it give a
// device without a uverbs context, with read depths of 16.
func (k *fakeKernel) withDevice(t *testing.T) {
	old := openDevice
	openDevice = func(guid uverbs.GUID, index uint32) (*device, error) {
		return &device{maxInitDepth: 16, maxRespRes: 16, maxQPWR: 1024}, nil
	}
	t.Cleanup(func() { openDevice = old })
	k.handle(abi.RDMA_USER_CM_CMD_QUERY_ROUTE, func(f *fakeFile, c *fakeCmd) error {
		var r abi.RdmaUcmQueryRouteResp
		r.Node_guid = 0x1122334455667788
		r.Ibdev_index = 3
		r.Port_num = 1
		n, _ := putSockaddr(bytesOf(&r.Src_addr), vmTestAddr)
		_ = n
		r.Num_paths = 1
		r.Ib_route[0].Sgid[15] = 1
		r.Ib_route[0].Dgid[15] = 2
		respond(body[abi.RdmaUcmQuery](c).Response, r)
		return nil
	})
}

// event builds an event for an ID.
func event(id *ID, t EventType, status int32) abi.RdmaUcmEventResp {
	return abi.RdmaUcmEventResp{Uid: id.uid, Id: id.handle, Event: uint32(t), Status: uint32(status)}
}
