// A module outside github.com/rdmago/rdma: its provider sees only the
// public API, as a program's would (docs/providers.md).
module example.com/countingprovider

go 1.26.0

require github.com/rdmago/rdma v0.0.0

require golang.org/x/sys v0.50.0 // indirect

replace github.com/rdmago/rdma => ../..
