#!/bin/sh
# The demo, run inside the soft-RoCE VM by `make demo`: rdmago, a pure-Go
# verbs stack, opens the RDMA device the VM created and prints what it knows,
# then rdma-core's C tool prints the same for comparison.
set -e
rdmago=${1:?usage: demo.sh path/to/rdmago}

echo "== kernel $(uname -r); RDMA devices: $(ls /sys/class/infiniband | tr '\n' ' ')"
echo
echo "== rdmago devinfo -v   (Go, no cgo, no libibverbs)"
"$rdmago" devinfo -v
echo "== the same query through rdma-core's ibv_devinfo -v, compared line by line"
if /usr/bin/ibv_devinfo -v > /tmp/c.txt && "$rdmago" devinfo -v > /tmp/go.txt && cmp -s /tmp/c.txt /tmp/go.txt; then
	echo "identical: $(wc -l < /tmp/go.txt) lines"
else
	echo "DIFFERENT:"
	diff /tmp/c.txt /tmp/go.txt || true
	exit 1
fi
