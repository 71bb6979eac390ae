//go:build linux && amd64

package main

// The supervisor: it starts the target through the shim, receives the
// seccomp listener and answers every trapped call. Opens of the uverbs
// device get a memfd installed at one of our descriptor numbers; ioctl and
// write on those go to the fake kernel; fstat of them and stat of the
// device's path see a character device; writes to markFD are the
// scenario's markers. Everything else the filter trapped (every other
// open and stat) is continued, for the kernel to run as usual.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/hack/mlx5cmp/fake"
)

const devPath = "/dev/infiniband/uverbs0"

// The character device the fake sysfs names (class/infiniband_verbs/uverbs0/dev).
const devMajor, devMinor = 231, 192

// supervisor holds one target's state.
type supervisor struct {
	listener int
	pid      int // the target's
	proc     atomic.Pointer[os.Process]
	fab      *fabric
	out      *transcript
	files    map[int]*openFile // by descriptor number in the target
	log      io.Writer         // -v: every trapped call
	output   io.Writer         // the target's standard output and error; nil: ours
}

// fabric is one fake device and the open files of every process on it.
// Its lock is held while a call is answered and while the device acts
// (pair_linux.go), so that the kernel and the device see one order.
type fabric struct {
	mu    sync.Mutex
	kern  *fake.Kernel
	dev   *device
	opens map[*fake.File]*openFile
}

func newFabric(prof *fake.Profile, t *transcript) *fabric {
	fab := &fabric{opens: map[*fake.File]*openFile{}}
	var emit func(fake.Event)
	if t != nil {
		emit = func(e fake.Event) { t.event(fab.dev, e) }
	}
	fab.kern = fake.New(prof, emit)
	fab.dev = newDevice(fab.kern, t, func(f *fake.File) *openFile { return fab.opens[f] })
	return fab
}

type openFile struct {
	f      *fake.File
	devmem []byte
	pid    int // the process that opened it
}

// supervise runs argv under the filter, with the fake sysfs in sysfsDir.
func supervise(argv []string, sysfsDir string, s *supervisor) error {
	if os.Geteuid() != 0 {
		// A user namespace would let the shim make a mount namespace, but
		// not bind over sysfs in it.
		return fmt.Errorf("mlx5cmp: run needs root: the target's fake sysfs is a bind mount over /sys/class")
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	child := os.NewFile(uintptr(pair[1]), "shim")
	cmd := exec.Command("/proc/self/exe", append([]string{shimArg, sysfsDir, "--"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if s.output != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, s.output, s.output
	}
	cmd.ExtraFiles = []*os.File{child}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		unix.Close(pair[0])
		child.Close()
		return err
	}
	child.Close()
	s.proc.Store(cmd.Process)
	listener, err := recvListener(pair[0])
	unix.Close(pair[0])
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return err
	}
	s.listener = listener
	s.pid = cmd.Process.Pid
	// The listener hangs up once no task uses the filter, but a kernel may
	// count the exited target until it is reaped (6.1 does), which
	// happens only after the loop: the loop also watches the process.
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		unix.Close(listener)
		return fmt.Errorf("mlx5cmp: pidfd_open: %w", err)
	}
	loopErr := s.loop(pidfd)
	unix.Close(pidfd)
	unix.Close(listener)
	if loopErr != nil {
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	s.fab.mu.Lock()
	for fd, of := range s.files {
		s.closeFile(fd, of)
	}
	s.fab.mu.Unlock()
	return errors.Join(loopErr, waitErr)
}

func recvListener(sock int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, 0)
	if err != nil {
		return -1, fmt.Errorf("mlx5cmp: receiving the seccomp listener: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("mlx5cmp: the shim sent no listener (it failed before its filter: see its error above)")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("mlx5cmp: the shim sent no listener: %v", err)
	}
	return fds[0], nil
}

// loop answers notifications until no process uses the filter, or the
// target (pidfd) has exited and no notification is pending. A child the
// target left running is not waited for.
func (s *supervisor) loop(pidfd int) error {
	var n seccompNotif
	exited := false
	for {
		pfd := []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
		timeout := -1
		if exited {
			timeout = 0
		}
		if _, err := unix.Poll(pfd, timeout); err != nil {
			if err == unix.EINTR {
				continue
			}
			return err
		}
		if pfd[1].Revents&unix.POLLIN != 0 {
			exited = true
		}
		if pfd[0].Revents&unix.POLLIN == 0 {
			if exited || pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
				return nil
			}
			continue
		}
		if err := notifRecv(s.listener, &n); err != nil {
			if err == unix.ENOENT { // the caller died before we read it
				continue
			}
			return fmt.Errorf("mlx5cmp: SECCOMP_IOCTL_NOTIF_RECV: %w", err)
		}
		s.fab.mu.Lock()
		err := s.handle(&n)
		s.fab.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// handle answers one trapped call. An error return is the supervisor's
// own failure and ends the run; the target's errors are answers.
func (s *supervisor) handle(n *seccompNotif) error {
	mem := remoteMem{pid: int(n.Pid)}
	a := n.Data.Args
	resp := seccompNotifResp{ID: n.ID}
	cont := func() error {
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		return notifSend(s.listener, &resp)
	}
	answer := func(val int64, errno unix.Errno) error {
		if errno != 0 {
			resp.Error = -int32(errno)
		} else {
			resp.Val = val
		}
		return notifSend(s.listener, &resp)
	}
	fd := int(int32(a[0]))
	// Commands that create a file (the async event file, completion
	// channels) get an eventfd installed in the target while the call
	// is pending; the kernel answers with its number.
	s.fab.kern.NewFD = func(kind string) (int, error) {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			return -1, err
		}
		defer unix.Close(efd)
		num, err := notifAddFDAny(s.listener, n.ID, efd, true)
		s.logf("new %s file: %d", kind, num)
		return num, err
	}
	switch nr := n.Data.Nr; nr {
	case unix.SYS_OPEN, unix.SYS_OPENAT, unix.SYS_OPENAT2:
		pathArg, flags := a[0], a[1]
		if nr != unix.SYS_OPEN {
			pathArg, flags = a[1], a[2]
			if nr == unix.SYS_OPENAT2 {
				// struct open_how's first field is the flags.
				var how [8]byte
				if err := mem.ReadAt(how[:], a[2]); err != nil {
					return cont()
				}
				flags = le.Uint64(how[:])
			}
		}
		path, err := mem.readString(pathArg, 4096)
		if err != nil || path != devPath {
			return cont()
		}
		return s.openDevice(n, mem, flags)
	case unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX:
		pathArg, bufArg := a[0], a[1]
		dirfd := unix.AT_FDCWD
		if nr == unix.SYS_NEWFSTATAT || nr == unix.SYS_STATX {
			dirfd, pathArg, bufArg = fd, a[1], a[2]
			if nr == unix.SYS_STATX {
				bufArg = a[4]
			}
		}
		path, err := mem.readString(pathArg, 4096)
		if err != nil {
			return cont()
		}
		ours := path == devPath
		if path == "" {
			_, ours = s.files[dirfd] // fstat through AT_EMPTY_PATH
		}
		if !ours {
			return cont()
		}
		var b []byte
		if nr == unix.SYS_STATX {
			b = statxOfDevice()
		} else {
			b = statOfDevice()
		}
		if err := mem.WriteAt(b, bufArg); err != nil {
			return answer(0, unix.EFAULT)
		}
		return answer(0, 0)
	case unix.SYS_FSTAT:
		if _, ok := s.files[fd]; !ok {
			return cont()
		}
		if err := mem.WriteAt(statOfDevice(), a[1]); err != nil {
			return answer(0, unix.EFAULT)
		}
		return answer(0, 0)
	case unix.SYS_CLOSE:
		if of, ok := s.files[fd]; ok {
			s.logf("close(%d): device file", fd)
			s.closeFile(fd, of)
		}
		return cont()
	case unix.SYS_IOCTL:
		of, ok := s.files[fd]
		if !ok {
			return cont()
		}
		v, errno := of.f.Ioctl(mem, a[1], a[2])
		s.logf("ioctl(%d, %#x, %#x) = %d, %v", fd, a[1], a[2], v, errno)
		return answer(v, errno)
	case unix.SYS_WRITE:
		n := a[2]
		if n > 1<<16 {
			n = 1 << 16
		}
		if fd == markFD {
			buf := make([]byte, n)
			if err := mem.ReadAt(buf, a[1]); err != nil {
				return answer(0, unix.EFAULT)
			}
			if err := s.marker(string(bytes.TrimRight(buf, "\n"))); err != nil {
				return err
			}
			return answer(int64(n), 0)
		}
		of, ok := s.files[fd]
		if !ok {
			return cont()
		}
		buf := make([]byte, n)
		if err := mem.ReadAt(buf, a[1]); err != nil {
			return answer(0, unix.EFAULT)
		}
		v, errno := of.f.Write(mem, buf)
		s.logf("write(%d, %d bytes) = %d, %v", fd, len(buf), v, errno)
		return answer(v, errno)
	}
	return cont()
}

// openDevice gives the target a new open of the device: a memfd, which
// its mmap of UAR and clock pages maps as it would the device's pages,
// installed at the lowest free number of our range.
func (s *supervisor) openDevice(n *seccompNotif, mem remoteMem, flags uint64) error {
	num := -1
	for i := devFDBase; i < devFDBase+devFDCount; i++ {
		if _, used := s.files[i]; !used {
			num = i
			break
		}
	}
	resp := seccompNotifResp{ID: n.ID}
	if num < 0 || flags&unix.O_ACCMODE != unix.O_RDWR {
		resp.Error = -int32(unix.EMFILE)
		if num >= 0 {
			resp.Error = -int32(unix.EACCES) // the device is opened read-write
		}
		return notifSend(s.listener, &resp)
	}
	mfd, err := unix.MemfdCreate("uverbs0", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, fake.DevMemSize); err != nil {
		return err
	}
	devmem, err := unix.Mmap(mfd, 0, fake.DevMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	if err := notifAddFDAt(s.listener, n.ID, mfd, num, flags&unix.O_CLOEXEC != 0); err != nil {
		unix.Munmap(devmem)
		if err == unix.ENOENT { // the caller is gone
			return nil
		}
		return fmt.Errorf("mlx5cmp: SECCOMP_IOCTL_NOTIF_ADDFD: %w", err)
	}
	// The target is killable only, once its call was received
	// (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV): nothing but its death
	// comes between the install and the answer, and then there is
	// nobody left to hold the descriptor.
	resp.Val = int64(num)
	if err := notifSend(s.listener, &resp); err != nil {
		unix.Munmap(devmem)
		return fmt.Errorf("mlx5cmp: SECCOMP_IOCTL_NOTIF_SEND: %w", err)
	}
	of := &openFile{f: s.fab.kern.Open(devmem), devmem: devmem, pid: s.pid}
	s.files[num] = of
	s.fab.opens[of.f] = of
	s.logf("open(%s) = %d", devPath, num)
	s.out.line("open %s", devPath)
	return nil
}

// closeFile closes the device file at fd: the kernel destroys its
// objects.
func (s *supervisor) closeFile(fd int, of *openFile) {
	of.f.Close()
	delete(s.fab.opens, of.f)
	delete(s.files, fd)
	unix.Munmap(of.devmem)
}

// statOfDevice is struct stat (x86-64) of a character device 231:192,
// read-write for all, as udev leaves uverbs devices.
func statOfDevice() []byte {
	var st unix.Stat_t
	st.Mode = unix.S_IFCHR | 0o666
	st.Rdev = unix.Mkdev(devMajor, devMinor)
	st.Nlink = 1
	st.Blksize = 4096
	st.Ino = 1000
	st.Dev = unix.Mkdev(0, 5) // devtmpfs
	return unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st))
}

func statxOfDevice() []byte {
	var st unix.Statx_t
	st.Mask = unix.STATX_BASIC_STATS
	st.Mode = unix.S_IFCHR | 0o666
	st.Rdev_major, st.Rdev_minor = devMajor, devMinor
	st.Nlink = 1
	st.Blksize = 4096
	st.Ino = 1000
	st.Dev_minor = 5
	return unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st))
}

func (s *supervisor) logf(format string, args ...any) {
	if s.log != nil {
		fmt.Fprintf(s.log, "mlx5cmp: "+format+"\n", args...)
	}
}

// marker handles one line the scenario wrote to markFD.
func (s *supervisor) marker(line string) error {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case "step":
		s.out.line("step %s", rest)
	case "posted":
		return s.fab.dev.posted(s.out)
	case "complete":
		return s.fab.dev.complete(rest)
	case "wc", "poll", "ret", "end":
		s.out.line("%s", line)
	default:
		return fmt.Errorf("mlx5cmp: unknown marker %q", line)
	}
	return nil
}
