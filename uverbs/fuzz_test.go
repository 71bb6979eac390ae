//go:build linux

package uverbs

// Fuzz targets for what the kernel answers: RDMA netlink datagrams and
// their attributes, and the uverbs ioctl answers that fill the device,
// port and GID-table queries. The kernel is trusted, but an answer from
// a kernel newer or older than the one the code was written against must
// give a value or an error, never a panic.

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
)

const fuzzNLSeq = 7

// nlMessage returns one netlink message of type typ for request seq.
func nlMessage(typ uint16, seq uint32, payload []byte) []byte {
	m := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(payload)+3)
	ne := binary.NativeEndian
	ne.PutUint32(m[0:], uint32(unix.NLMSG_HDRLEN+len(payload)))
	ne.PutUint16(m[4:], typ)
	ne.PutUint32(m[8:], seq)
	m = append(m, payload...)
	for len(m)%unix.NLMSG_ALIGNTO != 0 {
		m = append(m, 0)
	}
	return m
}

// nlDeviceAttrs returns the attributes of a device as a dump reply
// carries them.
func nlDeviceAttrs(index uint32, name string) []byte {
	var e nlEncoder
	e.u32(abi.RDMA_NLDEV_ATTR_DEV_INDEX, index)
	e.str(abi.RDMA_NLDEV_ATTR_DEV_NAME, name)
	var guid [8]byte
	binary.NativeEndian.PutUint64(guid[:], 0x08d70cfffeeb627b)
	e.attr(abi.RDMA_NLDEV_ATTR_NODE_GUID, guid[:])
	e.attr(abi.RDMA_NLDEV_ATTR_DEV_NODE_TYPE, []byte{1})
	return e.b
}

func nlChardevAttrs(name string, abiVer uint64, driver uint32) []byte {
	var e nlEncoder
	e.str(abi.RDMA_NLDEV_ATTR_CHARDEV_NAME, name)
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], abiVer)
	e.attr(abi.RDMA_NLDEV_ATTR_CHARDEV_ABI, v[:])
	e.u32(abi.RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, driver)
	return e.b
}

// FuzzNetlinkReply reads a datagram as the answer to request fuzzNLSeq,
// a dump or a single request, and reads every device attribute out of it.
func FuzzNetlinkReply(f *testing.F) {
	dev := nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET), fuzzNLSeq, nlDeviceAttrs(0, "rxe0"))
	done := nlMessage(unix.NLMSG_DONE, fuzzNLSeq, make([]byte, 4))
	ack := nlMessage(unix.NLMSG_ERROR, fuzzNLSeq, make([]byte, 20))
	nak := nlMessage(unix.NLMSG_ERROR, fuzzNLSeq, []byte{0xfe, 0xff, 0xff, 0xff}) // -ENOENT
	f.Add(slices.Concat(dev, dev, done), true)
	f.Add(slices.Concat(nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET_CHARDEV), fuzzNLSeq, nlChardevAttrs("uverbs0", 1, 14)), ack), false)
	f.Add(nak, false)
	f.Add(slices.Concat(nlMessage(unix.NLMSG_DONE, fuzzNLSeq+1, nil), dev), true)
	f.Add(dev[:len(dev)-3], true)
	f.Fuzz(func(t *testing.T, b []byte, dump bool) {
		var flags uint16
		if dump {
			flags = unix.NLM_F_DUMP
		}
		out, _, err := nlReply(b, fuzzNLSeq, flags, nil)
		if err != nil {
			return
		}
		for _, a := range out {
			for typ := range a {
				a.u32(typ)
				a.uint(typ)
				a.str(typ)
			}
		}
	})
}

// FuzzNetlinkAttrs parses an attribute list and checks that the encoder
// writes what was parsed back in a form that parses the same.
func FuzzNetlinkAttrs(f *testing.F) {
	f.Add(nlDeviceAttrs(3, "mlx5_0"))
	f.Add(nlChardevAttrs("uverbs0", 1, 14))
	f.Add([]byte{4, 0, 1, 0x80, 5, 0, 2, 0, 'x'}) // a nested flag, an unpadded end
	f.Add([]byte{3, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseNLAttrs(b)
		if err != nil {
			return
		}
		types := slices.Sorted(func(yield func(uint16) bool) {
			for t := range a {
				if !yield(t) {
					return
				}
			}
		})
		var e nlEncoder
		for _, typ := range types {
			e.attr(typ, a[typ])
		}
		a2, err := parseNLAttrs(e.b)
		if err != nil {
			t.Fatalf("re-encoded attributes: %v", err)
		}
		if len(a2) != len(a) {
			t.Fatalf("%d attributes re-encoded, %d parsed back", len(a), len(a2))
		}
		for typ, v := range a {
			if !bytes.Equal(a2[typ], v) {
				t.Fatalf("attribute %d: % x, want % x", typ, a2[typ], v)
			}
		}
	})
}

// fuzzNL answers the device dump and the chardev queries with the
// fuzzer's datagrams.
type fuzzNL struct{ dump, chardev []byte }

func (f *fuzzNL) request(typ, flags uint16, payload []byte) ([]nlAttrs, error) {
	b := f.chardev
	if typ == nldevType(abi.RDMA_NLDEV_CMD_GET) {
		b = f.dump
	}
	out, _, err := nlReply(b, fuzzNLSeq, flags, nil)
	return out, err
}

func (f *fuzzNL) Close() error { return nil }

// FuzzNetlinkDevices lists devices from a fuzzed device dump and fuzzed
// chardev answers.
func FuzzNetlinkDevices(f *testing.F) {
	dump := slices.Concat(
		nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET), fuzzNLSeq, nlDeviceAttrs(0, "rxe0")),
		nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET), fuzzNLSeq, nlDeviceAttrs(1, "mlx5_0")),
		nlMessage(unix.NLMSG_DONE, fuzzNLSeq, make([]byte, 4)))
	chardev := slices.Concat(
		nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET_CHARDEV), fuzzNLSeq, nlChardevAttrs("uverbs0", 1, 14)),
		nlMessage(unix.NLMSG_ERROR, fuzzNLSeq, make([]byte, 20)))
	f.Add(dump, chardev)
	f.Add(dump, []byte{})
	f.Add(nlMessage(nldevType(abi.RDMA_NLDEV_CMD_GET), fuzzNLSeq, []byte{8, 0, 1, 0, 1, 2}), chardev)
	f.Fuzz(func(t *testing.T, dump, chardev []byte) {
		devs, err := nlDevices(&fuzzNL{dump, chardev})
		if err != nil {
			return
		}
		replies, _, _ := nlReply(dump, fuzzNLSeq, unix.NLM_F_DUMP, nil)
		if len(devs) > len(replies) {
			t.Fatalf("%d devices from %d replies", len(devs), len(replies))
		}
	})
}

// FuzzKernelAnswers runs QueryDevice, QueryPort and QueryGIDTable on a
// context whose kernel answers with the fuzzer's bytes: the extended
// device query (or, when ext is false, the base one after EOPNOTSUPP),
// every port's attributes, the GID entries and their count.
func FuzzKernelAnswers(f *testing.F) {
	var dev abi.IbUverbsExQueryDeviceResp
	dev.Base.Fw_ver, dev.Base.Phys_port_cnt, dev.Base.Max_qp = 1<<32|2<<16|3, 1, 1<<20
	dev.Response_length = uint32(len(bytesOf(&dev)))
	var port abi.IbUverbsQueryPortRespEx
	port.Legacy_resp.State, port.Legacy_resp.Gid_tbl_len, port.Legacy_resp.Link_layer = 4, 2, 2
	gids := make([]abi.IbUverbsGidEntry, 2)
	gids[0].Gid[1] = 0x0f02000affff0000
	gids[1].Gid_index, gids[1].Gid_type = 1, 2
	gidBytes := bytes.Clone(unsafeBytes(gids))
	f.Add(bytes.Clone(bytesOf(&dev)), bytes.Clone(bytesOf(&port)), gidBytes, uint64(2), true)
	f.Add(bytes.Clone(bytesOf(&dev)), bytes.Clone(bytesOf(&port)), gidBytes, uint64(3), false)
	dev.Response_length = 8
	dev.Base.Phys_port_cnt = 2
	f.Add(bytes.Clone(bytesOf(&dev)), []byte{4}, gidBytes[:40], uint64(1), true)
	f.Fuzz(func(t *testing.T, devResp, portResp, gidResp []byte, num uint64, ext bool) {
		k := rxeLikeKernel(t)
		k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE, func(c *fakeCall) error {
			cmd := binary.NativeEndian.Uint64(append(c.in(abi.UVERBS_ATTR_WRITE_CMD), make([]byte, 8)...))
			if cmd&abi.IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 && !ext {
				return unix.EOPNOTSUPP
			}
			return c.out(abi.UVERBS_ATTR_CORE_OUT, devResp)
		})
		k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT, func(c *fakeCall) error {
			var r abi.IbUverbsQueryPortRespEx
			copy(bytesOf(&r), portResp)
			// QueryGIDTable allocates room for what the ports claim;
			// a claim of billions of entries would only test the
			// allocator.
			r.Legacy_resp.Gid_tbl_len %= 1025
			return c.out(abi.UVERBS_ATTR_QUERY_PORT_RESP, bytesOf(&r))
		})
		k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_GID_TABLE, func(c *fakeCall) error {
			if err := c.out(abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, gidResp); err != nil {
				return err
			}
			return c.out(abi.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, binary.NativeEndian.AppendUint64(nil, num))
		})
		c := fakeContext(t, k)
		a, err := c.QueryDevice()
		if err != nil {
			return
		}
		for _, drv := range []string{"rxe", "mlx4", "mlx5", "other"} {
			formatFWVer(drv, a.FWVerRaw)
		}
		total := 0
		for p := 1; p <= int(a.PhysPortCnt); p++ {
			pa, err := c.QueryPort(uint8(p))
			if err != nil {
				return
			}
			_, _, _ = pa.State.String(), pa.ActiveMTU.String(), pa.LinkLayer.String()
			total += pa.GIDTblLen
		}
		entries, err := c.QueryGIDTable()
		if err != nil {
			return
		}
		if total == 0 {
			// No port has a table: nothing is asked.
			if len(entries) != 0 {
				t.Fatalf("%d GID entries from empty tables", len(entries))
			}
		} else {
			// The entries past index or port 255 are left out: no AH
			// or QP can name them (GIDEntry).
			want := uint64(0)
			const size = int(unsafe.Sizeof(abi.IbUverbsGidEntry{}))
			for i := range num {
				var e abi.IbUverbsGidEntry
				if off := int(i) * size; off < len(gidResp) {
					copy(bytesOf(&e), gidResp[off:])
				}
				if e.Gid_index <= 0xff && e.Port_num <= 0xff {
					want++
				}
			}
			if uint64(len(entries)) != want || len(entries) > total {
				t.Fatalf("%d GID entries, the kernel said %d of at most %d, %d of them nameable", len(entries), num, total, want)
			}
		}
		for _, e := range entries {
			_, _ = e.GID.String(), e.Type.String()
		}
	})
}

// unsafeBytes returns the memory of a slice of plain structs.
func unsafeBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// FuzzSysfsIDs parses the GUIDs and GIDs sysfs prints (node_guid,
// ports/N/gids/M), which the device list and the GID table fall back on:
// what parses prints back as what parses the same.
func FuzzSysfsIDs(f *testing.F) {
	f.Add("08d7:0cff:feeb:627b")
	f.Add("fe80:0000:0000:0000:0ad7:0cff:feeb:627b")
	f.Add("0000:0000:0000:0000:0000:ffff:0a00:020f")
	f.Add("1:2:3:4")
	f.Add("ffff0:0:0:0")
	f.Fuzz(func(t *testing.T, s string) {
		if g, err := parseGUID(s); err == nil {
			if g2, err := parseGUID(g.String()); err != nil || g2 != g {
				t.Fatalf("GUID %q: %v printed as %q parses as %v, %v", s, g, g.String(), g2, err)
			}
		}
		if g, ok := parseGIDString(s); ok {
			if g2, ok := parseGIDString(g.String()); !ok || g2 != g {
				t.Fatalf("GID %q: %v printed as %q parses as %v, %v", s, g, g.String(), g2, ok)
			}
		}
	})
}
