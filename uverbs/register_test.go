package uverbs

import (
	"testing"

	"github.com/rdmago/rdma/provider"
)

// registeredDriver is testDriver under a name of its own, making a context
// that says which driver made it.
type registeredDriver struct {
	testDriver
	name string
}

func (d registeredDriver) Name() string { return d.name }

func (d registeredDriver) NewContext(provider.Kernel) (provider.Builder[provider.Context], error) {
	return testBuilder[provider.Context]{v: namedProvider{name: d.name}}, nil
}

type namedProvider struct {
	testProvider
	name string
}

// A registered provider serves devices by driver name, ahead of the
// module's own for the driver id; contexts opened before a registration
// keep their provider.
func TestRegisterProviderServes(t *testing.T) {
	open := func(name string, id uint32) *Context {
		t.Helper()
		dev := testDev
		dev.Driver, dev.DriverID = name, id
		c, err := newContext(dev, objectKernel(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	provName := func(c *Context) string {
		if p, ok := c.prov.(namedProvider); ok {
			return p.name
		}
		return "another provider"
	}

	before := open("registered-over-builtin", cpuTestDriver)
	if _, ok := before.prov.(cpuProvider); !ok {
		t.Fatalf("before registration: provider %T, want the built-in cpuProvider", before.prov)
	}
	RegisterProvider(registeredDriver{name: "registered-over-builtin"})
	RegisterProvider(registeredDriver{name: "registered-new"})

	if got := provName(open("registered-over-builtin", cpuTestDriver)); got != "registered-over-builtin" {
		t.Errorf("a registered provider for a built-in id: context made by %s", got)
	}
	if got := provName(open("registered-new", 0x7e5a)); got != "registered-new" {
		t.Errorf("a registered provider for an unknown id: context made by %s", got)
	}
	if _, ok := before.drv.(cpuDriver); !ok {
		t.Errorf("a context opened before the registration changed driver to %T", before.drv)
	}
	if c := open("not-registered", 0x7e5b); c.prov != nil {
		t.Errorf("a device no provider knows got provider %T", c.prov)
	}
}
