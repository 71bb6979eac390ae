#!/usr/bin/env bash
# generate.sh rebuilds the mlx5 provider's golden vectors,
# provider/mlx5/zvectors_test.go, with gen.c: segments, whole WQEs, CQEs
# and queue sizes built from rdma-core's mlx5dv.h and verbs.h.
#
#   hack/mlx5gen/generate.sh [OUTFILE]   (default provider/mlx5/zvectors_test.go;
#                                         run by make generate-mlx5 and make generate)
#
# Needs gcc, gofmt and the libibverbs-dev headers (Debian: libibverbs-dev,
# which hack/vm deps installs). The output depends only on the layouts and
# enum values in those headers, so every rdma-core that has the v44
# formats reproduces it byte for byte.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/provider/mlx5/zvectors_test.go}
CC=${CC:-gcc}
GOFMT=${GOFMT:-$(command -v gofmt || echo "$(go env GOROOT)/bin/gofmt")}

die() {
	echo "generate.sh: $*" >&2
	exit 1
}
command -v "$CC" >/dev/null || die "$CC not found"
[[ -x $GOFMT ]] || die "gofmt not found"
[[ -e /usr/include/infiniband/mlx5dv.h ]] ||
	die "/usr/include/infiniband/mlx5dv.h missing: install libibverbs-dev (apt-get install libibverbs-dev)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$CC" -std=gnu11 -O2 -Wall -Werror -o "$tmp/gen" "$root/hack/mlx5gen/gen.c"
"$tmp/gen" >"$tmp/z.go"
"$GOFMT" <"$tmp/z.go" >"$tmp/zf.go"
mv "$tmp/zf.go" "$out"
