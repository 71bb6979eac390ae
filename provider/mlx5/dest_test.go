package mlx5

import (
	"github.com/rdmago/rdma/internal/seal"
	"github.com/rdmago/rdma/wr"
)

// dest makes an AH the destination of a UD send, as uverbs.AH.Dest does.
type dest struct{ a *AH }

func (d dest) Dest() wr.AH { return seal.NewAH[wr.AH](d.a) }
