#!/usr/bin/env bash
# check.sh regenerates the kernel ABI into a temporary directory and fails
# if it differs from the committed internal/abi/z* files (run in CI; it needs
# the network unless ${RDMAGO_CACHE:-.cache}/abigen already holds the .deb).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/hack/abigen/generate.sh" "$tmp"

stale=0
# Every generated file must match, and every committed z* file must be generated.
names=$(for f in "$tmp"/z* "$root"/internal/abi/z*; do [[ -e $f ]] && basename "$f"; done | sort -u)
for name in $names; do
	if ! diff -u --label "internal/abi/$name (committed)" --label "internal/abi/$name (generated)" \
		"$root/internal/abi/$name" "$tmp/$name" 2>/dev/null >>"$tmp/diff.txt"; then
		stale=1
		[[ -e $root/internal/abi/$name ]] || echo "missing: internal/abi/$name" >&2
		[[ -e $tmp/$name ]] || echo "not generated: internal/abi/$name" >&2
	fi
done
if ((stale)); then
	head -n 200 "$tmp/diff.txt" >&2
	echo "generated ABI is stale: run make generate" >&2
	exit 1
fi
echo "generated ABI is up to date" >&2
