package uverbs

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
)

// objKind names the kernel object an object stands for, which selects its
// destroy method.
type objKind uint8

const (
	kindPD objKind = iota
	kindMR
	kindCQ
	kindQP
	kindSRQ
	kindAH
	kindMW
	kindXRCD
)

// object is what releasing a kernel object needs: its context and handle,
// the provider's side (ring mappings), the memory it pins and the objects
// it depends on. The public types (PD, MR, CQ, QP, SRQ, AH) point to their
// object and the object never points back, so a public value the program
// drops without Close becomes unreachable while its object stays reachable
// from the cleanup registered by track. The cleanup then destroys the
// kernel object and releases the provider's side, as Close would.
//
// deps holds the public values of the objects this one was created on (the
// PD of an MR, the CQs and PD of a QP, the context of all). They stay
// reachable until this object is destroyed, so their own cleanups can only
// run after it: an MR is deregistered before its PD is deallocated, a QP is
// destroyed before its CQs, and nothing outlives its context. mem keeps the
// memory of an MR alive for as long as the device may access it, however
// the program drops the MR.
type object struct {
	ctx    *Context
	kind   objKind
	handle uint32
	id     uint64 // the user handle events carry (CQ, QP, SRQ)
	qpn    uint32 // a QP's number

	// rw is held shared by every call that uses the handle and exclusively
	// by the destroy: a handle the kernel may give to a newer object is
	// never sent after Close returned.
	rw   sync.RWMutex
	dead atomic.Bool
	// overrun: the kernel reported a CQ error (rxe and mlx5 raise it when
	// a completion did not fit), so completions were lost.
	overrun atomic.Bool

	prov    interface{ Close() error }
	deps    []any
	mem     []byte
	cleanup runtime.Cleanup
	// onFinish, if set, runs when the object is finished (under rw).
	onFinish func()
}

func newObject(c *Context, kind objKind, handle uint32, deps ...any) *object {
	return &object{ctx: c, kind: kind, handle: handle, deps: append(deps, c)}
}

// createObject sends cmd, the create command of a CQ, QP or SRQ whose new
// handle the kernel leaves in attribute h, with the driver data of the
// provider's builder b, which releases what it allocated when the kernel
// refuses. The object carries id, the user handle its events name it by.
func (c *Context) createObject(cmd *command, h int, b interface {
	Udata() (in, out []byte)
	Abort()
}, kind objKind, id uint64, op string, deps ...any) (*object, error) {
	cmd.udata(b.Udata())
	cmd.quick = c.quick
	if err := cmd.execute(c.f, op); err != nil {
		b.Abort()
		return nil, err
	}
	o := newObject(c, kind, cmd.outIDR(h), deps...)
	o.id = id
	return o, nil
}

// finishCreate is the last step of creating a CQ, QP or SRQ, once the
// kernel object exists: the provider's builder makes its side from the
// kernel's answer, and o and the public value's field prov own it. When
// the provider fails, the kernel object is destroyed again, so a failed
// create leaves nothing behind. single passes the user's promise to
// serialize its calls on to a provider object that can use it.
func finishCreate[P interface{ Close() error }](prov *P, o *object, b provider.Builder[P], created provider.Created, op string, single bool) error {
	p, err := b.Finish(created)
	if err != nil {
		o.destroyKernel()
		return wrapErr(op, err)
	}
	*prov, o.prov = p, p
	if s, ok := any(p).(provider.SingleThreader); ok && single {
		s.SetSingleThreaded()
	}
	return nil
}

// concrete returns a provider object as the types of the providers this
// library carries (rxe's, mlx5's), a nil for the other: the data path
// calls them directly, calls the compiler sees through.
func concrete[R, M any](p any) (R, M) {
	r, _ := p.(R)
	m, _ := p.(M)
	return r, m
}

// track makes o's cleanup run when owner, o's public value, becomes
// unreachable. The cleanup is the safety net behind Close; an object closed
// explicitly cancels it.
func track[T any](owner *T, o *object) {
	o.cleanup = runtime.AddCleanup(owner, (*object).collect, o)
}

// collect is the cleanup of an object whose public value was dropped
// without Close. Nobody can post to it or poll it any more, so it is
// destroyed at once; a failure leaves the kernel object to the context's
// close, which destroys everything on it.
func (o *object) collect() {
	o.rw.Lock()
	defer o.rw.Unlock()
	o.closeLocked()
}

// errNil is the error of a method called on, or given, a nil object.
var errNil = fmt.Errorf("nil object: %w", unix.EINVAL)

// use takes o for one call that sends its handle or touches its provider
// side; done ends it. A closed object gives ErrClosed.
func (o *object) use() error {
	if o == nil {
		return errNil
	}
	o.rw.RLock()
	if o.dead.Load() {
		o.rw.RUnlock()
		return ErrClosed
	}
	return nil
}

func (o *object) done() { o.rw.RUnlock() }

// close destroys the kernel object and releases the provider's side, once.
func (o *object) close() error {
	if o == nil {
		return errNil
	}
	o.rw.Lock()
	defer o.rw.Unlock()
	return o.closeLocked()
}

// closeLocked is close for a caller holding rw.
func (o *object) closeLocked() error {
	if o.dead.Load() {
		return nil
	}
	if err := o.destroyKernel(); err != nil && !isGone(err) {
		return err
	}
	return o.finish()
}

// finish marks o closed once its kernel object is gone and releases what
// it held (under rw).
func (o *object) finish() error {
	o.dead.Store(true)
	o.cleanup.Stop()
	if o.onFinish != nil {
		o.onFinish()
	}
	o.ctx.forget(o)
	o.deps, o.mem = nil, nil
	if o.prov != nil {
		return o.prov.Close()
	}
	return nil
}

// release drops the user-space side of an object whose kernel object went
// with its context.
func (o *object) release() {
	o.rw.Lock()
	defer o.rw.Unlock()
	if !o.dead.Load() {
		o.finish()
	}
}

// destroyKernel sends the kind's destroy method for the handle.
func (o *object) destroyKernel() error {
	var (
		objType, method, attr uint16
		op                    string
		// The destroy responses of CQs, QPs and SRQs report the events
		// delivered; nothing reads them, but the kernel requires the
		// attribute.
		respAttr uint16
		resp     unsafe.Pointer
		respLen  int
	)
	switch o.kind {
	case kindPD:
		objType, method, attr, op = abi.UVERBS_OBJECT_PD, abi.UVERBS_METHOD_PD_DESTROY, abi.UVERBS_ATTR_DESTROY_PD_HANDLE, "dealloc PD"
	case kindMR:
		objType, method, attr, op = abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_MR_DESTROY, abi.UVERBS_ATTR_DESTROY_MR_HANDLE, "dereg MR"
	case kindAH:
		objType, method, attr, op = abi.UVERBS_OBJECT_AH, abi.UVERBS_METHOD_AH_DESTROY, abi.UVERBS_ATTR_DESTROY_AH_HANDLE, "destroy AH"
	case kindMW:
		objType, method, attr, op = abi.UVERBS_OBJECT_MW, abi.UVERBS_METHOD_MW_DESTROY, abi.UVERBS_ATTR_DESTROY_MW_HANDLE, "dealloc MW"
	case kindXRCD:
		objType, method, attr, op = abi.UVERBS_OBJECT_XRCD, abi.UVERBS_METHOD_XRCD_DESTROY, abi.UVERBS_ATTR_DESTROY_XRCD_HANDLE, "close XRCD"
	case kindCQ:
		objType, method, attr, op = abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_DESTROY, abi.UVERBS_ATTR_DESTROY_CQ_HANDLE, "destroy CQ"
		r := new(abi.IbUverbsDestroyCqResp)
		respAttr, resp, respLen = abi.UVERBS_ATTR_DESTROY_CQ_RESP, unsafe.Pointer(r), int(unsafe.Sizeof(*r))
	case kindQP:
		objType, method, attr, op = abi.UVERBS_OBJECT_QP, abi.UVERBS_METHOD_QP_DESTROY, abi.UVERBS_ATTR_DESTROY_QP_HANDLE, "destroy QP"
		r := new(abi.IbUverbsDestroyQpResp)
		respAttr, resp, respLen = abi.UVERBS_ATTR_DESTROY_QP_RESP, unsafe.Pointer(r), int(unsafe.Sizeof(*r))
	case kindSRQ:
		objType, method, attr, op = abi.UVERBS_OBJECT_SRQ, abi.UVERBS_METHOD_SRQ_DESTROY, abi.UVERBS_ATTR_DESTROY_SRQ_HANDLE, "destroy SRQ"
		r := new(abi.IbUverbsDestroySrqResp)
		respAttr, resp, respLen = abi.UVERBS_ATTR_DESTROY_SRQ_RESP, unsafe.Pointer(r), int(unsafe.Sizeof(*r))
	default:
		return fmt.Errorf("uverbs: destroy of unknown object kind %d", o.kind)
	}
	cmd := newCommand(objType, method)
	defer cmd.release()
	cmd.driverID = o.ctx.dev.DriverID
	cmd.idrIn(attr, o.handle)
	if resp != nil {
		cmd.ptrOut(respAttr, resp, respLen)
	}
	return cmd.execute(o.ctx.f, op)
}

// isGone reports errors that mean the kernel object no longer exists, for
// instance because the context was closed under it: closing is then done.
func isGone(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EBADF)
}

// useAll takes several objects for one call, in order, skipping repeats
// (a QP's send and receive CQ are often one CQ, and a read lock must not be
// taken twice: a destroy waiting between the two would deadlock). It
// returns the function that ends the call, or the error of the first
// object that is nil or closed, named by what.
func useAll(op string, objs []*object, what []string) (func(), error) {
	var taken [4]*object
	n := 0
	undo := func() {
		for i := n - 1; i >= 0; i-- {
			taken[i].done()
		}
	}
next:
	for i, o := range objs {
		if o == nil {
			continue
		}
		for _, t := range taken[:n] {
			if t == o {
				continue next
			}
		}
		if err := o.use(); err != nil {
			undo()
			return nil, &Error{Op: op, Err: fmt.Errorf("%s: %w", what[i], err)}
		}
		taken[n] = o
		n++
	}
	return undo, nil
}
