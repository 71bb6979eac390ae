package wr

// Remote names memory of the peer's: the address and remote key its memory
// region advertises (ibv_mr's addr and rkey), which an RDMA read, write or
// atomic targets. A peer's uverbs.MR.Remote gives it; it travels to this
// side in whatever message the application exchanges.
type Remote struct {
	Addr uint64
	RKey uint32
}

// Add returns the memory n bytes further into the same region.
func (r Remote) Add(n uint64) Remote { return Remote{Addr: r.Addr + n, RKey: r.RKey} }
