//go:build linux

package fake

import (
	"encoding/binary"
	"sort"
	"sync"
	"syscall"

	"github.com/rdmago/rdma/internal/abi"
)

// Mem is the target process's memory.
type Mem interface {
	ReadAt(p []byte, addr uint64) error
	WriteAt(p []byte, addr uint64) error
}

// The device file's mmap space, as mlx5_ib lays it out (mlx5_ib_mmap):
// the page offset's bits 8..15 are a command, bits 0..7 an index. Each
// open's memfd holds all of it; devmem offsets equal mmap offsets.
const (
	pageSize = 4096
	// Static UAR pages (MLX5_IB_MMAP_REGULAR_PAGE, command 0): page idx.
	// Dynamic UARs (the UAR object's rdma_user_mmap entries, command 9
	// and up, mlx5_entry_to_mmap_offset): page 0x900 + index for the
	// first 256 entries of a context.
	dynUARFirstPage = 9 << 8
	maxDynUARs      = 256
	// MLX5_IB_MMAP_CORE_CLOCK << 8 and MLX5_IB_MMAP_CLOCK_INFO << 8 |
	// MLX5_IB_CLOCK_INFO_V1.
	CoreClockOffset = abi.MLX5_IB_MMAP_CORE_CLOCK << 8 * pageSize
	ClockInfoOffset = abi.MLX5_IB_MMAP_CLOCK_INFO << 8 * pageSize
	// DevMemSize is the size of each open's memfd: up to the last dynamic
	// UAR page.
	DevMemSize = (dynUARFirstPage + maxDynUARs) * pageSize
	// BFOffset is where a UAR's BlueFlame registers start (MLX5_BF_OFFSET);
	// CQDoorbellOffset is the CQ arm doorbell (MLX5_CQ_DOORBELL).
	BFOffset         = 0x800
	CQDoorbellOffset = 0x20
)

// Kernel is the fake mlx5_ib kernel of one device: the device's numbering
// (QPNs, CQNs, mkeys, UAR indexes) is shared by its files, as a device's
// is, whether one process opened them or several (mlx5cmp pair).
type Kernel struct {
	// NewFD installs a new file in the target and returns its number: the
	// async event file (kind "async_event") and completion channels
	// ("comp_channel"). The supervisor must set it (SECCOMP_IOCTL_NOTIF_ADDFD
	// of an eventfd or pipe, during the notification being answered);
	// without it such commands fail with ENOSYS.
	NewFD func(kind string) (int, error)

	p    *Profile
	emit func(Event)

	mu      sync.Mutex
	seq     int
	opens   int
	nextQPN uint32
	nextCQN uint32
	mkeyIdx uint32
	mkeyVar uint8 // the mkey's low byte, a variant counter as mlx5's mkey_var
	pdn     uint32
	uarIdx  uint32
	cqs     []*CQ
	qps     []*QP
	mrs     []*MR
	uars    []*UAR
	// sysUARs: the static UAR pages of the open contexts (mlx5.go).
	sysUARs []*UAR
	srqs    []*SRQ
	// nextSRQN: the next SRQ number (srq.go), 0 until the first.
	nextSRQN uint32
	// nextXRCDN: the next XRC domain number (xrc.go), 0 until the first.
	nextXRCDN uint32
}

// New makes the kernel of one target. emit receives every command's
// event; it may be nil.
func New(p *Profile, emit func(Event)) *Kernel {
	if emit == nil {
		emit = func(Event) {}
	}
	return &Kernel{p: p, emit: emit, nextQPN: p.QPNBase, nextCQN: p.CQNBase, mkeyIdx: p.MkeyBase, uarIdx: p.UARBase, pdn: p.PDNBase}
}

// Open is a new open of uverbs0; devmem is the supervisor's shared
// mapping of the file's memfd, DevMemSize bytes. The clock pages are
// written now: a driver maps them when it opens the context.
func (k *Kernel) Open(devmem []byte) *File {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := &File{k: k, ID: k.opens, devmem: devmem, fds: map[int]string{}}
	k.opens++
	for i := range f.ids {
		f.ids[i] = map[uint32]any{}
	}
	if len(devmem) >= DevMemSize {
		// The core clock page: the 64-bit free-running counter, big
		// endian, at hca_core_clock_offset (internal_timer_h, then _l).
		off := CoreClockOffset + int(k.p.Mlx5Context.Hca_core_clock_offset)
		binary.BigEndian.PutUint32(devmem[off:], uint32(k.p.CoreClock>>32))
		binary.BigEndian.PutUint32(devmem[off+4:], uint32(k.p.CoreClock))
		// struct mlx5_ib_clock_info, version 1: a 156.25 MHz clock
		// (6.4 ns a cycle: mult/2^shift), sign even (no update running).
		ci := abi.Mlx5IbClockInfo{
			Nsec:            1_700_000_000_000_000_000,
			Cycles:          k.p.CoreClock,
			Mult:            53687091, // 6.4 << 23
			Shift:           23,
			Mask:            1<<64 - 1,
			Overflow_period: 1 << 40,
		}
		copy(devmem[ClockInfoOffset:], bytesOf(&ci))
	}
	return f
}

// nextPDN numbers PDs device-wide, as the firmware's alloc_pd does.
func (k *Kernel) nextPDN() uint32 {
	n := k.pdn
	k.pdn++
	return n
}

// CQs returns the live CQs of every file, by CQN.
func (k *Kernel) CQs() []*CQ {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]*CQ(nil), k.cqs...)
	sort.Slice(out, func(i, j int) bool { return out[i].CQN < out[j].CQN })
	return out
}

// QPs returns the live QPs of every file, by QPN.
func (k *Kernel) QPs() []*QP {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]*QP(nil), k.qps...)
	sort.Slice(out, func(i, j int) bool { return out[i].QPN < out[j].QPN })
	return out
}

// MRs returns the live MRs of every file, by lkey.
func (k *Kernel) MRs() []*MR {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]*MR(nil), k.mrs...)
	sort.Slice(out, func(i, j int) bool { return out[i].LKey < out[j].LKey })
	return out
}

// UARs returns the live UAR objects (dynamic UARs) of every file.
func (k *Kernel) UARs() []*UAR {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*UAR(nil), k.uars...)
}

// Object types, each with its own handle space in this fake. (The real
// kernel numbers all of a file's objects from one space; one per type
// keeps handles stable when the drivers allocate UARs at different
// times, which is the comparison's point.)
type objType int

const (
	objPD objType = iota
	objMR
	objCQ
	objQP
	objUAR
	objSRQ
	objAH
	objXRCD
	numObjTypes
)

// File is one open of the device: the uverbs file, its ucontext and
// objects.
type File struct {
	k      *Kernel
	ID     int // open number, from 0
	devmem []byte
	ctx    *ucontext
	ids    [numObjTypes]map[uint32]any
	fds    map[int]string // files this context handed out, by number: their kind
	closed bool
}

// ucontext is what GET_CONTEXT made (struct mlx5_ib_ucontext).
type ucontext struct {
	cqeVersion uint8
	dynUAR     bool
	devxUID    bool
	totBfregs  uint32
	lowLat     uint32
	// sysPages: the static UAR pages' hardware indexes, when not dynamic.
	sysPages []uint32
	// bfregV2: the request was mlx5_ib_alloc_ucontext_req_v2 (bfregi's
	// ver 2), whose QPs get low-latency and medium bfregs; bfregUse
	// counts each static bfreg's QPs (bfregi's count).
	bfregV2  bool
	bfregUse []uint32
	// dynPages: mmap entry indexes in use (lowest free is taken).
	dynPages [maxDynUARs]bool
}

// alloc gives the lowest free handle of a type, as xa_alloc does.
func (f *File) alloc(t objType, o any) uint32 {
	m := f.ids[t]
	for h := uint32(0); ; h++ {
		if _, used := m[h]; !used {
			m[h] = o
			return h
		}
	}
}

func lookup[T any](f *File, t objType, h uint32) (T, bool) {
	o, ok := f.ids[t][h].(T)
	return o, ok
}

// PD is a protection domain.
type PD struct {
	Handle uint32
	File   *File
	users  int
}

// XRCD is an XRC domain: the scope of XRC receive QPs and XRC SRQs.
// XRCDN numbers it device-wide, as the firmware's alloc_xrcd does.
type XRCD struct {
	Handle uint32
	XRCDN  uint32
	File   *File
	users  int // XRC SRQs and receive QPs in it
}

// MR is a registered memory region: the target's [Addr, Addr+Length)
// seen by the device at IOVA.
type MR struct {
	Handle uint32
	File   *File
	PD     uint32 // the PD's handle
	Addr   Addr
	Length uint64
	IOVA   uint64
	Access Hex
	LKey   uint32
	RKey   uint32
}

// UAR is a dynamic UAR (MLX5_IB_OBJECT_UAR).
type UAR struct {
	Handle uint32
	File   *File
	NC     bool   // MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC; else BF (write combining)
	PageID uint32 // the hardware UAR index drivers name it by
	// Offset is both the mmap offset given to the driver and the page's
	// offset in the file's devmem.
	Offset uint64
	Length uint32
	entry  int
}

// CQ is a completion queue in the target's memory.
type CQ struct {
	Handle      uint32
	CQN         uint32
	File        *File
	UserHandle  UserHandle
	NCQE        int // entries in the ring, a power of two (the response's cqe + 1)
	CQESize     int // 64 or 128
	Buf         Addr
	DBRec       Addr
	UARPage     uint32 // hardware UAR index the CQ arms through
	UAROffset   int    // that UAR page's offset in devmem; -1 if not this file's
	CompVector  uint32
	CompChannel int // fd, -1 none
	Flags       Hex // mlx5_ib_create_cq flags
	CreateFlags Hex // the core's CQ flags
	users       int
}

// QP is a queue pair in the target's memory. Its buffer holds the RQ at
// RQOffset and the SQ at SQOffset (unless SQBuf is set), as mlx5 lays
// user QPs out.
type QP struct {
	Handle     uint32
	QPN        uint32
	File       *File
	Type       uint32 // enum ib_uverbs_qp_type: RC 2, UC 3, UD 4, XRC_INI 9, XRC_TGT 10
	UserHandle UserHandle
	XRCD       *XRCD // an XRC_TGT QP's domain; nil for the others
	PD         uint32
	SendCQ     *CQ
	RecvCQ     *CQ
	SRQ        uint32 // handle, or ^0
	Caps       abi.IbUverbsQpCap
	SigAll     bool
	Buf        Addr
	SQBuf      Addr // separate SQ buffer (raw packet), else 0
	DBRec      Addr // RQ counter at +0, SQ counter at +4
	RQWQECount uint32
	RQWQEShift uint32
	SQWQECount uint32 // 64-byte WQEBBs
	RQOffset   int
	SQOffset   int
	Flags      Hex // mlx5_ib_create_qp flags
	UIdx       uint32
	ECE        uint32
	// UARPage is the hardware UAR index of the QP's doorbell page;
	// UAROffset that page's offset in devmem (-1 if unknown). With
	// dynamic UARs the kernel names only the page: the driver picks one
	// of its BlueFlame registers, at BFOffset + i*BFRegSize for i < 2
	// (each two halves of BFRegSize/2 used alternately), so the device
	// side watches [UAROffset+BFOffset, UAROffset+BFOffset+2*BFRegSize).
	UARPage   uint32
	UAROffset int
	BFOffset  int // UAROffset + BFOffset: the first register
	BFRegSize int
	// State and the attributes MODIFY_QP set (struct ib_uverbs_qp_attr
	// fields of the last modify that named each).
	State uint8
	Attr  abi.IbUverbsQueryQpResp
	// bfreg is 1 + the static bfreg create_user_qp allocated; 0: none
	// (dynamic UARs, or a QP the fake made otherwise).
	bfreg int
}

// Close is the target's close of the file: everything of the context is
// destroyed, QPs first, as uverbs_destroy_ufile_hw does by its
// destroy order.
func (f *File) Close() {
	k := f.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for _, t := range []objType{objQP, objAH, objSRQ, objCQ, objMR, objPD, objXRCD, objUAR} {
		for h, o := range f.ids[t] {
			f.destroyLocked(o)
			delete(f.ids[t], h)
		}
	}
	k.dropSysUARs(f)
	f.ctx = nil
}

// destroyLocked removes an object from the device tables.
func (f *File) destroyLocked(o any) {
	k := f.k
	switch o := o.(type) {
	case *QP:
		k.qps = remove(k.qps, o)
		f.freeBfreg(o)
		if o.XRCD != nil {
			o.XRCD.users-- // an XRC_TGT QP holds its domain and nothing else
			return
		}
		o.SendCQ.users--
		if o.RecvCQ != nil {
			o.RecvCQ.users--
		}
		if pd, ok := lookup[*PD](f, objPD, o.PD); ok {
			pd.users--
		}
		if srq, ok := lookup[*SRQ](f, objSRQ, o.SRQ); ok && o.SRQ != ^uint32(0) {
			srq.users--
		}
	case *SRQ:
		k.srqs = remove(k.srqs, o)
		if pd, ok := lookup[*PD](f, objPD, o.PD); ok {
			pd.users--
		}
		if o.XRCD != nil {
			o.XRCD.users--
			o.CQ.users--
		}
	case *CQ:
		k.cqs = remove(k.cqs, o)
	case *AH:
		if pd, ok := lookup[*PD](f, objPD, o.PD); ok {
			pd.users--
		}
	case *MR:
		k.mrs = remove(k.mrs, o)
		if pd, ok := lookup[*PD](f, objPD, o.PD); ok {
			pd.users--
		}
	case *UAR:
		k.uars = remove(k.uars, o)
		if f.ctx != nil {
			f.ctx.dynPages[o.entry] = false
		}
	}
}

func remove[T comparable](s []T, v T) []T {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// uarOffset finds the devmem offset of a hardware UAR index on this file.
func (f *File) uarOffset(page uint32) (int, bool) {
	for _, o := range f.ids[objUAR] {
		u := o.(*UAR)
		if u.PageID == page {
			return int(u.Offset), true
		}
	}
	if f.ctx != nil {
		for i, p := range f.ctx.sysPages {
			if p == page/1 && i < 256 {
				return i * pageSize, true
			}
		}
	}
	return -1, false
}

// errno carries a refusal and the check that made it.
type errno struct {
	e    syscall.Errno
	note string
}

func (e *errno) Error() string { return e.note }

func refuse(e syscall.Errno, note string) error { return &errno{e, note} }
