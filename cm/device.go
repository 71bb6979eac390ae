package cm

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/uverbs"
)

// device is one RDMA device as rdma_cm IDs share it (librdmacm's struct
// cma_device): one uverbs context and one protection domain, opened when
// the first ID is bound to the device and kept for the life of the
// process, as librdmacm keeps its device contexts. A PD, CQ or memory
// region a program makes on ID.Verbs or ID.PD therefore stays valid after
// the last ID on the device is destroyed, and programs ported from C that
// keep them across connections (cmtime, cmatose) work. Refcounting the
// context by the objects made on it would need a hook in every uverbs
// object; one context and one PD per device used is a small price.
//
// The one exception is a device the kernel removes (DEVICE_REMOVAL): it
// is no longer handed to new IDs, and its context and PD close with the
// last ID on it, since the kernel cannot finish removing a device whose
// uverbs file stays open.
type device struct {
	key devKey
	ctx *uverbs.Context
	pd  *uverbs.PD
	// xrcd is the XRC domain of the device's XRC receive QPs and SRQs,
	// opened on first use and kept with the context, as librdmacm's
	// ucma_get_xrcd keeps it (under devices.mu).
	xrcd *uverbs.XRCD
	refs int  // IDs bound to the device
	dead bool // removed: closed with the last ID

	// comp is the completion channel of the CQs CreateQP makes, made
	// with the first of them (compevents.go).
	compMu sync.Mutex
	comp   *compEvents

	maxQPWR      int
	maxInitDepth uint8 // max_qp_init_rd_atom
	maxRespRes   uint8 // max_qp_rd_atom
	linkLayer    []uverbs.LinkLayer
}

type devKey struct {
	guid  uverbs.GUID
	index uint32
}

var devices = struct {
	mu sync.Mutex
	m  map[devKey]*device
}{m: map[devKey]*device{}}

// openDevice opens a device for IDs; tests replace it.
var openDevice = func(guid uverbs.GUID, index uint32) (*device, error) {
	dev, err := uverbs.DeviceByGUID(guid, index)
	if err != nil {
		return nil, err
	}
	ctx, err := dev.Open()
	if err != nil {
		return nil, err
	}
	d := &device{ctx: ctx}
	if err := d.init(); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// getDevice returns the device with node GUID guid and kernel index index,
// opening it the first time, with one more reference.
func getDevice(guid uverbs.GUID, index uint32) (*device, error) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	k := devKey{guid, index}
	if d := devices.m[k]; d != nil {
		d.refs++
		return d, nil
	}
	d, err := openDevice(guid, index)
	if err != nil {
		return nil, err
	}
	d.key, d.refs = k, 1
	devices.m[k] = d
	return d, nil
}

func (d *device) init() error {
	attr, err := d.ctx.QueryDevice()
	if err != nil {
		return err
	}
	d.maxQPWR = attr.MaxQPWR
	d.maxInitDepth = uint8(min(attr.MaxQPInitRdAtom, 255))
	d.maxRespRes = uint8(min(attr.MaxQPRdAtom, 255))
	for p := 1; p <= int(attr.PhysPortCnt); p++ {
		ll := uverbs.LinkLayerUnspecified
		if pa, err := d.ctx.QueryPort(uint8(p)); err == nil {
			ll = pa.LinkLayer
		}
		d.linkLayer = append(d.linkLayer, ll)
	}
	if d.pd, err = d.ctx.AllocPD(); err != nil {
		return err
	}
	return nil
}

// put drops an ID's reference. The device stays open for the process
// unless it was removed; then the last reference closes it.
func (d *device) put() {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	d.refs--
	if d.refs > 0 || !d.dead {
		return
	}
	d.close()
}

// removed marks the device gone (a DEVICE_REMOVAL event): new IDs will
// not get it, and the last ID on it closes it.
func (d *device) removed() {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d.dead {
		return
	}
	d.dead = true
	if devices.m[d.key] == d {
		delete(devices.m, d.key)
	}
}

// getXRCD returns the device's XRC domain, opening it the first time: a
// private one (no file), as librdmacm opens it. A device without XRC
// refuses with EOPNOTSUPP.
func (d *device) getXRCD() (*uverbs.XRCD, error) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d.xrcd == nil {
		x, err := d.ctx.OpenXRCD(-1, unix.O_CREAT)
		if err != nil {
			return nil, err
		}
		d.xrcd = x
	}
	return d.xrcd, nil
}

// close closes the XRC domain, the PD and the context. The caller holds
// devices.mu, or owns d alone.
func (d *device) close() {
	d.closeCompEvents()
	if d.xrcd != nil {
		d.xrcd.Close()
	}
	if d.pd != nil {
		d.pd.Close()
	}
	if d.ctx != nil {
		d.ctx.Close()
	}
}

// closeIdleDevices closes the devices no ID is bound to, for tests that
// check that nothing is left open; objects a program made on them go with
// them.
func closeIdleDevices() {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	for k, d := range devices.m {
		if d.refs == 0 {
			d.close()
			delete(devices.m, k)
		}
	}
}

// transport is the device's transport (IB for InfiniBand and RoCE).
func (d *device) transport() uverbs.Transport {
	if d.ctx == nil {
		return uverbs.TransportIB
	}
	return d.ctx.Device().Transport
}
