module github.com/rdmago/rdma

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/go-cmp v0.7.0
	github.com/mdlayher/netlink v1.11.2
	github.com/redis/go-redis/v9 v9.23.0
	github.com/valkey-io/valkey-go v1.0.80
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/mdlayher/socket v0.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
