package wr

import "syscall"

// errRemoteIO is the errno of a request the peer refused or failed.
const errRemoteIO = syscall.EREMOTEIO
