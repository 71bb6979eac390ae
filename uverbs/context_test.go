package uverbs

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/qp"
)

var testDev = Device{Name: "rxe0", Driver: "rxe", DriverID: abi.RDMA_DRIVER_RXE}

func TestContextCreate(t *testing.T) {
	k := rxeLikeKernel(t)
	c, err := newContext(testDev, k)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumCompVectors() != 1 {
		t.Errorf("NumCompVectors = %d, want 1", c.NumCompVectors())
	}
	if c.asyncFD < 0 {
		t.Errorf("no async event fd")
	}
	if len(k.calls) != 2 || k.calls[0].Method != abi.UVERBS_METHOD_GET_CONTEXT || k.calls[1].Object != abi.UVERBS_OBJECT_ASYNC_EVENT {
		t.Fatalf("unexpected call sequence %+v", k.calls)
	}
	if k.calls[0].DriverID != abi.RDMA_DRIVER_RXE {
		t.Errorf("driver id %d, want %d", k.calls[0].DriverID, abi.RDMA_DRIVER_RXE)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !k.closed {
		t.Fatal("Close did not close the command file")
	}
	if _, err := c.QueryPort(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("QueryPort after Close: got %v, want ErrClosed", err)
	}
	if _, err := c.QueryDevice(); !errors.Is(err, ErrClosed) {
		t.Fatalf("QueryDevice after Close: got %v, want ErrClosed", err)
	}
}

// A kernel without the ioctl framework answers ENOTTY; the context then
// comes from the legacy write command, which also returns the async fd.
func TestContextCreateLegacyWrite(t *testing.T) {
	k := newFakeKernel(t)
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT, func(*fakeCall) error { return unix.ENOTTY })
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	k.onWrite = func(b []byte) error {
		ne := binary.NativeEndian
		if cmd := ne.Uint32(b[0:]); cmd != abi.IB_USER_VERBS_CMD_GET_CONTEXT {
			t.Errorf("write command %d, want GET_CONTEXT", cmd)
			return unix.EINVAL
		}
		if in := int(ne.Uint16(b[4:])) * 4; in != len(b) {
			t.Errorf("in_words say %d bytes, wrote %d", in, len(b))
		}
		resp := (*abi.IbUverbsGetContextResp)(userPtr(ne.Uint64(b[8:])))
		resp.Async_fd = uint32(fd)
		resp.Num_comp_vectors = 4
		return nil
	}
	c := fakeContext(t, k)
	if c.asyncFD != fd || c.NumCompVectors() != 4 {
		t.Fatalf("async fd %d vectors %d, want %d and 4", c.asyncFD, c.NumCompVectors(), fd)
	}
}

func TestContextCreateError(t *testing.T) {
	k := newFakeKernel(t)
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_GET_CONTEXT, func(*fakeCall) error { return unix.EMFILE })
	_, err := newContext(testDev, k)
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("got %v, want EMFILE", err)
	}
}

func TestQueryPort(t *testing.T) {
	k := rxeLikeKernel(t)
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_QUERY_PORT, func(c *fakeCall) error {
		if p := c.in(abi.UVERBS_ATTR_QUERY_PORT_PORT_NUM); len(p) == 0 || p[0] != 1 {
			return unix.EINVAL
		}
		r := abi.IbUverbsQueryPortRespEx{
			Legacy_resp: abi.IbUverbsQueryPortResp{State: 4, Max_mtu: 5, Active_mtu: 3, Gid_tbl_len: 1024,
				Port_cap_flags: 0x00890000, Max_msg_sz: 0x800000, Pkey_tbl_len: 1, Max_vl_num: 1,
				Active_width: 1, Active_speed: 1, Phys_state: 5, Link_layer: 2},
			Port_cap_flags2: 0x21,
		}
		return c.out(abi.UVERBS_ATTR_QUERY_PORT_RESP, bytesOf(&r))
	})
	c := fakeContext(t, k)
	got, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	want := PortAttr{State: PortActive, MaxMTU: qp.MTU4096, ActiveMTU: qp.MTU1024, GIDTblLen: 1024,
		PortCapFlags: 0x00890000, MaxMsgSz: 0x800000, PKeyTblLen: 1, MaxVLNum: 1, ActiveWidth: 1,
		ActiveSpeed: 1, PhysState: 5, LinkLayer: LinkLayerEthernet, PortCapFlags2: 0x21}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("QueryPort (-want +got):\n%s", d)
	}
	if _, err := c.QueryPort(2); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QueryPort(2) on a one-port device: got %v, want EINVAL", err)
	}
	if _, err := c.QueryPort(0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QueryPort(0): got %v, want EINVAL", err)
	}
}

func TestQueryDeviceViaInvokeWrite(t *testing.T) {
	k := rxeLikeKernel(t)
	var sawCmd uint64
	k.handle(abi.UVERBS_OBJECT_DEVICE, abi.UVERBS_METHOD_INVOKE_WRITE, func(c *fakeCall) error {
		sawCmd = binary.NativeEndian.Uint64(append(c.in(abi.UVERBS_ATTR_WRITE_CMD), make([]byte, 8)...))
		var r abi.IbUverbsExQueryDeviceResp
		r.Base.Fw_ver = 1<<32 | 2<<16 | 3
		binary.BigEndian.PutUint64(bytesOf(&r.Base.Node_guid), 0x505400fffe123456)
		r.Base.Max_qp = 1 << 20
		r.Base.Max_qp_wr = 1<<20 - 1
		r.Base.Atomic_cap = 1
		r.Base.Phys_port_cnt = 1
		r.Base.Max_pkeys = 64
		r.Hca_core_clock = 12345
		// Claim a response that ends before hca_core_clock: it must be ignored.
		r.Response_length = uint32(unsafe.Offsetof(r.Hca_core_clock))
		r.Timestamp_mask = 0xff
		return c.out(abi.UVERBS_ATTR_CORE_OUT, bytesOf(&r))
	})
	c := fakeContext(t, k)
	a, err := c.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(abi.IB_USER_VERBS_CMD_FLAG_EXTENDED | abi.IB_USER_VERBS_EX_CMD_QUERY_DEVICE); sawCmd != want {
		t.Errorf("write command 0x%x, want 0x%x", sawCmd, want)
	}
	if a.FWVer != "1.2.3" {
		t.Errorf("FWVer %q, want 1.2.3 (rxe format)", a.FWVer)
	}
	if a.NodeGUID.String() != "5054:00ff:fe12:3456" {
		t.Errorf("NodeGUID %s", a.NodeGUID)
	}
	if a.MaxQP != 1<<20 || a.MaxQPWR != 1<<20-1 || a.AtomicCap != AtomicHCA || a.PhysPortCnt != 1 || a.MaxPKeys != 64 {
		t.Errorf("base attributes wrong: %+v", a)
	}
	if a.CompletionTimestampMask != 0xff {
		t.Errorf("timestamp mask %x, want ff", a.CompletionTimestampMask)
	}
	if a.HCACoreClock != 0 {
		t.Errorf("hca_core_clock %d taken from beyond response_length", a.HCACoreClock)
	}
}

func TestFormatFWVer(t *testing.T) {
	raw := uint64(16)<<32 | 35<<16 | 2000
	for _, tc := range []struct{ driver, want string }{
		{"rxe", "16.35.2000"}, {"mlx5", "16.35.2000"}, {"mlx4", "16.35.2000"},
	} {
		if got := formatFWVer(tc.driver, raw); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.driver, got, tc.want)
		}
	}
	if got := formatFWVer("mlx5", 16<<32|35<<16|7); got != "16.35.0007" {
		t.Errorf("mlx5 pads the sub-minor to 4 digits: %q", got)
	}
	if got := formatFWVer("mlx4", 2<<32|42<<16|5); got != "2.42.005" {
		t.Errorf("mlx4 pads the sub-minor to 3 digits: %q", got)
	}
}
