package uverbs

import (
	"fmt"
	"sync"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/mlx5"
	"github.com/rdmago/rdma/provider/rxe"
)

// drivers are the providers this library carries, by kernel driver id. The
// core imports every one of them, so a program works on any supported
// device without importing a provider itself.
var drivers = map[uint32]provider.Driver{
	abi.RDMA_DRIVER_RXE:  rxe.Driver{},
	abi.RDMA_DRIVER_MLX5: mlx5.Driver{},
}

// programDrivers are the providers programs added with RegisterProvider, by
// name. They are looked up once per Open and QueryDevice, never on the data
// path, so a mutex costs nothing that matters.
var programDrivers struct {
	sync.Mutex
	byName map[string]provider.Driver
}

// RegisterProvider makes d the provider of every device whose kernel driver
// is named d.Name() (Device.Driver: "siw", "efa", or "rxe" to replace the
// module's own). Contexts opened afterwards use it; those already open keep
// theirs. Call it from an init function or before the first Open, as
// database/sql.Register is called.
//
// A provider writes device queues and rings doorbells on memory this module
// cannot check: its contract (package provider and docs/providers.md) is
// what keeps the process safe. The module's own providers serve their
// devices without any call; RegisterProvider is for a device this module
// does not carry, or for a program that ships a patched or instrumented
// build of one it does.
//
// RegisterProvider panics if d is nil, its name is empty, or a provider of
// that name was programDrivers already.
func RegisterProvider(d provider.Driver) {
	if d == nil {
		panic("uverbs: RegisterProvider of a nil provider")
	}
	name := d.Name()
	if name == "" {
		panic("uverbs: RegisterProvider of a provider with no name")
	}
	programDrivers.Lock()
	defer programDrivers.Unlock()
	if _, dup := programDrivers.byName[name]; dup {
		panic(fmt.Sprintf("uverbs: RegisterProvider called twice for provider %q", name))
	}
	if programDrivers.byName == nil {
		programDrivers.byName = map[string]provider.Driver{}
	}
	programDrivers.byName[name] = d
}

// driverFor is the provider serving d: a programDrivers one by d's driver
// name, else the module's own by its driver id; nil if there is none, and
// then a context has the control path only.
func driverFor(d *Device) provider.Driver {
	programDrivers.Lock()
	drv := programDrivers.byName[d.Driver]
	programDrivers.Unlock()
	if drv != nil {
		return drv
	}
	return drivers[d.DriverID]
}
