package uverbs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/wr"
)

// RegDMABufMR sends UVERBS_METHOD_REG_DMABUF_MR with each attribute as the
// kernel types it (u64 offset, length and iova; an s32 descriptor; u32
// access flags), and takes the new handle and keys the kernel answers;
// bad arguments never reach the kernel; the kernel's EOPNOTSUPP matches
// errors.ErrUnsupported.
func TestRegDMABufMRABI(t *testing.T) {
	k, c := objectContext(t)
	pd := allocPD(t, c)
	defer pd.Close()
	var got fakeCall
	refuse := false
	k.handle(abi.UVERBS_OBJECT_MR, abi.UVERBS_METHOD_REG_DMABUF_MR, func(fc *fakeCall) error {
		got = *fc
		if refuse {
			return unix.EOPNOTSUPP
		}
		fc.setData(abi.UVERBS_ATTR_REG_DMABUF_MR_HANDLE, 41)
		for id, v := range map[uint16]uint32{abi.UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY: 0x1101, abi.UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY: 0x1102} {
			if err := fc.out(id, bytesOf(&v)); err != nil {
				return err
			}
		}
		return nil
	})
	m, err := pd.RegDMABufMR(4096, 1<<20, 0x7000_0000, 9, wr.LocalWrite|wr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint16]struct {
		len  uint16
		data uint64
	}{
		abi.UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE:    {0, uint64(pd.handle)},
		abi.UVERBS_ATTR_REG_DMABUF_MR_OFFSET:       {8, 4096},
		abi.UVERBS_ATTR_REG_DMABUF_MR_LENGTH:       {8, 1 << 20},
		abi.UVERBS_ATTR_REG_DMABUF_MR_IOVA:         {8, 0x7000_0000},
		abi.UVERBS_ATTR_REG_DMABUF_MR_FD:           {4, 9},
		abi.UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS: {4, uint64(wr.LocalWrite | wr.RemoteRead)},
	}
	for id, w := range want {
		a, _, ok := got.attr(id)
		if !ok || a.Len != w.len || a.Data != w.data {
			t.Errorf("attribute %d: %+v (present %v); want length %d data %#x", id, a, ok, w.len, w.data)
		}
	}
	if got.Object != abi.UVERBS_OBJECT_MR || len(got.Attrs) != 9 {
		t.Errorf("call %+v", got)
	}
	if m.handle != 41 || m.lkey != 0x1101 || m.rkey != 0x1102 || m.Addr() != 0x7000_0000 || m.Bytes() != nil {
		t.Errorf("MR handle %d keys %#x/%#x addr %#x bytes %v", m.handle, m.lkey, m.rkey, m.Addr(), m.Bytes())
	}
	if s := m.SGE(16, 32); s.Addr != 0x7000_0010 || s.LKey != 0x1101 {
		t.Errorf("SGE %+v", s)
	}

	calls, _ := k.snapshot()
	before := len(calls)
	for _, bad := range []struct {
		name         string
		off, n, iova uint64
		fd           int
		access       wr.Access
	}{
		{"empty", 0, 0, 0, 9, 0},
		{"negative descriptor", 0, 1, 0, -1, 0},
		{"wrapping iova", 0, 2, 1<<64 - 1, 9, 0},
		{"remote write without local", 0, 1, 0, 9, wr.RemoteWrite},
	} {
		if _, err := pd.RegDMABufMR(bad.off, bad.n, bad.iova, bad.fd, bad.access); err == nil {
			t.Errorf("%s: registered", bad.name)
		}
	}
	if calls, _ := k.snapshot(); len(calls) != before {
		t.Errorf("bad arguments reached the kernel: %+v", calls[before:])
	}
	refuse = true
	if _, err := pd.RegDMABufMR(0, 4096, 0, 9, wr.LocalWrite); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("refused by the device: %v; want ErrUnsupported and EOPNOTSUPP", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
