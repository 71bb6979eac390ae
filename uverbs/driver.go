package uverbs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rdmago/rdma/internal/abi"
)

// driverNames maps the kernel's RDMA_DRIVER_* ids to the names rdma-core
// gives its providers.
var driverNames = map[uint32]string{
	abi.RDMA_DRIVER_MLX5:       "mlx5",
	abi.RDMA_DRIVER_MLX4:       "mlx4",
	abi.RDMA_DRIVER_CXGB4:      "cxgb4",
	abi.RDMA_DRIVER_MTHCA:      "mthca",
	abi.RDMA_DRIVER_BNXT_RE:    "bnxt_re",
	abi.RDMA_DRIVER_OCRDMA:     "ocrdma",
	abi.RDMA_DRIVER_IRDMA:      "irdma",
	abi.RDMA_DRIVER_VMW_PVRDMA: "vmw_pvrdma",
	abi.RDMA_DRIVER_QEDR:       "qedr",
	abi.RDMA_DRIVER_HNS:        "hns",
	abi.RDMA_DRIVER_USNIC:      "usnic",
	abi.RDMA_DRIVER_RXE:        "rxe",
	abi.RDMA_DRIVER_HFI1:       "hfi1",
	abi.RDMA_DRIVER_QIB:        "qib",
	abi.RDMA_DRIVER_EFA:        "efa",
	abi.RDMA_DRIVER_SIW:        "siw",
	abi.RDMA_DRIVER_ERDMA:      "erdma",
}

func driverName(id uint32) string { return driverNames[id] }

func driverIDOf(name string) uint32 {
	for id, n := range driverNames {
		if n == name {
			return id
		}
	}
	return abi.RDMA_DRIVER_UNKNOWN
}

// driverFromSysfs guesses the provider when netlink is unavailable: from the
// kernel module bound to the parent device, or, for software devices that
// have none (rxe, siw), from the device name, as rdma-core's name match does.
func driverFromSysfs(ibdevPath string) string {
	if link, err := os.Readlink(filepath.Join(ibdevPath, "device/driver")); err == nil {
		switch mod := filepath.Base(link); mod {
		case "mlx5_core":
			return "mlx5"
		case "mlx4_core":
			return "mlx4"
		default:
			return mod
		}
	}
	name := filepath.Base(ibdevPath)
	for _, p := range []string{"rxe", "siw"} {
		if strings.HasPrefix(name, p) {
			return p
		}
	}
	return ""
}

// formatFWVer renders the kernel's raw firmware version the way the
// device's rdma-core provider does, so tools print identical strings.
func formatFWVer(driver string, raw uint64) string {
	major, minor, sub := (raw>>32)&0xffff, (raw>>16)&0xffff, raw&0xffff
	switch driver {
	case "rxe", "siw":
		return fmt.Sprintf("%d.%d.%d", major, minor, sub)
	case "mlx5":
		return fmt.Sprintf("%d.%d.%04d", major, minor, sub)
	case "mlx4":
		return fmt.Sprintf("%d.%d.%03d", major, minor, sub)
	}
	if raw == 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", major, minor, sub)
}
