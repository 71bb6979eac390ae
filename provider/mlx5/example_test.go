package mlx5_test

import (
	"fmt"

	"github.com/rdmago/rdma/provider/mlx5"
)

// A ConnectX firmware version, rendered as libmlx5 prints it: the
// subminor has four digits (ibv_devinfo's "fw_ver: 28.39.1002").
func ExampleDriver_FormatFWVer() {
	fmt.Println(mlx5.Driver{}.Name(), mlx5.Driver{}.FormatFWVer(28<<32|39<<16|1002))
	// Output: mlx5 28.39.1002
}
