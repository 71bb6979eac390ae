//go:build !linux

package mlx5

// dontFork does nothing where no device writes the pages.
func dontFork([]byte) {}
