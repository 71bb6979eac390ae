package rsocket

import "golang.org/x/sys/unix"

// yield gives the CPU to whatever else is runnable on it (sched_yield(2));
// with nothing else runnable it returns at once. Raw: it does not block,
// and an ordinary system call would wake the runtime's monitor when it
// sleeps.
func yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
