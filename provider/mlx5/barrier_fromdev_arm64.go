package mlx5

// fromDeviceBarrier (udma_from_device_barrier) keeps loads after it (a
// CQE's fields) from being satisfied before the load before it (the CQE's
// owner byte) observed the device's write: DSB LD, as rdma-core uses
// (barrier_arm64.s).
//
//go:noescape
func fromDeviceBarrier()
