package rdmatool

import (
	"testing"

	"github.com/rdmago/rdma/cmd/rdmago/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m, Commands()) }
