package cm

import (
	"context"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/internal/pollctx"
)

// The rdma_cm character device speaks the "ucma" write ABI: every command is
// one write(2) of a struct rdma_ucm_cmd_hdr {cmd, in, out} followed by the
// command's struct. Commands that answer carry the address of a response
// buffer inside the request ("response"), which the kernel fills with
// copy_to_user before write returns. A write returns the length written on
// success and -1 with an errno otherwise.
//
// GET_EVENT is a write too: it blocks in the kernel until an event is queued
// unless the file is non-blocking, when it fails with EAGAIN instead. The
// file is pollable (readable while events are queued), so an EventChannel
// opens it O_NONBLOCK and waits for readability in the Go runtime's poller.

// devPath is the rdma_cm character device; tests point it elsewhere.
var devPath = "/dev/infiniband/rdma_cm"

// ucmaFile is the command channel to the kernel. Everything goes through
// it, so unit tests replace the device with a fake that decodes and answers
// each command (fake_test.go).
type ucmaFile interface {
	// write sends one command, header included; quick says that the
	// kernel completes it with CPU work alone (quickCmd).
	write(b []byte, quick bool) error
	// getEvent sends GET_EVENT (b), waiting while the kernel has no event,
	// until ctx is done or the file is closed.
	getEvent(ctx context.Context, b []byte) error
	// waitReadable returns when an event is queued, ctx is done or the file
	// is closed, without consuming anything.
	waitReadable(ctx context.Context) error
	fd() int
	close() error
}

// devFile is an open /dev/infiniband/rdma_cm in non-blocking mode, owned by
// the runtime poller.
type devFile struct {
	f  *os.File
	rc syscall.RawConn
	// wait serializes the waiters: a read deadline is per file, so two
	// waiters with different contexts would move each other's.
	wait chan struct{}

	// raw is f's descriptor, which write uses directly: a command is not
	// a poller read, and going through rc.Control cost two allocations a
	// command (the closure and its error). closeMu stands in for the
	// guard Control gave: write holds it for reading across the system
	// call and close for writing, so no command reaches a descriptor
	// number close has released and the process may have reused.
	raw     int
	closeMu sync.RWMutex
	closed  bool

	// evOp is getEvent's poller operation, made once with the file, and
	// evBuf and evErr its argument and result: getEvent holds the wait
	// slot while it uses them. A closure per event cost two allocations.
	evOp  func(fd uintptr) bool
	evBuf []byte
	evErr error
}

func openDevFile() (*devFile, error) {
	fd, err := unix.Open(devPath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "rdma_cm")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	d := &devFile{f: f, rc: rc, wait: make(chan struct{}, 1), raw: fd}
	d.evOp = d.tryGetEvent
	return d, nil
}

func (d *devFile) write(b []byte, quick bool) error {
	d.closeMu.RLock()
	defer d.closeMu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	return writeCmd(d.raw, b, quick)
}

// writeCmd is one command's write(2), retried on EINTR; a short write is
// librdmacm's ENODATA. A quick command (quickCmd) is a raw system call,
// which keeps the thread's P: with the ordinary call, a command long
// enough to span the runtime monitor's 20 µs tick made the monitor hand
// the P to another thread, and any call woke the monitor from its sleep
// to tick every 20 µs while the goroutine ran (docs/performance.md). Each
// branch converts b's address in the system call itself, the form that
// keeps b alive and in place for the call.
func writeCmd(fd int, b []byte, quick bool) error {
	for {
		var n uintptr
		var e unix.Errno
		if quick {
			n, _, e = unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		} else {
			n, _, e = unix.Syscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		}
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		if int(n) != len(b) {
			return unix.ENODATA
		}
		return nil
	}
}

// quickCmd reports whether the kernel completes command op with CPU work
// alone, waiting on no peer, no hardware, no I/O and no other thread's
// work: creating, binding and querying IDs, starting address and route
// resolution (whose answers come as events), the QP attributes, options,
// and, on IB and RoCE (ibOrRoCE), connecting, accepting, rejecting and
// disconnecting, which post a CM message and return. GET_EVENT is quick
// too, the file being non-blocking (tryGetEvent). On iWARP the connection
// commands drive a TCP connection, and destroying an ID, listening,
// migrating and multicast joins and leaves may wait on other work; they
// go through the runtime's system call path, which lets other goroutines
// have the P meanwhile.
func quickCmd(op uint32, ibOrRoCE bool) bool {
	switch op {
	case abi.RDMA_USER_CM_CMD_CREATE_ID, abi.RDMA_USER_CM_CMD_BIND, abi.RDMA_USER_CM_CMD_BIND_IP,
		abi.RDMA_USER_CM_CMD_RESOLVE_IP, abi.RDMA_USER_CM_CMD_RESOLVE_ADDR, abi.RDMA_USER_CM_CMD_RESOLVE_ROUTE,
		abi.RDMA_USER_CM_CMD_QUERY, abi.RDMA_USER_CM_CMD_QUERY_ROUTE, abi.RDMA_USER_CM_CMD_INIT_QP_ATTR,
		abi.RDMA_USER_CM_CMD_NOTIFY, abi.RDMA_USER_CM_CMD_SET_OPTION, abi.RDMA_USER_CM_CMD_GET_EVENT:
		return true
	case abi.RDMA_USER_CM_CMD_CONNECT, abi.RDMA_USER_CM_CMD_ACCEPT, abi.RDMA_USER_CM_CMD_REJECT,
		abi.RDMA_USER_CM_CMD_DISCONNECT:
		return ibOrRoCE
	}
	return false
}

// lock takes the waiter slot, or gives up when ctx is done.
func (d *devFile) lock(ctx context.Context) error {
	// The slot is nearly always free: take it without a full select.
	select {
	case d.wait <- struct{}{}:
		return nil
	default:
	}
	select {
	case d.wait <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *devFile) unlock() { <-d.wait }

// waitLoop runs op through the poller with ctx's deadline and cancellation:
// op is called when the file may be readable and returns false to wait more.
func (d *devFile) waitLoop(ctx context.Context, op func(fd uintptr) bool) error {
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	return d.waitLocked(ctx, op)
}

// waitLocked is waitLoop for a caller holding the waiter slot.
func (d *devFile) waitLocked(ctx context.Context, op func(fd uintptr) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := pollctx.CancelRead(ctx, d.f)
	err := d.rc.Read(op)
	stop()
	if err != nil {
		if cerr := pollctx.ReadErr(ctx, err); cerr != nil {
			return cerr
		}
		if d.isClosed() {
			// The poller says "use of closed file", which is not
			// os.ErrClosed.
			return ErrClosed
		}
		return closedErr(err)
	}
	return nil
}

func (d *devFile) isClosed() bool {
	d.closeMu.RLock()
	defer d.closeMu.RUnlock()
	return d.closed
}

func (d *devFile) getEvent(ctx context.Context, b []byte) error {
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	d.evBuf, d.evErr = b, nil
	err := d.waitLocked(ctx, d.evOp)
	werr := d.evErr
	d.evBuf, d.evErr = nil, nil
	if err != nil {
		return err
	}
	return werr
}

// tryGetEvent is evOp: one non-blocking GET_EVENT of evBuf, false while
// the kernel has no event.
func (d *devFile) tryGetEvent(fd uintptr) bool {
	err := writeCmd(int(fd), d.evBuf, true)
	if err == unix.EAGAIN {
		return false
	}
	d.evErr = err
	return true
}

// poll is unix.Poll; a test makes it fail with EINTR.
var poll = unix.Poll

func (d *devFile) waitReadable(ctx context.Context) error {
	var perr error
	err := d.waitLoop(ctx, func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := poll(pfd, 0)
			if err == unix.EINTR {
				// A signal, the runtime's preemption among them, ended
				// the poll before it looked: it says nothing about the
				// file. Taking it for readable sent a completion wait
				// (ID.waitComp) to read an event that was not there, and
				// wait for one forever.
				continue
			}
			perr = err
			return err != nil || (n > 0 && pfd[0].Revents != 0)
		}
	})
	if err != nil {
		return err
	}
	return perr
}

func (d *devFile) rawConn() syscall.RawConn { return d.rc }

func (d *devFile) fd() int {
	fd := -1
	d.rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func (d *devFile) close() error {
	d.closeMu.Lock()
	d.closed = true
	d.closeMu.Unlock()
	err := d.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// closedErr maps the os package's "file already closed" to ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// ucmaCmd is one command: the header and the command struct, laid out as
// the kernel reads them. It is always heap-allocated (newCmd).
type ucmaCmd[T any] struct {
	hdr  abi.RdmaUcmCmdHdr
	body T
}

// newCmd builds command op with body T and no response; one with a
// response is a ucmaCall (newCall).
func newCmd[T any](op uint32) *ucmaCmd[T] {
	c := new(ucmaCmd[T])
	c.hdr.Cmd = op
	c.hdr.In = uint16(unsafe.Sizeof(c.body))
	return c
}

func (c *ucmaCmd[T]) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(c)), unsafe.Sizeof(*c))
}

// ucmaCall is a command with its response, in one object: the command's
// response field points at resp (newCall's caller sets it). The command's
// bytes go to the file's write, an interface method, so the object lives
// on the heap, where the collector never moves it; the caller reads resp
// after the call, which keeps it alive across the call. uverbs' commands
// rely on the same two facts for the memory their pointer attributes
// name. One allocation per command, and no pinning, which took about a
// tenth of the user-space time of cmtime's server in accepting a
// connection (perf samples, docs/performance.md).
type ucmaCall[T, R any] struct {
	ucmaCmd[T]
	resp R
}

// newCall builds command op with body T and a response R.
func newCall[T, R any](op uint32) *ucmaCall[T, R] {
	c := new(ucmaCall[T, R])
	c.hdr.Cmd = op
	c.hdr.In = uint16(unsafe.Sizeof(c.body))
	c.hdr.Out = uint16(unsafe.Sizeof(c.resp))
	return c
}

// exec writes the command. A command that carries a pointer to a response
// or a value is a ucmaCall, or keeps the memory alive past the call.
func exec[T any](f ucmaFile, c *ucmaCmd[T]) error {
	return execOn(f, c, false)
}

// execOn is exec for a command on an ID whose device is IB or RoCE when
// ibOrRoCE is true, which makes the connection commands quick (quickCmd).
func execOn[T any](f ucmaFile, c *ucmaCmd[T], ibOrRoCE bool) error {
	err := f.write(c.bytes(), quickCmd(c.hdr.Cmd, ibOrRoCE))
	runtime.KeepAlive(c)
	return err
}

// ptr turns a pointer into the u64 the ABI carries.
func ptr[T any](p *T) uint64 { return uint64(uintptr(unsafe.Pointer(p))) }
