//go:build linux && amd64

package main

// The shim is this binary started again by the supervisor in a mount
// namespace of its own: it lays the fake sysfs over /sys/class, installs
// the seccomp filter on its one locked thread, hands the listener to the
// supervisor and executes the target, which inherits the namespace and the
// filter and knows nothing of either.

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

const shimArg = "__mlx5cmp_shim"

// shimMain runs in the child: args are SYSFS_CLASS_DIR -- PROGRAM ARGS...;
// descriptor 3 is the supervisor's end of a Unix socket.
func shimMain(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: %s DIR -- PROGRAM [ARG...]", shimArg)
	}
	dir, argv := args[0], args[2:]
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// The namespace is private (Go's Unshareflags made / MS_PRIVATE|MS_REC),
	// so this mount is the target's alone.
	if err := unix.Mount(dir, "/sys/class", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on /sys/class: %w", dir, err)
	}
	runtime.LockOSThread() // never unlocked: the thread execs or the process exits
	listener, err := installFilter()
	if err != nil {
		return err
	}
	// From here on this thread's openat and stat calls reach the
	// supervisor, which is waiting for the listener: nothing below may
	// make one before the exec.
	rights := unix.UnixRights(listener)
	if err := unix.Sendmsg(3, []byte{'L'}, rights, nil, 0); err != nil {
		return fmt.Errorf("send listener: %w", err)
	}
	unix.Close(listener)
	unix.Close(3)
	return unix.Exec(prog, argv, os.Environ())
}
