//go:build !race

package mlx5

const raceEnabled = false
