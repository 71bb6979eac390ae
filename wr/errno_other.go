//go:build !linux

package wr

import "syscall"

// errRemoteIO is EIO where the system has no EREMOTEIO (RDMA runs only on
// Linux; this keeps the package building elsewhere).
const errRemoteIO = syscall.EIO
