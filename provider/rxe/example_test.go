package rxe_test

import (
	"fmt"

	"github.com/rdmago/rdma/provider/rxe"
)

// The firmware version rxe's kernel driver reports is rendered as
// rdma-core's librxe prints it (ibv_devinfo's fw_ver).
func ExampleDriver_FormatFWVer() {
	fmt.Println(rxe.Driver{}.Name(), rxe.Driver{}.FormatFWVer(0x0001_0002_0003))
	// Output: rxe 1.2.3
}
