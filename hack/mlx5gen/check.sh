#!/usr/bin/env bash
# check.sh regenerates the mlx5 golden vectors into a temporary file and
# fails if they differ from the committed provider/mlx5/zvectors_test.go.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/hack/mlx5gen/generate.sh" "$tmp/zvectors_test.go"
if ! diff -u --label "provider/mlx5/zvectors_test.go (committed)" --label "provider/mlx5/zvectors_test.go (generated)" \
	"$root/provider/mlx5/zvectors_test.go" "$tmp/zvectors_test.go" >"$tmp/diff.txt"; then
	head -n 200 "$tmp/diff.txt" >&2
	echo "mlx5 golden vectors are stale: run make generate-mlx5" >&2
	exit 1
fi
echo "mlx5 golden vectors are up to date" >&2
