package cm

import (
	"errors"
	"sync"

	"github.com/rdmago/rdma/uverbs"
)

// device is one RDMA device as rdma_cm IDs share it (librdmacm's struct
// cma_device): one uverbs context and one protection domain, opened when
// the first ID is bound to the device and closed when the last one goes.
type device struct {
	key  devKey
	ctx  *uverbs.Context
	pd   *uverbs.PD
	refs int

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
		if d.pd != nil {
			d.pd.Close()
		}
		ctx.Close()
		return nil, err
	}
	return d, nil
}

// getDevice returns the device with node GUID guid and kernel index index,
// opening it if no ID uses it yet, with one more reference.
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

// put drops a reference; the last one closes the device. A PD the kernel
// will not free because the program still has memory registered on it
// keeps the device open, as librdmacm keeps its PD then, until a later put
// succeeds.
func (d *device) put() {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	d.refs--
	if d.refs > 0 {
		return
	}
	if d.pd != nil {
		if err := d.pd.Close(); err != nil && !errors.Is(err, uverbs.ErrClosed) {
			return
		}
	}
	if d.ctx != nil {
		d.ctx.Close()
	}
	delete(devices.m, d.key)
}

// transport is the device's transport (IB for InfiniBand and RoCE).
func (d *device) transport() uverbs.Transport {
	if d.ctx == nil {
		return uverbs.TransportIB
	}
	return d.ctx.Device().Transport
}
