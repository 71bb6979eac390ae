//go:build !mlx5cmp_mutant

package mlx5

// mutant is false in every real build. hack/mlx5cmp builds a deliberately
// broken provider with the mlx5cmp_mutant tag to show that its comparison
// with rdma-core's libmlx5 catches one wrong field; the constant folds
// away here.
const mutant = false
