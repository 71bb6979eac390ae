package mlx5

// zvectors_test.go holds the golden vectors: WQEs, CQEs and doorbells that
// rdma-core's mlx5dv.h inline helpers build, rendered by a C program
// (hack/mlx5gen, which needs gcc and libibverbs-dev). make generate runs
// this, as go generate ./... does.

//go:generate ../../hack/mlx5gen/generate.sh
