//go:build linux

package rdmatool

import (
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
	"github.com/rdmago/rdma/internal/testenv"
)

// TestNoDeviceRdma compares the tools where the kernel has the RDMA
// subsystem and no device: empty lists, and the errors of naming one.
func TestNoDeviceRdma(t *testing.T) {
	testenv.RequireNoDevice(t)
	tooltest.RequireCTool(t, cRdma)
	for _, args := range [][]string{
		{"dev"}, {"-j", "dev"}, {"link"}, {"-j", "-p", "link"}, {"res"}, {"res", "show", "qp"}, {"-j", "res", "show", "cm_id"},
		{"statistic"}, {"system"}, {"dev", "show", "rxe0"}, {"link", "show", "rxe0/1"}, {"link", "delete", "rxe0"},
		{"link", "add", "x", "type", "rxe", "netdev", "nosuch0"},
	} {
		compare(t, args...)
	}
}
