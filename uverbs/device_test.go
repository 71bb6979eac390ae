//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

// fakeNL answers RDMA netlink requests from a table, after checking that
// each request is well formed.
type fakeNL struct {
	t    *testing.T
	devs []nlAttrs // one dump reply per device
	char map[uint32]nlAttrs
}

func (f *fakeNL) request(typ, flags uint16, payload []byte) ([]nlAttrs, error) {
	switch typ {
	case nldevType(abi.RDMA_NLDEV_CMD_GET):
		if flags&unix.NLM_F_DUMP == 0 {
			f.t.Errorf("device list without NLM_F_DUMP")
		}
		return f.devs, nil
	case nldevType(abi.RDMA_NLDEV_CMD_GET_CHARDEV):
		a, err := parseNLAttrs(payload)
		if err != nil {
			return nil, err
		}
		if typ, _ := a.str(abi.RDMA_NLDEV_ATTR_CHARDEV_TYPE); typ != "uverbs" {
			f.t.Errorf("chardev type %q, want uverbs", typ)
		}
		idx, ok := a.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX)
		if !ok {
			return nil, unix.EINVAL
		}
		r, ok := f.char[idx]
		if !ok {
			return nil, unix.ENOENT
		}
		return []nlAttrs{r}, nil
	}
	return nil, unix.EOPNOTSUPP
}

func (f *fakeNL) Close() error { return nil }

func nlAttrsOf(t *testing.T, build func(e *nlEncoder)) nlAttrs {
	var e nlEncoder
	build(&e)
	a, err := parseNLAttrs(e.b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func u64(v uint64) []byte { b := make([]byte, 8); binary.NativeEndian.PutUint64(b, v); return b }

func withFakeNL(t *testing.T, f *fakeNL) {
	old := dialNL
	dialNL = func() (nlConn, error) { return f, nil }
	t.Cleanup(func() { dialNL = old })
}

func TestListNetlink(t *testing.T) {
	f := &fakeNL{t: t, char: map[uint32]nlAttrs{}}
	f.devs = []nlAttrs{
		nlAttrsOf(t, func(e *nlEncoder) {
			e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, 3)
			e.str(abi.RDMA_NLDEV_ATTR_DEV_NAME, "rxe0")
			e.attr(abi.RDMA_NLDEV_ATTR_NODE_GUID, u64(0x505400fffe123456))
			e.attr(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE, []byte{1})
		}),
		nlAttrsOf(t, func(e *nlEncoder) {
			e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, 1)
			e.str(abi.RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0")
			e.attr(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE, []byte{1})
		}),
		nlAttrsOf(t, func(e *nlEncoder) { // no uverbs interface: left out
			e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, 7)
			e.str(abi.RDMA_NLDEV_ATTR_DEV_NAME, "hidden0")
		}),
	}
	f.char[3] = nlAttrsOf(t, func(e *nlEncoder) {
		e.str(abi.RDMA_NLDEV_ATTR_CHARDEV_NAME, "uverbs1")
		e.attr(abi.RDMA_NLDEV_ATTR_CHARDEV_ABI, u64(1))
		e.u32(abi.RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, abi.RDMA_DRIVER_RXE)
	})
	f.char[1] = nlAttrsOf(t, func(e *nlEncoder) {
		e.str(abi.RDMA_NLDEV_ATTR_CHARDEV_NAME, "uverbs0")
		e.attr(abi.RDMA_NLDEV_ATTR_CHARDEV_ABI, u64(1))
		e.u32(abi.RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, abi.RDMA_DRIVER_MLX5)
	})
	withFakeNL(t, f)

	got, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "mlx5_0", Index: 1, NodeType: NodeCA, Transport: TransportIB, Driver: "mlx5", DriverID: abi.RDMA_DRIVER_MLX5,
			DevPath: "/dev/infiniband/uverbs0", ABIVersion: 1, SysfsPath: "/sys/class/infiniband/mlx5_0"},
		{Name: "rxe0", Index: 3, NodeGUID: GUID{0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}, NodeType: NodeCA, Transport: TransportIB,
			Driver: "rxe", DriverID: abi.RDMA_DRIVER_RXE, DevPath: "/dev/infiniband/uverbs1", ABIVersion: 1, SysfsPath: "/sys/class/infiniband/rxe0"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Devices (-want +got):\n%s", d)
	}

	_, err = Open("nope0")
	if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "mlx5_0, rxe0") {
		t.Errorf("Open of an unknown device: %v; want ENODEV listing mlx5_0, rxe0", err)
	}
}

func TestOpenNoDevices(t *testing.T) {
	withFakeNL(t, &fakeNL{t: t})
	if _, err := Open("rxe0"); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("got %v, want ErrNoDevice", err)
	}
}

// Without RDMA netlink the list comes from sysfs.
func TestListSysfsFallback(t *testing.T) {
	root := t.TempDir()
	write := func(p, v string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("class/infiniband_verbs/uverbs0/ibdev", "rxe0")
	write("class/infiniband_verbs/uverbs0/abi_version", "6")
	write("class/infiniband/rxe0/node_type", "1: CA")
	write("class/infiniband/rxe0/node_guid", "5054:00ff:fe12:3456")
	write("class/infiniband_verbs/abi_version", "6") // not a device directory

	oldRoot, oldDial := sysfsRoot, dialNL
	sysfsRoot = root
	dialNL = func() (nlConn, error) { return nil, unix.EPROTONOSUPPORT }
	t.Cleanup(func() { sysfsRoot, dialNL = oldRoot, oldDial })

	got, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{{Name: "rxe0", NodeGUID: GUID{0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}, NodeType: NodeCA,
		Transport: TransportIB, Driver: "rxe", DriverID: abi.RDMA_DRIVER_RXE, DevPath: "/dev/infiniband/uverbs0",
		ABIVersion: 6, SysfsPath: filepath.Join(root, "class/infiniband/rxe0")}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Devices (-want +got):\n%s", d)
	}
}

func TestParseNLAttrsMalformed(t *testing.T) {
	if _, err := parseNLAttrs([]byte{200, 0, 1, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("attribute longer than its buffer was accepted")
	}
	if _, err := parseNLAttrs([]byte{2, 0, 1, 0}); err == nil {
		t.Fatal("attribute shorter than its header was accepted")
	}
}

func TestGIDFormatting(t *testing.T) {
	g, ok := parseGIDString("0000:0000:0000:0000:0000:ffff:0a00:020f")
	if !ok {
		t.Fatal("parse failed")
	}
	if g.String() != "0000:0000:0000:0000:0000:ffff:0a00:020f" || g.Addr().String() != "10.0.2.15" {
		t.Errorf("GID %s addr %s", g, g.Addr())
	}
	if _, ok := parseGIDString("fe80::1"); ok {
		t.Error("compressed form accepted as a sysfs GID")
	}
}

// A kernel without RDMA at all has neither netlink nor the sysfs class.
func TestListNoRDMASubsystem(t *testing.T) {
	oldRoot, oldDial := sysfsRoot, dialNL
	sysfsRoot = t.TempDir()
	dialNL = func() (nlConn, error) { return nil, unix.EPROTONOSUPPORT }
	t.Cleanup(func() { sysfsRoot, dialNL = oldRoot, oldDial })
	_, err := Devices()
	if !errors.Is(err, unix.ENOSYS) || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Devices() = %v, want ENOSYS and ErrNoDevice", err)
	}
	if _, err := Open("rxe0"); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open = %v, want ErrNoDevice", err)
	}
}
