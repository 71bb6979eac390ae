//go:build linux

package fake

import (
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"unsafe"
)

// Addr is a virtual address in the target process: a queue buffer, a
// doorbell record, a response buffer. Addresses differ between runs and
// between drivers, so a renderer names them by region and offset (CQs(),
// QPs(), MRs()) instead of printing them.
type Addr uint64

// UserHandle is the opaque user_handle a driver hands the kernel for a CQ
// or QP, which events carry back. libibverbs passes a pointer, rdmago a
// counter, so the renderer normalises it too.
type UserHandle uint64

// Hex is a number best read in hex: flags, masks, GUIDs, keys.
type Hex uint64

// Field is one decoded value of a command: an attribute or a struct field
// named as in the uapi headers ("CQE", "UHW_IN.buf_addr", "core.qp_handle").
// Value is one of uint64, int64, Hex, Addr, UserHandle, string or []byte.
type Field struct {
	Name  string
	Value any
}

func (f Field) String() string {
	switch v := f.Value.(type) {
	case Addr:
		return fmt.Sprintf("%s=addr:%#x", f.Name, uint64(v))
	case UserHandle:
		return fmt.Sprintf("%s=uh:%#x", f.Name, uint64(v))
	case Hex:
		return fmt.Sprintf("%s=%#x", f.Name, uint64(v))
	case []byte:
		return fmt.Sprintf("%s=%x", f.Name, v)
	case string:
		return fmt.Sprintf("%s=%q", f.Name, v)
	}
	return fmt.Sprintf("%s=%v", f.Name, f.Value)
}

// Event is the transcript record of one command on a device file.
//
// Path says how the command came: "ioctl" (RDMA_VERBS_IOCTL method),
// "invoke_write" (a write command wrapped in UVERBS_METHOD_INVOKE_WRITE) or
// "write" (write(2) on the device). For the last two Object is empty and
// Method is the write command's name without its prefix ("MODIFY_QP",
// "EX_QUERY_DEVICE"), the same for both paths, so the two compare.
//
// In holds the input attributes in the method's schema order (not the
// order sent), Out what the kernel wrote, both decoded down to the uapi
// struct fields: core request fields are "core.NAME", driver data
// "UHW_IN.NAME"/"UHW_OUT.NAME" (ioctl attribute names otherwise).
type Event struct {
	Seq      int    // per Kernel, from 1
	File     int    // which open of the device, from 0
	Path     string // "ioctl", "invoke_write" or "write"
	Object   string // ioctl object, UVERBS_OBJECT_/MLX5_IB_OBJECT_ dropped
	Method   string // ioctl method or write command name
	DriverID uint32 // the ioctl header's driver_id
	In       []Field
	Out      []Field
	Ret      int64         // the system call's return value on success
	Errno    syscall.Errno // 0 on success
	Note     string        // which kernel check refused it
}

// String renders the event on one line, deterministically: fields in
// schema and struct order.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d f%d %s ", e.Seq, e.File, e.Path)
	if e.Object != "" {
		b.WriteString(e.Object + ".")
	}
	b.WriteString(e.Method)
	if e.Path == "ioctl" {
		fmt.Fprintf(&b, " drv=%d", e.DriverID)
	}
	b.WriteString(" in{")
	for i, f := range e.In {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.String())
	}
	b.WriteString("} out{")
	for i, f := range e.Out {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.String())
	}
	b.WriteString("} = ")
	if e.Errno != 0 {
		fmt.Fprintf(&b, "-%s", errnoName(e.Errno))
		if e.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.Note)
		}
	} else {
		fmt.Fprintf(&b, "%d", e.Ret)
	}
	return b.String()
}

func errnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{
		syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO", syscall.EBADF: "EBADF",
		syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES", syscall.EFAULT: "EFAULT",
		syscall.EBUSY: "EBUSY", syscall.EEXIST: "EEXIST", syscall.EINVAL: "EINVAL", syscall.ENOSPC: "ENOSPC",
		syscall.ENOTTY: "ENOTTY", syscall.ERANGE: "ERANGE", syscall.ENOSYS: "ENOSYS",
		syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT", syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.EOVERFLOW: "EOVERFLOW",
		syscall.EMFILE: "EMFILE",
	}
	if n, ok := names[e]; ok {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

// addrFields are the struct fields (lower-cased uapi names) that hold
// user virtual addresses.
var addrFields = map[string]bool{
	"response": true, "buf_addr": true, "db_addr": true, "sq_buf_addr": true,
	"start": true, "hca_va": true,
}

// hexFields are the fields rendered in hex.
func hexField(name string) bool {
	for _, s := range []string{"flags", "mask", "guid", "caps", "key", "lib_caps", "cap_flags", "fw_ver", "size_cap", "max_mr_size", "options", "handle_cookie"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// structFields flattens a uapi struct into fields named prefix.field, in
// struct order. ptr points to the struct. Reserved fields appear only
// when not zero: a driver that sets one is worth seeing, one that leaves
// it zero is not.
func structFields(prefix string, ptr any) []Field {
	var out []Field
	walkStruct(prefix, reflect.ValueOf(ptr).Elem(), &out)
	return out
}

func walkStruct(prefix string, v reflect.Value, out *[]Field) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name := strings.ToLower(sf.Name)
		if sf.Name == "_" {
			continue
		}
		full := name
		if prefix != "" {
			full = prefix + "." + name
		}
		fv := v.Field(i)
		reserved := strings.HasPrefix(name, "reserved") || strings.HasPrefix(name, "resv") || strings.HasPrefix(name, "pad")
		if reserved && fv.IsZero() {
			continue
		}
		switch fv.Kind() {
		case reflect.Struct:
			walkStruct(full, fv, out)
		case reflect.Array:
			b := make([]byte, fv.Len()*int(fv.Type().Elem().Size()))
			copy(b, unsafe.Slice((*byte)(unsafe.Pointer(fv.Addr().Pointer())), len(b)))
			*out = append(*out, Field{full, b})
		default:
			u := fv.Uint()
			switch {
			case addrFields[name]:
				*out = append(*out, Field{full, Addr(u)})
			case name == "user_handle":
				*out = append(*out, Field{full, UserHandle(u)})
			case hexField(name):
				*out = append(*out, Field{full, Hex(u)})
			default:
				*out = append(*out, Field{full, u})
			}
		}
	}
}
