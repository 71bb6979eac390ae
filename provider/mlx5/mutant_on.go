//go:build mlx5cmp_mutant

package mlx5

// mutant makes the provider write one field wrong: the fence bit of the
// control segment is dropped. Only hack/mlx5cmp's test builds with this
// tag, to show that its comparison with libmlx5 fails on such an error.
const mutant = true
