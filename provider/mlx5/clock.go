package mlx5

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// clock holds the two pages through which the kernel shows the device's
// free-running clock, the one CQE timestamps count: the HCA's core clock
// register (MLX5_IB_MMAP_CORE_CLOCK), read directly, and the clock info
// page (MLX5_IB_MMAP_CLOCK_INFO, struct mlx5_ib_clock_info), in which the
// kernel keeps the clock's conversion to wall time. Either may be absent:
// the kernel offers each only where the device has it.
type clock struct {
	// mu is held shared while a page is read and exclusively while the
	// context's Close unmaps them, so a read never touches a page gone.
	mu       sync.RWMutex
	corePage []byte
	core     unsafe.Pointer // the 64-bit big-endian counter in corePage
	info     []byte         // the clock info page
}

// mapClock maps the pages the context response offers, as rdma-core's
// mlx5_init_context does: the core clock page when the response has its
// offset, the clock info page when the kernel speaks its version 1. Both
// are read-only (the kernel refuses a writable clock info mapping). A
// failed mapping leaves that page absent, as in rdma-core, which only
// warns: timestamps then cannot be converted, the rest works.
func (c *Context) mapClock(r *abi.Mlx5IbAllocUcontextResp) {
	if r.Comp_mask&abi.MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET != 0 {
		off := int(r.Hca_core_clock_offset & uint64(c.pageSize-1))
		pg, err := c.k.Mmap(clockMmapOffset(abi.MLX5_IB_MMAP_CORE_CLOCK, 0, c.pageSize), c.pageSize, unix.PROT_READ)
		switch {
		case err != nil:
		case len(pg) < c.pageSize || off+8 > len(pg):
			c.k.Munmap(pg)
		default:
			c.clock.corePage, c.clock.core = pg, unsafe.Pointer(&pg[off])
		}
	}
	if r.Clock_info_versions&(1<<abi.MLX5_IB_CLOCK_INFO_V1) != 0 {
		pg, err := c.k.Mmap(clockMmapOffset(abi.MLX5_IB_MMAP_CLOCK_INFO, abi.MLX5_IB_CLOCK_INFO_V1, c.pageSize), c.pageSize, unix.PROT_READ)
		switch {
		case err != nil:
		case len(pg) < abi.SizeofMlx5IbClockInfo:
			c.k.Munmap(pg)
		default:
			c.clock.info = pg
		}
	}
}

// clockMmapOffset is the mmap offset of one of the kernel's clock pages
// (set_command and set_index in rdma-core's mlx5.c): the command in bits
// 8..15 and the index in bits 0..7 of the page offset.
func clockMmapOffset(cmd, idx, pageSize int) int64 {
	return int64(cmd<<mmapCmdShift|idx) * int64(pageSize)
}

// unmapClock unmaps the clock pages (the context's Close).
func (c *Context) unmapClock() error {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	var err error
	for _, pg := range [][]byte{c.clock.corePage, c.clock.info} {
		if pg != nil {
			if e := c.k.Munmap(pg); e != nil && err == nil {
				err = e
			}
		}
	}
	c.clock.corePage, c.clock.core, c.clock.info = nil, nil, nil
	return err
}

// ReadClock reads the device's free-running clock (mlx5_read_clock, behind
// ibv_query_rt_values_ex): its two big-endian halves, high first, read
// again when the high half moved in between, so that a carry between the
// reads does not produce a value off by 2^32. A context whose kernel maps
// no core clock page answers EOPNOTSUPP.
func (c *Context) ReadClock() (uint64, error) {
	c.clock.mu.RLock()
	defer c.clock.mu.RUnlock()
	if c.clock.core == nil {
		if c.closed.Load() {
			return 0, errClosed
		}
		return 0, fmt.Errorf("mlx5: the kernel maps no core clock page: %w", unix.EOPNOTSUPP)
	}
	hiP, loP := (*uint32)(c.clock.core), (*uint32)(unsafe.Add(c.clock.core, 4))
	var hi, lo uint32
	for range 2 {
		hi = toBE32(atomic.LoadUint32(hiP))
		lo = toBE32(atomic.LoadUint32(loP))
		if toBE32(atomic.LoadUint32(hiP)) == hi {
			break
		}
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// clockInfo is the conversion of the device's clock to wall time at one
// moment (struct mlx5dv_clock_info): at cycles lastCycles the time was
// nsec nanoseconds since the epoch, frac the fraction of a nanosecond in
// units of 2^-shift, and each cycle lasts mult>>shift nanoseconds. The
// clock counts in mask.
type clockInfo struct {
	nsec, lastCycles, frac uint64
	mult, shift            uint32
	mask                   uint64
}

// clockInfoTries bounds the reads of the clock info page while the kernel
// rewrites it. rdma-core tries 10 times while the page says it is being
// updated (then EBUSY), and again without bound when it changed under its
// read; the second bound here keeps a page that never settles from
// hanging the caller.
const clockInfoTries = 10

// readClockInfo copies the clock info page under its sequence word
// (_mlx5dv_get_clock_info): the kernel sets MLX5_IB_CLOCK_INFO_KERNEL_UPDATING
// in sign while it rewrites the page and changes sign when it is done, so
// a copy is consistent when sign read before it, without that bit, equals
// sign read after.
func (c *Context) readClockInfo() (clockInfo, error) {
	c.clock.mu.RLock()
	defer c.clock.mu.RUnlock()
	if c.clock.info == nil {
		if c.closed.Load() {
			return clockInfo{}, errClosed
		}
		return clockInfo{}, fmt.Errorf("mlx5: the kernel maps no clock info page: %w", unix.EOPNOTSUPP)
	}
	p := (*abi.Mlx5IbClockInfo)(unsafe.Pointer(&c.clock.info[0]))
	for range clockInfoTries {
		var sign uint32
		busy := true
		for range clockInfoTries {
			if sign = atomic.LoadUint32(&p.Sign); sign&abi.MLX5_IB_CLOCK_INFO_KERNEL_UPDATING == 0 {
				busy = false
				break
			}
		}
		if busy {
			return clockInfo{}, fmt.Errorf("mlx5: the kernel is updating the clock info page: %w", unix.EBUSY)
		}
		ci := clockInfo{
			nsec:       atomic.LoadUint64(&p.Nsec),
			lastCycles: atomic.LoadUint64(&p.Cycles),
			frac:       atomic.LoadUint64(&p.Frac),
			mult:       atomic.LoadUint32(&p.Mult),
			shift:      atomic.LoadUint32(&p.Shift),
			mask:       atomic.LoadUint64(&p.Mask),
		}
		if atomic.LoadUint32(&p.Sign) == sign {
			return ci, nil
		}
	}
	return clockInfo{}, fmt.Errorf("mlx5: the clock info page kept changing: %w", unix.EBUSY)
}

// TimestampNS converts a CQE timestamp into nanoseconds since the Unix
// epoch with the clock info the kernel keeps (mlx5dv_get_clock_info, then
// mlx5dv_ts_to_ns).
func (c *Context) TimestampNS(ts uint64) (uint64, error) {
	ci, err := c.readClockInfo()
	if err != nil {
		return 0, err
	}
	return ci.toNS(ts), nil
}

// toNS is mlx5dv_ts_to_ns: the cycles between the timestamp and the info's
// moment, in the clock's width, scaled to nanoseconds. A timestamp more
// than half the counter's range ahead is taken to be that far behind
// instead: one from before the info's moment, which the kernel moves
// forward every max_clock_info_update_nsec.
func (ci *clockInfo) toNS(ts uint64) uint64 {
	delta := (ts - ci.lastCycles) & ci.mask
	if delta > ci.mask/2 {
		delta = (ci.lastCycles - ts) & ci.mask
		return ci.nsec - ((delta*uint64(ci.mult))-ci.frac)>>ci.shift
	}
	return ci.nsec + ((delta*uint64(ci.mult))+ci.frac)>>ci.shift
}
