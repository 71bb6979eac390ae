//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package mlx5

// toBE* convert between host and big-endian order (the device's).

func toBE16(v uint16) uint16 { return v }
func toBE32(v uint32) uint32 { return v }
func toBE64(v uint64) uint64 { return v }
