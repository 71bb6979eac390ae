#!/usr/bin/env bash
# bench.sh (make bench-mlx5) measures the cost of building and posting one
# WQE, doorbell included, in the Go provider (BenchmarkPostSend in
# provider/mlx5) and in C with rdma-core's mlx5dv.h helpers
# (hack/mlx5gen/bench.c), and prints the Go/C ratio. The doorbell goes to
# a plain memory page standing in for the UAR; no device is involved.
#
# Both run RUNS times, interleaved, pinned to one CPU when taskset exists;
# the minimum of each is compared, which is the least disturbed by other
# load on the machine. Needs gcc, the libibverbs-dev headers and go.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GO=${GO:-go}
CC=${CC:-gcc}
RUNS=${RUNS:-7}
ITERS=${ITERS:-5000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CC" -std=gnu11 -O2 -Wall -Wno-address-of-packed-member -o "$tmp/cbench" "$root/hack/mlx5gen/bench.c" -lpthread
(cd "$root" && CGO_ENABLED=0 "$GO" test -c -o "$tmp/gobench" ./provider/mlx5)

pin=()
if command -v taskset >/dev/null && [[ $(nproc) -gt 1 ]]; then
	pin=(taskset -c 1)
fi

gomin= cmin=
for ((i = 0; i < RUNS; i++)); do
	g=$("${pin[@]}" "$tmp/gobench" -test.run '^$' -test.bench '^BenchmarkPostSend$' -test.benchmem \
		-test.benchtime "${ITERS}x" | awk '/^BenchmarkPostSend/ {print $3; if ($7 != "0") exit 1}') ||
		{ echo "bench.sh: BenchmarkPostSend allocates" >&2; exit 1; }
	c=$("${pin[@]}" "$tmp/cbench" "$ITERS" | awk '{print $2}')
	gomin=$(awk -v a="$g" -v b="${gomin:-$g}" 'BEGIN {print (a < b) ? a : b}')
	cmin=$(awk -v a="$c" -v b="${cmin:-$c}" 'BEGIN {print (a < b) ? a : b}')
	printf 'run %d: Go %6.2f ns/op   C %6.2f ns/op\n' "$((i + 1))" "$g" "$c"
done
ratio=$(awk -v g="$gomin" -v c="$cmin" 'BEGIN {printf "%.2f", g / c}')
printf 'post one WQE (RDMA write, 1 SGE, BlueFlame doorbell): Go %.2f ns/op, C %.2f ns/op, Go/C %s (best of %d; target <= 1.20), 0 allocs/op\n' \
	"$gomin" "$cmin" "$ratio" "$RUNS"
