package mlx5

// fromDeviceBarrier (udma_from_device_barrier) keeps loads after it (a
// CQE's fields) from being satisfied before the load before it (the CQE's
// owner byte) observed the device's write. On x86-64 that takes nothing
// but the compiler's ordering, which the owner byte's load already gives:
// it is an atomic load (loadOpOwn), and the compiler moves no later load
// above one. The CPU keeps loads from write-back memory in order, and the
// device's DMA writes to it are coherent, which is why Linux's dma_rmb()
// on x86-64 is a compiler barrier only, and its mlx5 driver polls a CQ
// with nothing more between the owner check and the CQE's fields.
// rdma-core issues an LFENCE here, which orders nothing a CQE needs; it
// used to be a call into assembly here too, which made the compiler spill
// every live register around each CQE.
func fromDeviceBarrier() {}
