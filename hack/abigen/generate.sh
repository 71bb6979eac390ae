#!/usr/bin/env bash
# generate.sh regenerates the kernel ABI package internal/abi from the RDMA uAPI
# headers of a pinned Debian linux-libc-dev, with go tool cgo -godefs.
#
#   hack/abigen/generate.sh [OUTDIR]      (default: internal/abi; run by make generate)
#
# The .deb is downloaded (never installed) with a private apt configuration
# and cached, with its unpacked tree, in ${RDMAGO_CACHE:-<repo>/.cache}/abigen.
# Needs: apt-get, dpkg-deb, gcc, go; linux/amd64 (the output is also valid on
# arm64, see internal/abi/doc.go). cgo is used here only, never by the library.
set -euo pipefail

# The pin. Bump it to the version of linux-libc-dev in Debian trixie's main
# suite (not -security or -updates), see `apt-cache madison linux-libc-dev`
# or https://packages.debian.org/trixie/linux-libc-dev, then run make generate.
LINUX_LIBC_DEV_VERSION=6.12.117-1

# The headers whose structs, enumerators and #define constants are generated.
HEADERS=(
	rdma/ib_user_verbs.h
	rdma/ib_user_ioctl_verbs.h
	rdma/ib_user_ioctl_cmds.h
	rdma/rdma_user_ioctl_cmds.h
	rdma/rdma_user_ioctl.h
	rdma/rdma_user_cm.h
	rdma/rdma_user_rxe.h
	rdma/mlx5-abi.h
	rdma/mlx5_user_ioctl_cmds.h
	rdma/mlx5_user_ioctl_verbs.h
	rdma/rdma_netlink.h
)

die() {
	echo "generate.sh: $*" >&2
	exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(mkdir -p "${1:-$root/internal/abi}" && cd "${1:-$root/internal/abi}" && pwd)
cache=$(mkdir -p "${RDMAGO_CACHE:-$root/.cache}/abigen" && cd "${RDMAGO_CACHE:-$root/.cache}/abigen" && pwd)
version=$LINUX_LIBC_DEV_VERSION
CC=${CC:-gcc}

[[ $(uname -s)/$(uname -m) == Linux/x86_64 ]] ||
	die "run on linux/amd64 (the committed output is generated there); this is $(uname -s)/$(uname -m)"
for tool in apt-get dpkg-deb "$CC" go; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

# fetch_deb downloads linux-libc-dev=$version into $cache without touching
# the machine's apt sources, lists or package cache.
fetch_deb() {
	local apt=$cache/apt
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
	echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' \
		>"$apt/sources.list"
	local opts=(
		-o "Dir::Etc::sourcelist=$apt/sources.list"
		-o Dir::Etc::sourceparts=/dev/null
		-o "Dir::State::Lists=$apt/lists"
		-o "Dir::Cache=$apt/cache"
		-o "Dir::Cache::archives=$apt/cache/archives"
		-o "APT::Sandbox::User=$(id -un)"
		-o Acquire::Languages=none
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
	)
	echo "generate.sh: downloading linux-libc-dev $version from Debian trixie" >&2
	apt-get -q "${opts[@]}" update >&2 || die "apt-get update of Debian trixie failed"
	if ! (cd "$cache" && apt-get -q "${opts[@]}" download "linux-libc-dev=$version" >&2); then
		local have
		have=$(apt-cache "${opts[@]}" madison linux-libc-dev 2>/dev/null | awk -F' *[|] *' '{print $2}' | paste -sd' ')
		die "linux-libc-dev $version is no longer in Debian trixie main (it has: ${have:-none});" \
			"bump LINUX_LIBC_DEV_VERSION in hack/abigen/generate.sh and run make generate"
	fi
}

deb=$(compgen -G "$cache/linux-libc-dev_${version}_*.deb" | head -n1 || true)
if [[ -z $deb ]]; then
	fetch_deb
	deb=$(compgen -G "$cache/linux-libc-dev_${version}_*.deb" | head -n1) || die "download left no .deb in $cache"
fi
tree=$cache/linux-libc-dev_$version
if [[ ! -d $tree ]]; then
	rm -rf "$tree.tmp"
	dpkg-deb -x "$deb" "$tree.tmp"
	mv "$tree.tmp" "$tree"
fi
inc=$tree/usr/include
arch_inc=$inc/x86_64-linux-gnu
[[ -d $arch_inc ]] || die "$deb has no $arch_inc"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$root"
export CGO_ENABLED=0 # for building the helper; cgo itself is run directly below
go run ./hack/abigen extract -cc "$CC" -I "$inc" -I "$arch_inc" -dir "$work" "${HEADERS[@]}"
CC=$CC go tool cgo -objdir "$work/obj" -godefs -- -I "$inc" -I "$arch_inc" "$work/types.go" >"$work/godefs.go"
go run ./hack/abigen post -dir "$work" -version "$version" \
	-o "$out/zabi.go" -sizetest "$out/zabi_size_test.go" <"$work/godefs.go"
echo "generate.sh: wrote $out/zabi.go $out/zabi_size_test.go (linux-libc-dev $version)" >&2
