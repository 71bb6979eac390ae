//go:build linux

package fake

import (
	"encoding/binary"
	"errors"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rdmago/rdma/internal/abi"
)

// memory is the target's memory in a test: one buffer at a base address.
type memory struct {
	base uint64
	b    []byte
	next uint64 // bump allocator
}

var errFault = errors.New("fault")

func (m *memory) ReadAt(p []byte, addr uint64) error {
	if addr < m.base || addr+uint64(len(p)) > m.base+uint64(len(m.b)) {
		return errFault
	}
	copy(p, m.b[addr-m.base:])
	return nil
}

func (m *memory) WriteAt(p []byte, addr uint64) error {
	if addr < m.base || addr+uint64(len(p)) > m.base+uint64(len(m.b)) {
		return errFault
	}
	copy(m.b[addr-m.base:], p)
	return nil
}

// put copies b into fresh target memory and returns its address.
func (m *memory) put(b []byte) uint64 {
	a := m.base + m.next
	copy(m.b[m.next:], b)
	m.next += (uint64(len(b)) + 63) &^ 63
	return a
}

type tattr struct {
	id   uint16
	kind string // "in", "out", "const", "idr", "fd"
	b    []byte
	v    uint64
	out  uint64 // where an out attribute's buffer is
}

// ioctl builds and sends one RDMA_VERBS_IOCTL; it returns the attribute
// array as the kernel left it.
func ioctl(t *testing.T, f *File, m *memory, obj, meth uint16, attrs []tattr) (syscall.Errno, []byte) {
	t.Helper()
	le := binary.LittleEndian
	buf := make([]byte, hdrSize+len(attrs)*attrSize)
	le.PutUint16(buf[0:], uint16(len(buf)))
	le.PutUint16(buf[2:], obj)
	le.PutUint16(buf[4:], meth)
	le.PutUint16(buf[6:], uint16(len(attrs)))
	le.PutUint32(buf[16:], abi.RDMA_DRIVER_MLX5)
	for i := range attrs {
		a := &attrs[i]
		o := buf[hdrSize+i*attrSize:]
		le.PutUint16(o[0:], a.id)
		le.PutUint16(o[4:], abi.UVERBS_ATTR_F_MANDATORY)
		switch a.kind {
		case "in":
			le.PutUint16(o[2:], uint16(len(a.b)))
			if len(a.b) <= 8 {
				var w [8]byte
				copy(w[:], a.b)
				copy(o[8:], w[:])
			} else {
				le.PutUint64(o[8:], m.put(a.b))
			}
		case "const":
			le.PutUint16(o[2:], 8)
			le.PutUint64(o[8:], a.v)
		case "out":
			le.PutUint16(o[2:], uint16(len(a.b)))
			a.out = m.put(a.b)
			le.PutUint64(o[8:], a.out)
		case "idr", "fd":
			le.PutUint64(o[8:], a.v)
		}
	}
	addr := m.put(buf)
	_, e := f.Ioctl(m, abi.RDMA_VERBS_IOCTL, addr)
	for i := range attrs {
		if attrs[i].kind == "out" {
			m.ReadAt(attrs[i].b, attrs[i].out)
		}
	}
	out := make([]byte, len(buf))
	m.ReadAt(out, addr)
	return e, out[hdrSize:]
}

func newTest(t *testing.T) (*Kernel, *File, *memory, *[]Event) {
	p, err := LoadProfile("../testdata/cx6.json")
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	k := New(p, func(e Event) { evs = append(evs, e) })
	next := 100
	k.NewFD = func(string) (int, error) { next++; return next, nil }
	m := &memory{base: 0x7f0000000000, b: make([]byte, 1<<20)}
	return k, k.Open(make([]byte, DevMemSize)), m, &evs
}

func getContext(t *testing.T, f *File, m *memory) *abi.Mlx5IbAllocUcontextResp {
	req := abi.Mlx5IbAllocUcontextReqV2{Total_num_bfregs: 16, Num_low_latency_bfregs: 4, Max_cqe_version: 1,
		Lib_caps: abi.MLX5_LIB_CAP_4K_UAR | abi.MLX5_LIB_CAP_DYN_UAR}
	resp := make([]byte, unsafe.Sizeof(abi.Mlx5IbAllocUcontextResp{}))
	e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT, []tattr{
		{id: abi.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, kind: "out", b: make([]byte, 4)},
		{id: abi.UVERBS_ATTR_UHW_IN, kind: "in", b: bytesOf(&req)},
		{id: abi.UVERBS_ATTR_UHW_OUT, kind: "out", b: resp},
	})
	if e != 0 {
		t.Fatalf("GET_CONTEXT: %v", e)
	}
	return fromBytes[abi.Mlx5IbAllocUcontextResp](resp)
}

func TestProbeAndContext(t *testing.T) {
	_, f, m, evs := newTest(t)
	// libibverbs' probe: INVOKE_WRITE of QUERY_DEVICE without buffers.
	e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE, []tattr{
		{id: abi.UVERBS_ATTR_WRITE_CMD, kind: "const", v: abi.IB_USER_VERBS_CMD_QUERY_DEVICE}})
	if e != syscall.ENOSPC {
		t.Fatalf("probe: got %v, want ENOSPC", e)
	}
	r := getContext(t, f, m)
	if r.Tot_bfregs != 0 || r.Cqe_version != 1 || r.Bf_reg_size != 256 || r.Response_length != uint32(unsafe.Sizeof(*r)) {
		t.Errorf("context response %+v", r)
	}
	// A second GET_CONTEXT is refused.
	if e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT, nil); e != syscall.EINVAL {
		t.Errorf("second GET_CONTEXT: %v", e)
	}
	// An unknown mandatory attribute.
	if e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_CONTEXT, []tattr{{id: 0x55, kind: "const"}}); e != syscall.EPROTONOSUPPORT {
		t.Errorf("unknown attribute: %v", e)
	}
	for _, ev := range *evs {
		if s := ev.String(); !strings.HasPrefix(s, "#") {
			t.Errorf("event %q", s)
		}
	}
	if got := (*evs)[0].String(); !strings.Contains(got, "invoke_write QUERY_DEVICE") || !strings.Contains(got, "ENOSPC") {
		t.Errorf("probe event %q", got)
	}
}

func TestCQ(t *testing.T) {
	k, f, m, evs := newTest(t)
	getContext(t, f, m)
	off, length, page := make([]byte, 8), make([]byte, 4), make([]byte, 4)
	e, arr := ioctl(t, f, m, abi.MLX5_IB_OBJECT_UAR, abi.MLX5_IB_METHOD_UAR_OBJ_ALLOC, []tattr{
		{id: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, kind: "idr"},
		{id: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, kind: "const", v: abi.MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC},
		{id: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, kind: "out", b: off},
		{id: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, kind: "out", b: length},
		{id: abi.MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, kind: "out", b: page},
	})
	if e != 0 {
		t.Fatalf("UAR alloc: %v", e)
	}
	le := binary.LittleEndian
	if got := le.Uint64(off); got != 0x900000 || got+4096 > DevMemSize {
		t.Errorf("mmap offset %#x", got)
	}
	if le.Uint16(arr[2*attrSize+4:])&abi.UVERBS_ATTR_F_VALID_OUTPUT == 0 {
		t.Error("MMAP_OFFSET not marked valid")
	}
	buf := m.put(make([]byte, 128*64))
	db := m.put(make([]byte, 64))
	mk := func(pageIdx uint16) []tattr {
		cmd := abi.Mlx5IbCreateCq{Buf_addr: buf, Db_addr: db, Cqe_size: 64, Flags: abi.MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, Uar_page_index: pageIdx}
		var cqe, vec [4]byte
		le.PutUint32(cqe[:], 127)
		return []tattr{
			{id: abi.UVERBS_ATTR_CREATE_CQ_HANDLE, kind: "idr"},
			{id: abi.UVERBS_ATTR_CREATE_CQ_CQE, kind: "in", b: cqe[:]},
			{id: abi.UVERBS_ATTR_CREATE_CQ_USER_HANDLE, kind: "const", v: 7},
			{id: abi.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, kind: "in", b: vec[:]},
			{id: abi.UVERBS_ATTR_CREATE_CQ_RESP_CQE, kind: "out", b: make([]byte, 4)},
			{id: abi.UVERBS_ATTR_UHW_IN, kind: "in", b: bytesOf(&cmd)},
			{id: abi.UVERBS_ATTR_UHW_OUT, kind: "out", b: make([]byte, 8)},
		}
	}
	// Another context's UAR page is refused.
	if e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE, mk(uint16(le.Uint32(page))+1)); e != syscall.EINVAL {
		t.Errorf("foreign UAR: %v", e)
	}
	attrs := mk(uint16(le.Uint32(page)))
	if e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_CREATE, attrs); e != 0 {
		t.Fatalf("CQ create: %v (%s)", e, (*evs)[len(*evs)-1])
	}
	if got := le.Uint32(attrs[4].b); got != 127 {
		t.Errorf("resp cqe %d", got)
	}
	cqs := k.CQs()
	if len(cqs) != 1 || cqs[0].CQN != k.p.CQNBase || cqs[0].NCQE != 128 || cqs[0].UAROffset != 0x900000 || cqs[0].Buf != Addr(buf) {
		t.Errorf("CQ table %+v", cqs[0])
	}
	// Destroying an unknown handle.
	if e, _ := ioctl(t, f, m, abi.UVERBS_OBJECT_CQ, abi.UVERBS_METHOD_CQ_DESTROY, []tattr{
		{id: abi.UVERBS_ATTR_DESTROY_CQ_HANDLE, kind: "idr", v: 9},
		{id: abi.UVERBS_ATTR_DESTROY_CQ_RESP, kind: "out", b: make([]byte, 8)}}); e != syscall.ENOENT {
		t.Errorf("destroy unknown CQ: %v", e)
	}
	f.Close()
	if len(k.CQs()) != 0 || len(k.UARs()) != 0 {
		t.Error("Close left objects")
	}
}

func TestWritePD(t *testing.T) {
	k, f, m, _ := newTest(t)
	// Before GET_CONTEXT.
	resp := m.put(make([]byte, 8))
	req := make([]byte, 16)
	binary.LittleEndian.PutUint32(req[0:], abi.IB_USER_VERBS_CMD_ALLOC_PD)
	binary.LittleEndian.PutUint16(req[4:], 4)
	binary.LittleEndian.PutUint16(req[6:], 2)
	binary.LittleEndian.PutUint64(req[8:], resp)
	if _, e := f.Write(m, req); e != syscall.EINVAL {
		t.Errorf("ALLOC_PD without context: %v", e)
	}
	getContext(t, f, m)
	if n, e := f.Write(m, req); e != 0 || n != 16 {
		t.Fatalf("ALLOC_PD: %d %v", n, e)
	}
	var out [8]byte
	m.ReadAt(out[:], resp)
	if h, pdn := binary.LittleEndian.Uint32(out[:]), binary.LittleEndian.Uint32(out[4:]); h != 0 || pdn != k.p.PDNBase {
		t.Errorf("pd handle %d pdn %d", h, pdn)
	}
	// in_words that do not match the count.
	binary.LittleEndian.PutUint16(req[4:], 3)
	if _, e := f.Write(m, req); e != syscall.EINVAL {
		t.Errorf("bad in_words: %v", e)
	}
}
