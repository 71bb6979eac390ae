//go:build linux

package uverbs_test

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/wr"
)

// udmabufCreate is struct udmabuf_create of <linux/udmabuf.h>.
type udmabufCreate struct {
	Memfd, Flags uint32
	Offset, Size uint64
}

// udmabufCreateIoctl is UDMABUF_CREATE, _IOW('u', 0x42, struct
// udmabuf_create).
const udmabufCreateIoctl = 1<<30 | uint(unsafe.Sizeof(udmabufCreate{}))<<16 | 'u'<<8 | 0x42

// newUdmabuf makes a real dma-buf of n bytes from a sealed memfd through
// /dev/udmabuf, and skips the test where the kernel has no udmabuf
// (bookworm's 6.1 is built without CONFIG_UDMABUF).
func newUdmabuf(t *testing.T, n int) int {
	t.Helper()
	dev, err := os.OpenFile("/dev/udmabuf", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no /dev/udmabuf: this kernel has no udmabuf to make a dma-buf with (%v)", err)
	}
	rdmatest.Must(t, err)
	defer dev.Close()
	mfd, err := unix.MemfdCreate("rdmago-dmabuf", unix.MFD_ALLOW_SEALING)
	rdmatest.Must(t, err)
	defer unix.Close(mfd)
	rdmatest.Must(t, unix.Ftruncate(mfd, int64(n)))
	_, err = unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	rdmatest.Must(t, err)
	req := udmabufCreate{Memfd: uint32(mfd), Size: uint64(n)}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), uintptr(udmabufCreateIoctl), uintptr(unsafe.Pointer(&req)))
	if errno != 0 {
		t.Fatalf("UDMABUF_CREATE: %v", errno)
	}
	t.Cleanup(func() { unix.Close(int(fd)) })
	return int(fd)
}

// TestDeviceRegDMABufMR registers a real dma-buf (a udmabuf) with the
// device: rxe has no dma-buf registration, and the kernel's refusal must
// reach the caller as a probe-able errors.ErrUnsupported, with the PD
// unharmed. A bad descriptor is refused before the kernel sees it.
func TestDeviceRegDMABufMR(t *testing.T) {
	_, pd := rdmatest.OpenPD(t)
	fd := newUdmabuf(t, 1<<16)
	m, err := pd.RegDMABufMR(0, 1<<16, 0x10000, fd, wr.LocalWrite|wr.RemoteWrite)
	switch {
	case err == nil:
		// A kernel whose rxe registers dma-bufs: the keys must be real.
		defer m.Close()
		if m.LKey() == 0 || m.Addr() != 0x10000 {
			t.Errorf("dma-buf MR lkey %#x addr %#x", m.LKey(), m.Addr())
		}
		t.Logf("this kernel's rxe registers dma-bufs: lkey %#x rkey %#x", m.LKey(), m.RKey())
	case errors.Is(err, errors.ErrUnsupported):
		t.Logf("refused as unsupported: %v", err)
	default:
		t.Errorf("RegDMABufMR: %v; want success or errors.ErrUnsupported", err)
	}
	if _, err := pd.RegDMABufMR(0, 4096, 0, -1, wr.LocalWrite); !errors.Is(err, unix.EBADF) {
		t.Errorf("a negative descriptor: %v; want EBADF", err)
	}
	// The PD still works.
	buf := make([]byte, 4096)
	r, err := pd.RegMR(buf, wr.LocalWrite)
	rdmatest.Must(t, err)
	rdmatest.Must(t, r.Close())
}
