package uverbs

import (
	"github.com/rdmago/rdma/internal/abi"
	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/provider/mlx5"
	"github.com/rdmago/rdma/provider/rxe"
)

// drivers are the providers this library carries, by kernel driver id. The
// core imports every one of them, so a program works on any supported
// device without importing a provider itself.
var drivers = map[uint32]provider.Driver{
	abi.RDMA_DRIVER_RXE:  rxe.Driver{},
	abi.RDMA_DRIVER_MLX5: mlx5.Driver{},
}
