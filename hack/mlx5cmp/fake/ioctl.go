//go:build linux

package fake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// The ioctl path, after uverbs_ioctl.c: a 24-byte struct
// ib_uverbs_ioctl_hdr, then num_attrs 16-byte struct ib_uverbs_attr,
// checked against the method's schema before its handler runs.

const (
	hdrSize  = 24
	attrSize = 16
)

// attrKind is an attribute's type in the schema (UVERBS_ATTR_TYPE_*).
type attrKind int

const (
	ptrIn      attrKind = iota // PTR_IN (CONST_IN, FLAGS_IN and u32/u64 ones are PTR_IN of fixed size)
	ptrOut                     // PTR_OUT
	idrNew                     // IDR, UVERBS_ACCESS_NEW
	idrRead                    // IDR, UVERBS_ACCESS_READ
	idrDestroy                 // IDR, UVERBS_ACCESS_DESTROY
	fdNew                      // FD, UVERBS_ACCESS_NEW
	fdRead                     // FD, UVERBS_ACCESS_READ
)

// attrSpec is one attribute of a method's schema.
type attrSpec struct {
	id        uint16
	name      string
	kind      attrKind
	min, max  int // PTR sizes; max 0: no upper bound
	mandatory bool
	// typ, for a struct attribute, points to a zero value of its uapi
	// struct: the event decodes the data into it.
	typ any
}

// methodSpec is a method: its names, schema and handler.
type methodSpec struct {
	object, method uint16
	objName, name  string
	attrs          []attrSpec
	// noContext: the method runs before GET_CONTEXT.
	noContext bool
	run       func(c *call) error
}

// Schema helpers, named after the kernel's declaration macros.
func u32In(id uint16, name string, m bool) attrSpec { return attrSpec{id, name, ptrIn, 4, 4, m, nil} }
func u64In(id uint16, name string, m bool) attrSpec { return attrSpec{id, name, ptrIn, 8, 8, m, nil} }
func constIn(id uint16, name string, m bool) attrSpec {
	return attrSpec{id, name, ptrIn, 8, 8, m, nil}
}
func flagsIn(id uint16, name string, m bool) attrSpec {
	return attrSpec{id, name, ptrIn, 4, 8, m, nil}
}
func structIn[T any](id uint16, name string, min int, m bool) attrSpec {
	var z T
	return attrSpec{id, name, ptrIn, min, int(unsafe.Sizeof(z)), m, new(T)}
}
func outOf[T any](id uint16, name string, min int, m bool) attrSpec {
	var z T
	if min < 0 {
		min = int(unsafe.Sizeof(z))
	}
	var typ any
	if reflect.TypeFor[T]().Kind() == reflect.Struct {
		typ = new(T) // numbers decode as numbers
	}
	return attrSpec{id, name, ptrOut, min, 0, m, typ}
}
func idr(id uint16, name string, kind attrKind, m bool) attrSpec {
	return attrSpec{id, name, kind, 0, 0, m, nil}
}

// uhw is UVERBS_ATTR_UHW(): the driver data of core methods. in and out
// are the driver's structs.
func uhw(in, out any) []attrSpec {
	return []attrSpec{
		{abi.UVERBS_ATTR_UHW_IN, "UHW_IN", ptrIn, 0, 0, false, in},
		{abi.UVERBS_ATTR_UHW_OUT, "UHW_OUT", ptrOut, 0, 0, false, out},
	}
}

// callAttr is one attribute as sent.
type callAttr struct {
	spec  *attrSpec
	idx   int // in the caller's array
	len   uint16
	flags uint16
	data  uint64
	in    []byte // PTR_IN contents
	// written back on success
	outFlags bool
	newData  bool
	newVal   uint64
}

// call is one ioctl being handled.
type call struct {
	f     *File
	m     Mem
	spec  *methodSpec
	arg   uint64
	attrs map[uint16]*callAttr
	ev    *Event
}

func (c *call) has(id uint16) bool { _, ok := c.attrs[id]; return ok }

// in returns a PTR_IN attribute's bytes (nil if absent).
func (c *call) in(id uint16) []byte {
	if a, ok := c.attrs[id]; ok {
		return a.in
	}
	return nil
}

// u64 reads a PTR_IN attribute of up to 8 bytes as a number.
func (c *call) u64(id uint16) uint64 {
	var b [8]byte
	copy(b[:], c.in(id))
	return binary.LittleEndian.Uint64(b[:])
}

// handle returns an IDR or FD attribute's value.
func (c *call) handle(id uint16) (uint32, bool) {
	a, ok := c.attrs[id]
	if !ok {
		return 0, false
	}
	return uint32(a.data), true
}

// out writes a PTR_OUT attribute, as uverbs_copy_to (at most the
// attribute's length) with zero fill of the rest like
// uverbs_copy_to_struct_or_zero, and marks it valid. An absent optional
// output is skipped.
func (c *call) out(id uint16, b []byte) error {
	a, ok := c.attrs[id]
	if !ok {
		return nil
	}
	n := min(int(a.len), len(b))
	buf := make([]byte, a.len)
	copy(buf, b[:n])
	if err := c.m.WriteAt(buf, a.data); err != nil {
		return refuse(syscall.EFAULT, fmt.Sprintf("writing %s", a.spec.name))
	}
	a.outFlags = true
	c.ev.Out = append(c.ev.Out, decodeAttr(a.spec, b[:n])...)
	return nil
}

// setNew records the new handle or fd of an IDR/FD NEW attribute.
func (c *call) setNew(id uint16, v uint64) {
	a := c.attrs[id]
	a.newData, a.newVal = true, v
	c.ev.Out = append(c.ev.Out, Field{a.spec.name, v})
}

// decodeAttr turns an attribute's bytes into fields.
func decodeAttr(s *attrSpec, b []byte) []Field {
	if s.typ != nil {
		return decodeStruct(s.name, s.typ, b)
	}
	if len(b) <= 8 {
		var w [8]byte
		copy(w[:], b)
		v := binary.LittleEndian.Uint64(w[:])
		if s.name == "USER_HANDLE" {
			return []Field{{s.name, UserHandle(v)}}
		}
		if hexField(lower(s.name)) {
			return []Field{{s.name, Hex(v)}}
		}
		return []Field{{s.name, v}}
	}
	return []Field{{s.name, append([]byte(nil), b...)}}
}

// decodeStruct decodes b as the struct typ points to (shorter b: the
// missing tail reads zero; the actual length is shown when it differs).
func decodeStruct(name string, typ any, b []byte) []Field {
	size, fill := structBytes(typ)
	v := fill(b)
	out := structFields(name, v)
	if len(b) != size {
		out = append([]Field{{name + ".len", uint64(len(b))}}, out...)
	}
	return out
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// Ioctl handles ioctl(fd, req, arg) on the device file.
func (f *File) Ioctl(m Mem, req uint64, arg uint64) (int64, syscall.Errno) {
	k := f.k
	k.mu.Lock()
	k.seq++
	ev := Event{Seq: k.seq, File: f.ID, Path: "ioctl"}
	ret, e := f.ioctl(m, req, arg, &ev)
	ev.Ret, ev.Errno = ret, e
	k.mu.Unlock()
	// Emitted unlocked: the renderer reads the object tables.
	k.emit(ev)
	return ret, e
}

func (f *File) ioctl(m Mem, req, arg uint64, ev *Event) (int64, syscall.Errno) {
	fail := func(e syscall.Errno, note string) (int64, syscall.Errno) {
		ev.Note = note
		return -1, e
	}
	if req != abi.RDMA_VERBS_IOCTL {
		ev.Method = fmt.Sprintf("req%#x", req)
		return fail(syscall.ENOTTY, "not RDMA_VERBS_IOCTL")
	}
	if f.k.p.NoVerbsIoctl {
		// ib_uverbs_ioctl does not exist: the file's unlocked_ioctl
		// is absent, and the VFS answers ENOTTY.
		ev.Method = "RDMA_VERBS_IOCTL"
		return fail(syscall.ENOTTY, "no uverbs ioctl interface (no_verbs_ioctl)")
	}
	var hdr [hdrSize]byte
	if err := m.ReadAt(hdr[:], arg); err != nil {
		return fail(syscall.EFAULT, "reading the header")
	}
	le := binary.LittleEndian
	length, object, method, num := le.Uint16(hdr[0:]), le.Uint16(hdr[2:]), le.Uint16(hdr[4:]), le.Uint16(hdr[6:])
	reserved1, driverID, reserved2 := le.Uint64(hdr[8:]), le.Uint32(hdr[16:]), le.Uint32(hdr[20:])
	ev.Object, ev.Method, ev.DriverID = fmt.Sprintf("obj%#x", object), fmt.Sprintf("method%#x", method), driverID
	spec := methods[[2]uint16{object, method}]
	if spec != nil {
		ev.Object, ev.Method = spec.objName, spec.name
	}
	if length > pageSize || int(length) != hdrSize+int(num)*attrSize {
		return fail(syscall.EINVAL, "header length")
	}
	if reserved1 != 0 || reserved2 != 0 {
		return fail(syscall.EPROTONOSUPPORT, "header reserved fields")
	}
	if f.closed {
		return fail(syscall.EIO, "file closed")
	}
	if spec == nil {
		return fail(syscall.EPROTONOSUPPORT, "no such method")
	}
	raw := make([]byte, int(num)*attrSize)
	if err := m.ReadAt(raw, arg+hdrSize); err != nil {
		return fail(syscall.EFAULT, "reading the attributes")
	}
	c := &call{f: f, m: m, spec: spec, arg: arg, attrs: map[uint16]*callAttr{}, ev: ev}
	for i := 0; i < int(num); i++ {
		b := raw[i*attrSize:]
		id, alen, flags := le.Uint16(b[0:]), le.Uint16(b[2:]), le.Uint16(b[4:])
		elem, reserved, data := b[6], b[7], le.Uint64(b[8:])
		var s *attrSpec
		for j := range spec.attrs {
			if spec.attrs[j].id == id {
				s = &spec.attrs[j]
			}
		}
		if s == nil {
			if flags&abi.UVERBS_ATTR_F_MANDATORY != 0 {
				return fail(syscall.EPROTONOSUPPORT, fmt.Sprintf("unknown mandatory attribute %#x", id))
			}
			continue // an optional attribute the kernel does not know
		}
		if _, dup := c.attrs[id]; dup {
			return fail(syscall.EINVAL, fmt.Sprintf("attribute %s twice", s.name))
		}
		a := &callAttr{spec: s, idx: i, len: alen, flags: flags, data: data}
		switch s.kind {
		case ptrIn, ptrOut:
			if elem != 0 || reserved != 0 {
				return fail(syscall.EINVAL, fmt.Sprintf("%s: reserved bytes", s.name))
			}
			if int(alen) < s.min {
				return fail(syscall.EINVAL, fmt.Sprintf("%s: length %d below %d", s.name, alen, s.min))
			}
			if s.kind == ptrIn {
				if s.max > 0 && int(alen) > s.max {
					if s.typ == nil {
						return fail(syscall.EINVAL, fmt.Sprintf("%s: length %d above %d", s.name, alen, s.max))
					}
				}
				a.in = make([]byte, alen)
				if alen <= 8 {
					var w [8]byte
					le.PutUint64(w[:], data)
					copy(a.in, w[:])
				} else if err := m.ReadAt(a.in, data); err != nil {
					return fail(syscall.EFAULT, fmt.Sprintf("reading %s", s.name))
				}
				if s.typ != nil && s.max > 0 && int(alen) > s.max {
					// UVERBS_ATTR_STRUCT: a longer struct is fine if its
					// tail is zero (uverbs_is_attr_cleared).
					for _, x := range a.in[s.max:] {
						if x != 0 {
							return fail(syscall.EOPNOTSUPP, fmt.Sprintf("%s: non-zero bytes past %d", s.name, s.max))
						}
					}
				}
			}
		}
		c.attrs[id] = a
	}
	for i := range spec.attrs {
		s := &spec.attrs[i]
		if s.mandatory && !c.has(s.id) {
			return fail(syscall.EINVAL, fmt.Sprintf("missing mandatory %s", s.name))
		}
	}
	// The event's inputs, in schema order.
	for i := range spec.attrs {
		s := &spec.attrs[i]
		a, ok := c.attrs[s.id]
		if !ok {
			continue
		}
		switch s.kind {
		case ptrIn:
			ev.In = append(ev.In, decodeAttr(s, a.in)...)
		case ptrOut:
			ev.In = append(ev.In, Field{s.name + ".len", uint64(a.len)})
		case idrRead, idrDestroy, fdRead:
			ev.In = append(ev.In, Field{s.name, a.data})
		}
	}
	if !spec.noContext && f.ctx == nil {
		return fail(syscall.EINVAL, "no ucontext yet")
	}
	if err := spec.run(c); err != nil {
		var en *errno
		if errors.As(err, &en) {
			return fail(en.e, en.note)
		}
		return fail(syscall.EINVAL, err.Error())
	}
	// Success: new handles and fds and the valid-output flags go back
	// into the caller's attribute array. UHW_OUT is marked too, as the
	// kernel does since "Mark ioctl responses with UVERBS_ATTR_F_VALID_OUTPUT".
	if a, ok := c.attrs[abi.UVERBS_ATTR_UHW_OUT]; ok && a.spec.kind == ptrOut && spec.object < 0x1000 {
		a.outFlags = true
	}
	for _, a := range c.attrs {
		base := arg + hdrSize + uint64(a.idx)*attrSize
		if a.outFlags {
			var w [2]byte
			le.PutUint16(w[:], a.flags|abi.UVERBS_ATTR_F_VALID_OUTPUT)
			if err := m.WriteAt(w[:], base+4); err != nil {
				return fail(syscall.EFAULT, "writing attribute flags")
			}
		}
		if a.newData {
			var w [8]byte
			le.PutUint64(w[:], a.newVal)
			if err := m.WriteAt(w[:], base+8); err != nil {
				return fail(syscall.EFAULT, "writing a new handle")
			}
		}
	}
	return 0, 0
}
