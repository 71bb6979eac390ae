package mlx5

import "golang.org/x/sys/unix"

// dontFork keeps a child of fork from sharing, or copying on write, pages
// the device writes, as ibv_dontfork_range does.
func dontFork(mem []byte) { _ = unix.Madvise(mem, unix.MADV_DONTFORK) }
