//go:build (amd64 || arm64) && !race

package mlx5

func unlockStore(p *uint32) { storeRelease(p, 0) }
