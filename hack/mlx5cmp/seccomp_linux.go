//go:build linux && amd64

package main

// The seccomp side of the supervisor: the filter the shim installs before it
// executes the target, and the user-notification ABI (linux/seccomp.h),
// which golang.org/x/sys names only in part.

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The target's view of the fake device: the supervisor installs each open
// of the device at a descriptor in [devFDBase, devFDBase+devFDCount), so
// that the filter can select the calls on it by their first argument alone
// and leave every other descriptor's calls to the kernel untouched. markFD
// is the scenarios' marker channel: no such descriptor exists, so a write
// to it reaches the supervisor or fails with EBADF outside it.
const (
	markFD     = 899
	devFDBase  = 900
	devFDCount = 32
)

// struct seccomp_data's offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits of args[0] on a little-endian machine
	offArg2 = 32
)

// Notification ioctls not in x/sys.
const (
	notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID
	notifAddFD   = 0x40182103 // SECCOMP_IOCTL_NOTIF_ADDFD
)

type seccompData struct {
	Nr                 int32
	Arch               uint32
	InstructionPointer uint64
	Args               [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

type seccompNotifAddFD struct {
	ID         uint64
	Flags      uint32
	SrcFD      uint32
	NewFD      uint32
	NewFDFlags uint32
}

// The system calls the filter hands to the supervisor.
var (
	// pathCalls name a file by path; the filter cannot read the path, so
	// every one is trapped and the supervisor continues those that are not
	// the device's.
	pathCalls = []uint32{unix.SYS_OPEN, unix.SYS_OPENAT, unix.SYS_OPENAT2, unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX}
	// fdCalls are trapped when their first argument is one of ours.
	fdCalls = []uint32{unix.SYS_IOCTL, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_FSTAT}
)

const auditArchX86_64 = 0xc000003e

// seccompFilter builds the classic BPF program. socket(AF_NETLINK, *,
// NETLINK_RDMA) is refused in the filter itself with EPROTONOSUPPORT, as a
// kernel without RDMA refuses it: both drivers then list devices from
// sysfs, which the shim has replaced, even on a host whose kernel has RDMA.
func seccompFilter() ([]unix.SockFilter, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("mlx5cmp: the filter is written for amd64, not %s", runtime.GOARCH)
	}
	const (
		retAllow  = unix.SECCOMP_RET_ALLOW
		retNotify = 0x7fc00000 // SECCOMP_RET_USER_NOTIF
	)
	var p []unix.SockFilter
	stmt := func(code uint16, k uint32) { p = append(p, unix.SockFilter{Code: code, K: k}) }
	jump := func(code uint16, k uint32, jt, jf uint8) {
		p = append(p, unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf})
	}
	ld := func(off uint32) { stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(k uint32) { stmt(unix.BPF_RET|unix.BPF_K, k) }

	ld(offArch)
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, auditArchX86_64, 1, 0)
	ret(retAllow)
	ld(offNr)
	// Path calls: notify.
	for _, nr := range pathCalls {
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, 0, 1)
		ret(retNotify)
	}
	// socket(AF_NETLINK, *, NETLINK_RDMA): EPROTONOSUPPORT.
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.SYS_SOCKET, 0, 6)
	ld(offArg0)
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.AF_NETLINK, 0, 2)
	ld(offArg2)
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.NETLINK_RDMA, 1, 0)
	ret(retAllow)
	ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT))
	// Descriptor calls: notify when the descriptor is in [markFD, devFDBase+devFDCount).
	for _, nr := range fdCalls {
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, 0, 5)
		ld(offArg0)
		jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, markFD, 0, 2)
		jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, devFDBase+devFDCount, 1, 0)
		ret(retNotify)
		ret(retAllow)
	}
	ret(retAllow)
	return p, nil
}

// installFilter sets no_new_privs and the filter on the calling thread and
// returns the listener. The caller has locked its OS thread: the filter is
// the thread's, and execve from that thread passes it on. With
// WAIT_KILLABLE_RECV (Linux 5.19) a call the supervisor has read is no
// longer interrupted by a signal (the Go runtime's preemption signals
// among them); without it the call restarts and the supervisor would
// answer it, and apply its effect, twice.
func installFilter() (int, error) {
	prog, err := seccompFilter()
	if err != nil {
		return -1, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("mlx5cmp: PR_SET_NO_NEW_PRIVS: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, fmt.Errorf("mlx5cmp: seccomp(SET_MODE_FILTER, NEW_LISTENER): %w", e)
	}
	return int(fd), nil
}

func notifRecv(listener int, n *seccompNotif) error {
	*n = seccompNotif{}
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(n)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// notifSend answers a notification. ENOENT means the target's call went
// away (the thread was killed): nothing to answer.
func notifSend(listener int, r *seccompNotifResp) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(r)))
	if e != 0 && e != unix.ENOENT {
		return e
	}
	return nil
}

// notifAddFDAt installs src in the target at exactly newfd; the trapped
// call is still pending, and notifSend answers it.
//
// Not SECCOMP_ADDFD_FLAG_SEND, which would install and answer in one call:
// that marks the notification answered before it waits for the target to
// take the descriptor, and a signal to this thread meanwhile (the Go
// runtime's preemption, SIGURG) makes the ioctl return -ERESTARTSYS and
// drop the request; the kernel restarts the call (SA_RESTART), which then
// finds the notification answered and fails with EINPROGRESS, and the
// target never gets its answer (a CI run saw exactly that). Without the
// flag, the restarted call queues the request again.
func notifAddFDAt(listener int, id uint64, src, newfd int, cloexec bool) error {
	a := seccompNotifAddFD{ID: id, Flags: unix.SECCOMP_ADDFD_FLAG_SETFD,
		SrcFD: uint32(src), NewFD: uint32(newfd)}
	if cloexec {
		a.NewFDFlags = unix.O_CLOEXEC
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), notifAddFD, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return e
	}
	return nil
}

// notifAddFD installs src in the target at the lowest free descriptor and
// returns its number there; the trapped call is still pending.
func notifAddFDAny(listener int, id uint64, src int, cloexec bool) (int, error) {
	a := seccompNotifAddFD{ID: id, SrcFD: uint32(src)}
	if cloexec {
		a.NewFDFlags = unix.O_CLOEXEC
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), notifAddFD, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// remoteMem reads and writes a target's memory with process_vm_readv and
// process_vm_writev. Any thread id of the target will do: they share the
// address space.
type remoteMem struct{ pid int }

func (m remoteMem) ReadAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	n, err := unix.ProcessVMReadv(m.pid, []unix.Iovec{{Base: &p[0], Len: uint64(len(p))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}, 0)
	if err != nil {
		return fmt.Errorf("read %d bytes at %#x of pid %d: %w", len(p), addr, m.pid, err)
	}
	if n != len(p) {
		return fmt.Errorf("read %d of %d bytes at %#x of pid %d: %w", n, len(p), addr, m.pid, unix.EFAULT)
	}
	return nil
}

func (m remoteMem) WriteAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	n, err := unix.ProcessVMWritev(m.pid, []unix.Iovec{{Base: &p[0], Len: uint64(len(p))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}, 0)
	if err != nil {
		return fmt.Errorf("write %d bytes at %#x of pid %d: %w", len(p), addr, m.pid, err)
	}
	if n != len(p) {
		return fmt.Errorf("wrote %d of %d bytes at %#x of pid %d: %w", n, len(p), addr, m.pid, unix.EFAULT)
	}
	return nil
}

// readString reads a NUL-terminated string of at most max bytes, a page at
// a time so that a string near the end of a mapping reads.
func (m remoteMem) readString(addr uint64, max int) (string, error) {
	var out []byte
	for len(out) < max {
		n := 4096 - int(addr%4096)
		if n > max-len(out) {
			n = max - len(out)
		}
		b := make([]byte, n)
		if err := m.ReadAt(b, addr); err != nil {
			return "", err
		}
		for i, c := range b {
			if c == 0 {
				return string(append(out, b[:i]...)), nil
			}
		}
		out = append(out, b...)
		addr += uint64(n)
	}
	return "", unix.ENAMETOOLONG
}

// le64 is the little-endian helper the stat encoders share.
var le = binary.LittleEndian
