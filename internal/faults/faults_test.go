package faults

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"

	"github.com/rdmago/rdma/internal/rdmatest"
	"github.com/rdmago/rdma/internal/testenv"
)

// frame builds a RoCEv2 frame: Ethernet, IPv4, UDP to 4791, a BTH with the
// opcode, destination QP and PSN, then the payload.
func frame(op uint8, qpn, psn uint32, payload []byte) []byte {
	b := make([]byte, 42+12, 42+12+len(payload)+4)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	b[14] = 0x45
	b[23] = 17
	binary.BigEndian.PutUint16(b[34:], 49152)
	binary.BigEndian.PutUint16(b[36:], 4791)
	binary.BigEndian.PutUint16(b[40:], 0x1234) // a checksum, which Corrupt clears
	b[42] = op
	b[47], b[48], b[49] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
	b[51], b[52], b[53] = byte(psn>>16), byte(psn>>8), byte(psn)
	b = append(b, payload...)
	return append(b, 0, 0, 0, 0) // ICRC
}

// madFrame is a UD send to QP1 carrying a CM MAD with the attribute id.
func madFrame(attr uint16) []byte {
	mad := make([]byte, 8+24) // DETH, MAD header
	mad[8+1] = 0x07           // CM class
	binary.BigEndian.PutUint16(mad[8+16:], attr)
	return frame(0x64, 1, 0, mad)
}

// loaded is an Injector whose program is loaded but not attached, for
// BPF_PROG_TEST_RUN: the program sees exactly the frames the test gives it.
func loaded(t *testing.T) *Injector { return loadedAt(t, xdpHook) }

func loadedAt(t *testing.T, h hook) *Injector {
	t.Helper()
	inj, err := load(h)
	if err != nil {
		if !testenv.InVM() && (errors.Is(err, os.ErrPermission) || os.Geteuid() != 0) {
			t.Skipf("cannot load BPF programs here (%v); the VM runner runs this as root", err)
		}
		if !testenv.InVM() && errors.Is(err, unix.ENOSYS) {
			// qemu-user, which runs the arm64 unit tests, passes no
			// bpf(2) through; the VM runs these tests.
			t.Skipf("no bpf system call here (bpf(BPF_MAP_CREATE): %v): user-mode emulation lacks it", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { inj.Close() })
	return inj
}

func run(t *testing.T, inj *Injector, pkt []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(pkt))
	ret, err := inj.prog.Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, out
}

func counters(t *testing.T, inj *Injector) Counters {
	t.Helper()
	c, err := inj.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func u8(v uint8) *uint8    { return &v }
func u32(v uint32) *uint32 { return &v }
func u16(v uint16) *uint16 { return &v }

func TestDeviceFaultsProgram(t *testing.T) {
	inj := loaded(t)
	w := frame(0x0a, 0x11, 100, make([]byte, 64))

	// Disabled: counted, passed.
	if ret, _ := run(t, inj, w); ret != xdpPass {
		t.Fatalf("disabled policy: ret %d", ret)
	}
	notRoCE := append([]byte(nil), w...)
	binary.BigEndian.PutUint16(notRoCE[36:], 4790)
	run(t, inj, notRoCE)
	run(t, inj, w[:50]) // short: no whole BTH
	if c := counters(t, inj); c != (Counters{Seen: 1}) {
		t.Fatalf("counters %v, want seen 1 only", c)
	}

	for _, tc := range []struct {
		name string
		p    Policy
		pkts [][]byte
		want []uint32 // XDP verdict per packet
	}{
		{"all", Policy{Enabled: true}, [][]byte{w, w}, []uint32{xdpDrop, xdpDrop}},
		{"every 3rd", Policy{Enabled: true, Every: 3}, [][]byte{w, w, w, w, w, w, w},
			[]uint32{xdpPass, xdpPass, xdpDrop, xdpPass, xdpPass, xdpDrop, xdpPass}},
		{"limit 1", Policy{Enabled: true, Limit: 1}, [][]byte{w, w}, []uint32{xdpDrop, xdpPass}},
		{"opcode", Policy{Enabled: true, Opcode: u8(0x11)}, [][]byte{w, frame(0x11, 0x11, 100, nil)}, []uint32{xdpPass, xdpDrop}},
		{"qpn", Policy{Enabled: true, DestQPN: u32(0x123456)}, [][]byte{w, frame(0x0a, 0x123456, 5, nil)}, []uint32{xdpPass, xdpDrop}},
		{"psn range", Policy{Enabled: true, PSNRange: true, PSNFirst: 0xfffffe, PSNLast: 0xffffff},
			[][]byte{w, frame(0x0a, 0x11, 0xfffffd, nil), frame(0x0a, 0x11, 0xfffffe, nil), frame(0x0a, 0x11, 0xffffff, nil)},
			[]uint32{xdpPass, xdpPass, xdpDrop, xdpDrop}},
		{"skip QP1", Policy{Enabled: true, SkipQP1: true}, [][]byte{madFrame(AttrREQ), w}, []uint32{xdpPass, xdpDrop}},
		{"MAD REP", Policy{Enabled: true, MADAttr: u16(AttrREP)},
			[][]byte{madFrame(AttrREQ), madFrame(AttrREP), frame(0x64, 1, 0, nil), w}, []uint32{xdpPass, xdpDrop, xdpPass, xdpPass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := inj.Set(tc.p); err != nil {
				t.Fatal(err)
			}
			if err := inj.ResetCounters(); err != nil {
				t.Fatal(err)
			}
			drops := 0
			for i, pkt := range tc.pkts {
				if ret, _ := run(t, inj, pkt); ret != tc.want[i] {
					t.Errorf("packet %d: verdict %d, want %d", i, ret, tc.want[i])
				}
				if tc.want[i] == xdpDrop {
					drops++
				}
			}
			if c := counters(t, inj); c.Seen != uint64(len(tc.pkts)) || c.Dropped != uint64(drops) {
				t.Errorf("counters %v, want seen %d dropped %d", c, len(tc.pkts), drops)
			}
		})
	}

	t.Run("probability", func(t *testing.T) {
		if err := inj.Set(Policy{Enabled: true, Probability: 0.1}); err != nil {
			t.Fatal(err)
		}
		inj.ResetCounters()
		const n = 4000
		for range n {
			run(t, inj, w)
		}
		c := counters(t, inj)
		// 10% of 4000 is 400, σ ≈ 19: ±100 is more than 5σ.
		if c.Matched != n || c.Dropped < 300 || c.Dropped > 500 {
			t.Errorf("counters %v, want about 400 of %d dropped", c, n)
		}
	})

	t.Run("corrupt", func(t *testing.T) {
		if err := inj.Set(Policy{Enabled: true, Action: Corrupt, CorruptOffset: 20}); err != nil {
			t.Fatal(err)
		}
		inj.ResetCounters()
		ret, out := run(t, inj, w)
		if ret != xdpPass {
			t.Fatalf("verdict %d, want pass", ret)
		}
		for i := range w {
			want := w[i]
			switch i {
			case 42 + 20:
				want ^= 0xff
			case 40, 41:
				want = 0
			}
			if out[i] != want {
				t.Errorf("byte %d: %#02x, want %#02x", i, out[i], want)
			}
		}
		// An offset past the end of the packet leaves it alone.
		inj.Set(Policy{Enabled: true, Action: Corrupt, CorruptOffset: 1000})
		if _, out := run(t, inj, w); string(out) != string(w) {
			t.Error("corrupt past the end changed the packet")
		}
		if c := counters(t, inj); c.Corrupted != 1 || c.Dropped != 0 {
			t.Errorf("counters %v, want 1 corrupted", c)
		}
	})
}

func TestFaultsBadPolicy(t *testing.T) {
	for _, p := range []Policy{
		{Enabled: true, Opcode: u8(0x1f)},
		{Enabled: true, DestQPN: u32(1 << 24)},
		{Enabled: true, PSNRange: true, PSNFirst: 5, PSNLast: 4},
		{Enabled: true, Probability: 1.5},
		{Enabled: true, Action: 7},
		{Enabled: true, Action: Corrupt, CorruptOffset: 4096},
		{Enabled: true, MADAttr: u16(AttrREQ), DestQPN: u32(2)},
		{Enabled: true, MADAttr: u16(AttrREQ), SkipQP1: true},
	} {
		if _, err := p.encode(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if _, err := ParseOpcode("write_only"); err != nil {
		t.Error(err)
	}
	if op, err := ParseOpcode("0x11"); err != nil || op != 0x11 {
		t.Errorf("ParseOpcode(0x11) = %#x, %v", op, err)
	}
	if _, err := ParseOpcode("0x1f"); err == nil {
		t.Error("ParseOpcode(0x1f): no error")
	}
}

// The egress (TC) program makes the same choices as the XDP one, with TC's
// verdicts, and refuses to corrupt.
func TestDeviceFaultsProgramTC(t *testing.T) {
	inj := loadedAt(t, tcHook)
	w := frame(0x0a, 0x11, 100, make([]byte, 64))
	if ret, _ := run(t, inj, w); ret != tcOK {
		t.Fatalf("disabled policy: ret %d", ret)
	}
	if err := inj.Set(Policy{Enabled: true, Every: 2, SkipQP1: true}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint32{tcOK, tcShot, tcOK, tcShot} {
		if ret, _ := run(t, inj, w); ret != want {
			t.Errorf("packet %d: verdict %d, want %d", i, ret, want)
		}
	}
	if ret, _ := run(t, inj, madFrame(AttrREQ)); ret != tcOK {
		t.Errorf("a MAD with SkipQP1: verdict %d, want %d", ret, tcOK)
	}
	if c := counters(t, inj); c.Seen != 6 || c.Dropped != 2 {
		t.Errorf("counters %v, want seen 6 dropped 2", c)
	}
	if err := inj.Set(Policy{Enabled: true, Action: Corrupt}); err == nil {
		t.Error("corrupting on egress: no error")
	}
}

// TestDeviceFaultsAttach attaches to the VM's dummy0 (generic XDP) and to
// an interface that does not exist.
func TestDeviceFaultsAttach(t *testing.T) {
	testenv.RequireDevice(t)
	if _, err := net.InterfaceByName("dummy0"); err != nil {
		t.Skipf("no dummy0 (this VM has a NIC instead): %v", err)
	}
	inj, err := Attach("dummy0")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attached to dummy0 in %s mode", inj.Mode)
	if err := inj.Set(Policy{Enabled: true, Every: 2}); err != nil {
		t.Fatal(err)
	}
	if err := inj.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach("nosuchif0"); err == nil {
		t.Fatal("attach to a missing interface: no error")
	}

	// TCX came with Linux 6.6: earlier kernels must say so.
	kernel, hasTCX := rdmatest.KernelRelease(t), rdmatest.KernelAtLeast(t, 6, 6)
	eg, err := AttachEgress("dummy0")
	switch {
	case hasTCX && err != nil:
		t.Fatalf("Linux %s: attach to egress: %v", kernel, err)
	case !hasTCX && (err == nil || !errors.Is(err, ebpf.ErrNotSupported)):
		t.Fatalf("Linux %s, without TCX: attach to egress: %v; want ErrNotSupported", kernel, err)
	case err != nil:
		t.Logf("Linux %s: %v", kernel, err)
		return
	}
	if eg.Mode != "tcx-egress" {
		t.Errorf("mode %q", eg.Mode)
	}
	if err := eg.Set(Policy{Enabled: true, Every: 2}); err != nil {
		t.Fatal(err)
	}
	if err := eg.Close(); err != nil {
		t.Fatal(err)
	}
}
