package uverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is an RDMA device found on this host (struct ibv_device). It is a
// plain description: Open gives a Context on it.
type Device struct {
	Name       string    // kernel name, e.g. "rxe0" or "mlx5_0"
	Index      uint32    // kernel device index (RDMA netlink); 0 if unknown
	NodeGUID   GUID      // node GUID
	NodeType   NodeType  // node type
	Transport  Transport // derived from NodeType, as libibverbs does
	Driver     string    // provider name, e.g. "rxe", "mlx5"; "" if unknown
	DriverID   uint32    // RDMA_DRIVER_* id the kernel reports for the device
	DevPath    string    // the uverbs character device, e.g. /dev/infiniband/uverbs0
	ABIVersion int       // uverbs ABI version of the character device
	SysfsPath  string    // /sys/class/infiniband/<Name>
}

// Where the kernel's interfaces live; tests point them at fixtures.
var (
	sysfsRoot = "/sys"
	devRoot   = "/dev/infiniband"
)

// ErrNoDevice is what a host without an RDMA device gives: Open's error, and
// Devices' when the kernel has no RDMA at all. The connection manager's
// errors match it too when the kernel has none (package cm), and so do
// package rsocket's through them. Test for it with errors.Is.
var ErrNoDevice = errors.New("uverbs: no RDMA devices found (no /dev/infiniband/uverbs* device; is an RDMA driver such as rdma_rxe or mlx5_ib loaded?)")

// errNoRDMA is returned when the kernel has no RDMA subsystem loaded: neither
// RDMA netlink nor the uverbs sysfs class exists. It matches both
// ErrNoDevice and unix.ENOSYS.
var errNoRDMA = fmt.Errorf("%w (the kernel has no RDMA subsystem: no RDMA netlink, no %s): %w",
	ErrNoDevice, "/sys/class/infiniband_verbs", unix.ENOSYS)

// Devices lists the RDMA devices that have a uverbs interface, sorted by
// name. It asks RDMA netlink first, which also reports each device's driver,
// and reads sysfs when netlink is unavailable.
//
// A kernel with the RDMA subsystem but no device gives an empty list and no
// error. A kernel without the subsystem (no RDMA modules loaded: no RDMA
// netlink, no /sys/class/infiniband_verbs) gives an error that matches
// ErrNoDevice and syscall.ENOSYS, as ibv_get_device_list fails there with
// ENOSYS and as net.Interfaces fails when its netlink is missing: the two
// cases need different fixes, and the error says which.
func Devices() ([]Device, error) {
	if err := supported("list devices"); err != nil {
		return nil, err
	}
	devs, err := netlinkDevices()
	if err != nil {
		devs, err = sysfsDevices()
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

// sysfsDevices is the fallback when RDMA netlink is unavailable: the uverbs
// class lists each character device and the ibdev behind it. Without either,
// the host has no RDMA subsystem at all; that is an error (ENOSYS, as
// libibverbs reports it), where a subsystem without devices is an empty list.
func sysfsDevices() ([]Device, error) {
	dir := filepath.Join(sysfsRoot, "class/infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoRDMA
	}
	if err != nil {
		return nil, fmt.Errorf("uverbs: listing devices: %w", err)
	}
	var devs []Device
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		name, err := readSysfs(filepath.Join(dir, e.Name(), "ibdev"))
		if err != nil {
			continue
		}
		d := Device{
			Name:      name,
			DevPath:   filepath.Join(devRoot, e.Name()),
			SysfsPath: filepath.Join(sysfsRoot, "class/infiniband", name),
		}
		if v, err := readSysfs(filepath.Join(dir, e.Name(), "abi_version")); err == nil {
			d.ABIVersion, _ = strconv.Atoi(v)
		}
		if v, err := readSysfs(filepath.Join(d.SysfsPath, "node_type")); err == nil {
			// "1: CA"
			n, _, _ := strings.Cut(v, ":")
			t, _ := strconv.Atoi(n)
			d.NodeType = NodeType(t)
		}
		if v, err := readSysfs(filepath.Join(d.SysfsPath, "node_guid")); err == nil {
			d.NodeGUID, _ = parseGUID(v)
		}
		d.Transport = transportOf(d.NodeType)
		d.Driver = driverFromSysfs(d.SysfsPath)
		d.DriverID = driverIDOf(d.Driver)
		devs = append(devs, d)
	}
	return devs, nil
}

// transportOf maps a node type to its transport as libibverbs does.
func transportOf(t NodeType) Transport {
	switch t {
	case NodeCA, NodeSwitch, NodeRouter:
		return TransportIB
	case NodeRNIC:
		return TransportIWARP
	case NodeUSNIC:
		return TransportUSNIC
	case NodeUSNICUDP:
		return TransportUSNICUDP
	case NodeUnspecified:
		return TransportUnspecified
	}
	return TransportUnknown
}

func readSysfs(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// parseGUID parses "0011:2233:4455:6677".
func parseGUID(s string) (GUID, error) {
	var g GUID
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return g, fmt.Errorf("uverbs: malformed GUID %q", s)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return g, fmt.Errorf("uverbs: malformed GUID %q", s)
		}
		binary.BigEndian.PutUint16(g[2*i:], uint16(v))
	}
	return g, nil
}

// findDevice resolves a name to a device, with an error that lists what
// exists when it does not.
func findDevice(name string) (Device, error) {
	devs, err := Devices()
	if err != nil {
		return Device{}, err
	}
	if len(devs) == 0 {
		return Device{}, ErrNoDevice
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		if d.Name == name {
			return d, nil
		}
		names[i] = d.Name
	}
	return Device{}, fmt.Errorf("uverbs: no RDMA device %q (devices: %s): %w", name, strings.Join(names, ", "), unix.ENODEV)
}
