# rdmago: see README.md. Every target works on a fresh Debian machine: the VM
# runner (hack/vm) installs QEMU and rdma-core's tools when they are missing
# and caches kernels under .cache/ (override with RDMAGO_CACHE).

GO        ?= go
KERNEL    ?= bookworm
KERNELS   ?= bookworm trixie sid
# Device tests are the tests named TestDevice*; they need an RDMA device and
# fail, rather than skip, when the VM runner provides none.
DEVICE_RUN ?= ^TestDevice
VM        := $(CURDIR)/bin/vm
TESTLOG   := $(CURDIR)/bin/testlog
GOTEST    := CGO_ENABLED=0 $(GO) test -count=1
BENCH_REPS ?= 3
STATICCHECK_VERSION ?= v0.8.2

export CGO_ENABLED := 0
SHELL := /bin/bash

.PHONY: all build vm testlog deps valkey test pgo bench-mlx5cmp-pgo test-unit-arm64 test-arm64 bin/linux_arm64/rdmago test-extprovider check-api test-mlx5cmp bench-mlx5cmp test-unit test-fuzz test-race fuzz stress test-vm test-device test-nodevice test-kernels demo bench generate check-generate lint vet clean

all: build

build:
	$(GO) build -trimpath -o bin/rdmago ./cmd/rdmago

vm:
	$(GO) build -o bin/vm ./hack/vm

# testlog filters `go test -json` for reading and repeats each failure's
# messages at the end, where a CI log's reader looks.
testlog:
	$(GO) build -o bin/testlog ./hack/testlog

deps: vm testlog
	$(VM) deps

## valkey: valkey-server with RDMA and valkey's rdma-test, built from
## trixie's source package into the cache (a few minutes, once): the
## peers of the valkeyrdma device tests.
valkey: deps
	$(VM) valkey >/dev/null

## test: host unit tests, a short run of every fuzz target, the ABI
## check, every package in the VM on the default kernel, the device tests
## on the other kernels, and the race detector's runs.
test: vet check-api test-unit test-unit-arm64 test-fuzz check-generate test-mlx5cmp test-vm test-device test-nodevice test-extprovider test-arm64 test-race

# The host phase runs on a machine without RDMA modules, as CI's and a
# first-time user's: the TestNoRDMAHost tests check there what the docs
# promise such a host, and fail (rather than skip) if it has RDMA. On a
# host with RDMA loaded, run make test RDMAGO_EXPECT_NO_RDMA=0.
RDMAGO_EXPECT_NO_RDMA ?= 1
export RDMAGO_EXPECT_NO_RDMA

test-unit:
	$(GOTEST) ./...

## test-unit-arm64: the host unit tests built for arm64 and run under
## qemu-user (qemu-aarch64-static, from vm deps): the ABI structs' layout,
## the rings, the atomics and the mlx5 assembly executing on arm64. Tests
## of system calls qemu-user lacks (bpf) skip by probe (docs/testing.md).
QEMU_USER_ARM64 ?= qemu-aarch64-static
test-unit-arm64: deps
	GOARCH=arm64 $(GOTEST) -exec $(QEMU_USER_ARM64) ./...

## test-mlx5cmp: rdma-core's libmlx5 and rdmago's mlx5 provider against one
## fake mlx5_ib kernel (hack/mlx5cmp): the scenarios' transcripts compared
## byte for byte, and a deliberately broken provider caught (docs/mlx5.md);
## rdma-core's pingpongs and perftest against rdmago's through the device
## (TestTraffic).
## Trixie's and sid's libibverbs+libmlx5 (unpacked into .cache/rdma-core by
## `vm rdmacore`, about 4 MB each) are compared too (TestCompareVersions).
## FuzzCompare draws random sequences of requests and CQEs for both drivers:
## 50 inputs here, FUZZTIME in make fuzz.
test-mlx5cmp: deps
	RDMAGO_MLX5CMP=1 RDMAGO_MLX5CMP_VERSIONS=1 $(GOTEST) -run '^(TestCompare|TestSupervisor|TestLegacyWriteABI|TestTraffic)' ./hack/mlx5cmp
	RDMAGO_MLX5CMP=1 $(GOTEST) -run '^$$' -fuzz '^FuzzCompare$$' -fuzztime 50x -fuzzminimizetime 10x ./hack/mlx5cmp

# The fuzz targets, found in the source: ./pkg:FuzzName for every
# func FuzzName in a test file, committed or new.
# FuzzCompare (hack/mlx5cmp) is left out: it needs RDMAGO_MLX5CMP=1 (root,
# gcc, libibverbs-dev) and runs two supervised processes per input;
# test-mlx5cmp and fuzz run it.
FUZZ_TARGETS = $(filter-out ./hack/mlx5cmp:FuzzCompare,$(shell git ls-files -co --exclude-standard '*_test.go' | xargs grep -H '^func Fuzz' | \
	sed -n 's|^\(.*\)/[^/]*_test.go:func \(Fuzz[A-Za-z0-9_]*\).*|./\1:\2|p'))
FUZZTIME      ?= 60s
# make test's budget is a count of executions, not a duration: with a
# duration, Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" at the deadline on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME_TEST ?= 30000x

# fuzzrun fuzzes each target for $(1), one after another (go test -fuzz
# takes one target per run). A target's output is shown when it fails: it
# names the input it wrote to the package's testdata/fuzz/.
fuzzrun = fails=0; t0=$$(date +%s); for t in $(FUZZ_TARGETS); do \
	pkg=$${t%%:*}; name=$${t\#*:}; t1=$$(date +%s); \
	if out=$$($(GOTEST) -run '^$$' -fuzz "^$$name\$$" -fuzztime $(1) $$pkg 2>&1); then \
		echo "ok   $$name ($$pkg, $(1)) $$(( $$(date +%s) - t1 )) s"; \
	else \
		echo "FAIL $$name ($$pkg, $(1))"; printf '%s\n' "$$out" | grep -v '^fuzz: elapsed'; fails=$$((fails+1)); \
	fi; \
done; echo "== $(words $(FUZZ_TARGETS)) fuzz targets, $$fails failed, $$(( $$(date +%s) - t0 )) s"; [ $$fails -eq 0 ]

## test-fuzz: every fuzz target for FUZZTIME_TEST (30000 runs) each; their seed
## corpora also run as plain tests in test-unit.
test-fuzz:
	@$(call fuzzrun,$(FUZZTIME_TEST))

## fuzz: every fuzz target for FUZZTIME (60s) each.
fuzz: deps
	@$(call fuzzrun,$(FUZZTIME))
	RDMAGO_MLX5CMP=1 $(GOTEST) -run '^$$' -fuzz '^FuzzCompare$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10x ./hack/mlx5cmp

# The race detector needs cgo (-race requires cgo on linux/amd64); a race
# test binary is dynamically linked, which the VM runs because it shares
# the host's root. The device tests of cmd/rdmago take over five minutes
# under -race (the tools' interop runs), so the device run is limited to
# RACE_PKGS.
RACE_PKGS ?= ./uverbs ./cm ./rsocket ./valkeyrdma ./provider/...

# go test runs two packages' VMs at once on a 2-core runner, and under
# -race valkeyrdma's device tests take 170 s alone and 220-260 s beside
# rsocket's. One CI run hit go test's default 10 minutes there without
# saying where (testlog now prints a timed-out test's stacks). RACE_TIMEOUT
# keeps a hang a failure, with its stacks, and slowness not one.
RACE_TIMEOUT ?= 20m

## test-race: the host unit tests, then the device tests of RACE_PKGS in
## the VM on KERNEL, built with -race.
test-race: GOTEST := CGO_ENABLED=1 $(GO) test -count=1 -race -timeout $(RACE_TIMEOUT)
test-race: deps valkey
	$(GOTEST) ./...
	$(call vmtest,--kernel $(KERNEL),-run '$(DEVICE_RUN)' $(RACE_PKGS),test-race)

## stress: the stress tests (TestDeviceStress*: goroutines posting on one
## QP, one polling, Close racing them) with STRESS_OPS operations each, in
## the VM on KERNEL; make test runs them with 20000.
STRESS_OPS ?= 1000000
stress: deps
	$(call vmtest,--kernel $(KERNEL) --env RDMAGO_STRESS_OPS=$(STRESS_OPS),-run '^TestDeviceStress' -v ./uverbs,stress)

# vmtest runs go test in the VM (vm run flags $(1), go test's arguments
# $(2)) through testlog, which logs everything to bin/$(3).log; the
# status is go test's.
vmtest = set -o pipefail; $(GOTEST) -json -exec "$(VM) run $(1) --" $(2) 2>&1 | $(TESTLOG) -log $(CURDIR)/bin/$(3).log

test-vm: deps valkey
	$(call vmtest,--kernel $(KERNEL),./...,test-vm)

# The device tests on every kernel but the default one. hack/extprovider is
# a module of its own (test-extprovider).
test-device: deps valkey
	@set -e; pkgs=$$(grep -l '^func TestDevice' $$(git ls-files '*_test.go' ':!hack/extprovider') | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	for k in $(filter-out $(KERNEL),$(KERNELS)); do \
		echo "== device tests on $$k: $$pkgs"; \
		$(call vmtest,--kernel $$k,-run '$(DEVICE_RUN)' $$pkgs,test-device-$$k); \
	done

# The no-device errors, in a VM booted without rxe0.
test-nodevice: deps
	export RDMAGO_EXPECT_NO_DEVICE=1; $(call vmtest,--no-rdma --kernel $(KERNEL),-run '^TestNoDevice' ./uverbs ./rsocket ./cmd/rdmago/...,test-nodevice)

## test-extprovider: a provider written in another module (hack/extprovider)
## and registered with uverbs.RegisterProvider: the registration rules on the
## host, rxe traffic through it in the VM on KERNEL (docs/providers.md).
test-extprovider: deps
	cd hack/extprovider && $(GOTEST) ./...
	cd hack/extprovider && $(call vmtest,--kernel $(KERNEL),-v ./...,test-extprovider)

## test-arm64: the device tests of the packages below in an arm64 VM
## (vm run --arch arm64: Debian's arm64 kernel of ARM64_KERNEL under
## qemu-system-aarch64 TCG, rdma-core's arm64 tools as the interop peers).
## rxe0 is added there by bin/linux_arm64/rdmago.
ARM64_KERNEL ?= bookworm
ARM64_PKGS ?= ./uverbs ./cm ./rsocket ./provider/... ./qp ./mr ./cmd/rdmago/...
bin/linux_arm64/rdmago:
	GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./cmd/rdmago
test-arm64: deps bin/linux_arm64/rdmago
	@m=$$($(VM) run --arch arm64 --kernel $(ARM64_KERNEL) -- uname -m); echo "arm64 guest: uname -m: $$m"; [ "$$m" = aarch64 ]
	export GOARCH=arm64; $(call vmtest,--arch arm64 --kernel $(ARM64_KERNEL),-run '$(DEVICE_RUN)' $(ARM64_PKGS),test-arm64)

## test-kernels: everything on every kernel.
test-kernels: deps test-unit
	@set -e; for k in $(KERNELS); do \
		echo "== all tests on $$k"; \
		$(call vmtest,--kernel $$k,./...,test-all-$$k); \
	done

## demo: boot the soft-RoCE VM and run the rdmago tools in it.
demo: deps build
	$(VM) run --kernel $(KERNEL) -- $(CURDIR)/hack/demo.sh $(CURDIR)/bin/rdmago

## bench: perftest and rdmago perf side by side in one VM boot under QEMU's
## instruction-counting clock (the scale study, rdmago rstream against
## C rstream and TCP, cmtime, and Valkey over RDMA against TCP and against
## valkey's C RDMA client), polling latency in a
## two-vCPU wall-clock boot, the Go micro-benchmarks, and the mlx5 Go/C
## benchmark. docs/performance.md explains each part.
bench: deps build valkey
	$(GO) build -o bin/bench ./hack/bench
	$(VM) run --icount --kernel $(KERNEL) --timeout 60m -- $(CURDIR)/bin/bench -reps $(BENCH_REPS) \
		-valkey $$($(VM) valkey) $(CURDIR)/bin/rdmago table scale rstream cmtime valkey
	$(VM) run --smp 2 --kernel $(KERNEL) --timeout 20m -- $(CURDIR)/bin/bench -reps 5 $(CURDIR)/bin/rdmago latency
	$(GOTEST) -exec "$(VM) run --kernel $(KERNEL) --" -run '^$$' -bench . -benchmem ./...
	$(MAKE) bench-mlx5
	$(MAKE) bench-mlx5cmp

## bench-valkey: the valkey part of bench alone.
.PHONY: bench-valkey
bench-valkey: deps build valkey
	$(GO) build -o bin/bench ./hack/bench
	$(VM) run --icount --kernel $(KERNEL) --timeout 30m -- $(CURDIR)/bin/bench -reps $(BENCH_REPS) \
		-valkey $$($(VM) valkey) $(CURDIR)/bin/rdmago valkey

## pgo: write cmd/rdmago/default.pgo, the profile go build then uses for
## rdmago (profile-guided optimisation): CPU profiles of every rdmago
## process of bin/bench's perftest, rstream and cmtime rows, in one VM
## boot under the instruction-counting clock, merged. Not committed: on
## rxe it moved no row (docs/performance.md).
pgo: deps build
	$(GO) build -o bin/bench ./hack/bench
	rm -rf .cache/pgo && mkdir -p .cache/pgo
	$(VM) run --icount --kernel $(KERNEL) --timeout 60m --rw $(CURDIR)/.cache/pgo \
		--env RDMAGO_CPUPROFILE=$(CURDIR)/.cache/pgo/%p.pprof -- \
		$(CURDIR)/bin/bench -reps $(BENCH_REPS) $(CURDIR)/bin/rdmago table rstream cmtime
	$(GO) tool pprof -proto .cache/pgo/*.pprof > cmd/rdmago/default.pgo.tmp
	mv cmd/rdmago/default.pgo.tmp cmd/rdmago/default.pgo

## bench-mlx5cmp: instructions per post and per polled completion of
## rdma-core's libmlx5 (ibv_post_send, ibv_poll_cq) against rdmago
## (uverbs.QP.PostSend, CQ.Poll) on hack/mlx5cmp's fake mlx5 device, in one
## VM boot under the instruction-counting clock, BENCH_REPS alternating runs
## each (docs/performance.md, mlx5).
MLX5CMP_BENCH_N ?= 20000
MLX5CMP_SIDES ?= c go
bench-mlx5cmp: deps
	@mkdir -p bin/mlx5cmp
	$(GO) build -o bin/mlx5cmp/mlx5cmp ./hack/mlx5cmp
	$(GO) build -o bin/mlx5cmp/bench-go ./hack/mlx5cmp/scenario/gobench
	gcc -O2 -Wall -Wextra -o bin/mlx5cmp/bench-c hack/mlx5cmp/scenario/bench.c hack/mlx5cmp/scenario/common.c -libverbs
	$(VM) run --icount --kernel $(KERNEL) --timeout 20m -- /bin/sh -c 'cd hack/mlx5cmp && \
		for i in $$(seq $(BENCH_REPS)); do for s in $(MLX5CMP_SIDES); do \
			timeout 300 $(CURDIR)/bin/mlx5cmp/mlx5cmp run -profile testdata/cx6.json -o /dev/null -- \
				$(CURDIR)/bin/mlx5cmp/bench-$$s $(MLX5CMP_BENCH_N) >/tmp/bench.out 2>&1; \
			grep -q "^bench " /tmp/bench.out || { cat /tmp/bench.out; exit 1; }; \
			sed "s/^/$$s $$i: /" /tmp/bench.out; \
		done; done'

## bench-mlx5cmp-pgo: what profile-guided optimisation gives a program
## built on the library: bench-go profiled on the fake mlx5 device, built
## again with that profile, and both against libmlx5 under the
## instruction-counting clock (docs/performance.md).
bench-mlx5cmp-pgo: deps
	@mkdir -p bin/mlx5cmp .cache/pgo-mlx5
	$(GO) build -o bin/mlx5cmp/mlx5cmp ./hack/mlx5cmp
	$(GO) build -o bin/mlx5cmp/bench-go ./hack/mlx5cmp/scenario/gobench
	gcc -O2 -Wall -Wextra -o bin/mlx5cmp/bench-c hack/mlx5cmp/scenario/bench.c hack/mlx5cmp/scenario/common.c -libverbs
	$(VM) run --icount --kernel $(KERNEL) --timeout 20m --rw $(CURDIR)/.cache/pgo-mlx5 -- /bin/sh -c 'cd hack/mlx5cmp && \
		BENCH_GO_CPUPROFILE=$(CURDIR)/.cache/pgo-mlx5/bench-go.pprof timeout 600 $(CURDIR)/bin/mlx5cmp/mlx5cmp run \
			-profile testdata/cx6.json -o /dev/null -- $(CURDIR)/bin/mlx5cmp/bench-go 200000 >/dev/null'
	$(GO) build -pgo=$(CURDIR)/.cache/pgo-mlx5/bench-go.pprof -o bin/mlx5cmp/bench-go-pgo ./hack/mlx5cmp/scenario/gobench
	$(MAKE) bench-mlx5cmp MLX5CMP_SIDES="c go go-pgo"

## generate: regenerate what is generated (go generate ./...): the kernel ABI
## from the pinned uapi headers, the mlx5 golden vectors, the doctor's table.
generate:
	$(GO) generate ./...

# The mlx5 vectors come from rdma-core's mlx5dv.h (libibverbs-dev): deps.
check-generate: deps
	hack/abigen/check.sh
	hack/mlx5gen/check.sh

vet:
	$(GO) vet ./...
	cd hack/extprovider && $(GO) vet ./...

## check-api: the public API against api/v1.txt with api/next.txt applied;
## fails on an exported change recorded in neither, or not explained in
## docs/from-v0.md (hack/apicheck; docs/testing.md).
check-api:
	$(GO) run ./hack/apicheck

lint: vet cross check-api
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt'ed:"; echo "$$unformatted"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## cross: the module, its tests included, builds and vets where a program
## using it may be compiled: macOS (its device calls fail with
## errors.ErrUnsupported; the tests of Linux's netlink and the device are
## tagged linux) and 64-bit ARM Linux.
.PHONY: cross
cross:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...

clean:
	rm -rf bin

## mlx5: golden vectors from rdma-core's mlx5dv.h, their drift check, and
## the post-one-WQE benchmark of the Go provider against the same work in C.
.PHONY: generate-mlx5 check-generate-mlx5 bench-mlx5

generate-mlx5:
	hack/mlx5gen/generate.sh

check-generate-mlx5:
	hack/mlx5gen/check.sh

bench-mlx5:
	GO="$(GO)" hack/mlx5gen/bench.sh

## test-pair: rping, rdma_server/rdma_client, rstream, mckey and Valkey between two VMs (vm pair,
## KERNEL for both): rdmago serving rdma-core's client, rdma-core's server
## serving rdmago, and rdmago on both sides; then rping and rstream between
## an x86 VM and an arm64 one (vm pair --arch-b arm64), Go on one side and
## C on the other, both ways; valkey-server in one VM and rdmago
## valkey-benchmark over RDMA in the other (hack/valkey-pair.sh), x86 and
## arm64 clients. Each client starts once its server listens (vm pair
## --b-after-listen); mckey's sender, whose receiver does not listen, waits
## 2 s. Logged to bin/test-pair.log; exits non-zero on any failure.
PAIR_TIMEOUT ?= 90s
.PHONY: test-pair
test-pair: vm build bin/linux_arm64/rdmago valkey
	@set -uo pipefail; R=$(CURDIR)/bin/rdmago; A=10.0.5.1; S=1000; log=$(CURDIR)/bin/test-pair.log; : > $$log; PF=; \
	fails=0; t0=$$(date +%s); W=--b-after-listen; SL=; \
	pair() { \
		local name=$$1 a=$$2 b=$$3 out st t1 bad=""; shift 3; t1=$$(date +%s); \
		echo "== pair ($(KERNEL)) $$name"; echo "   [a] $$a"; echo "   [b] $${W:+(once a listens) }$$SL$$b"; \
		out=$$($(VM) pair --kernel $(KERNEL) $$PF $$W --timeout $(PAIR_TIMEOUT) -- /bin/sh -c "$$a" ::: /bin/sh -c "$$SL exec $$b" 2>&1); st=$$?; \
		{ echo "== $$name"; printf '%s\n' "$$out"; } >> $$log; \
		printf '%s\n' "$$out" | grep -v 'ping data: rdma-ping-' | sed 's/^/   /'; \
		[ $$st -eq 0 ] || bad="vm pair exited with status $$st"; \
		while [ $$# -gt 0 ]; do \
			n=$$(printf '%s\n' "$$out" | grep -c -- "$$2"); \
			[ "$$n" -eq "$$1" ] || bad="$$bad$${bad:+; }$$n lines match '$$2', want $$1"; shift 2; \
		done; \
		if [ -n "$$bad" ]; then echo "FAIL $$name ($$(( $$(date +%s) - t1 )) s): $$bad"; fails=$$((fails+1)); \
		else echo "ok   $$name ($$(( $$(date +%s) - t1 )) s)"; fi; \
	}; \
	pa='^\[a\] server ping data: rdma-ping-'; pb='^\[b\] ping data: rdma-ping-'; p9='9: JKLMNOPQRSTUVWXYZ'; \
	pair "rping: rdmago server, rping client" \
		"$$R rping -s -v -a $$A -S $$S" "/usr/bin/rping -c -V -v -C 10 -a $$A -S $$S" \
		10 "$$pa[0-9]: " 1 "$$pa$$p9" 10 "$$pb[0-9]: " 1 "$$pb$$p9"; \
	pair "rping: rping server, rdmago client" \
		"/usr/bin/rping -s -v -a $$A -S $$S" "$$R rping -c -V -v -C 10 -a $$A -S $$S" \
		10 "$$pa[0-9]: " 1 "$$pa$$p9" 10 "$$pb[0-9]: " 1 "$$pb$$p9"; \
	pair "rping: rdmago server, rdmago client" \
		"$$R rping -s -v -a $$A" "$$R rping -c -V -v -C 10 -a $$A" \
		10 "$$pa[0-9]: " 1 "$$pa$$p9" 10 "$$pb[0-9]: " 1 "$$pb$$p9"; \
	zeros='received 16 bytes: 00000000000000000000000000000000$$'; \
	pair "rdma_server/rdma_client: rdmago server, rdma_client" \
		"$$R server -v -s $$A" "/usr/bin/rdma_client -s $$A" \
		1 '^\[a\] rdma_server: end 0$$' 1 '^\[b\] rdma_client: end 0$$' 1 "^\[a\] rdma_server: $$zeros"; \
	pair "rdma_server/rdma_client: rdma_server, rdmago client" \
		"/usr/bin/rdma_server -s $$A" "$$R client -v -s $$A" \
		1 '^\[a\] rdma_server: end 0$$' 1 '^\[b\] rdma_client: end 0$$' 1 "^\[b\] rdma_client: $$zeros"; \
	pair "rdma_server/rdma_client: rdmago server, rdmago client" \
		"$$R server -v -s $$A" "$$R client -v -s $$A" \
		1 '^\[a\] rdma_server: end 0$$' 1 '^\[b\] rdma_client: end 0$$' 1 "^\[a\] rdma_server: $$zeros" 1 "^\[b\] rdma_client: $$zeros"; \
	rs='^\[[ab]\] custom  '; \
	pair "rstream: rdmago server, rstream -T a client (4 KiB, verified)" \
		"$$R rstream -S 4096 -C 200 -T v" "/usr/bin/rstream -s $$A -S 4096 -C 200 -T v -T a" \
		2 "$$rs"; \
	pair "rstream: rstream -T b server, rdmago client (1 MiB, verified)" \
		"/usr/bin/rstream -S 1048576 -C 10 -T v -T b" "$$R rstream -s $$A -S 1048576 -C 10 -T v" \
		2 "$$rs"; \
	pair "rstream: rdmago server, rdmago client (64 B, verified)" \
		"$$R rstream -S 64 -C 1000 -T v" "$$R rstream -s $$A -S 64 -C 1000 -T v" \
		2 "$$rs"; \
	mk='return status 0$$'; mg=239.1.1.1; W=; SL="sleep 2;"; \
	pair "mckey: rdmago receiver, mckey sender" \
		"$$R mckey -m $$mg -b $$A" "/usr/bin/mckey -m $$mg -b 10.0.5.2 -s" \
		1 "^\[a\] $$mk" 1 "^\[b\] $$mk" 1 '^\[a\] data transfers complete$$'; \
	pair "mckey: mckey receiver, rdmago sender" \
		"/usr/bin/mckey -m $$mg -b $$A" "$$R mckey -m $$mg -b 10.0.5.2 -s" \
		1 "^\[a\] $$mk" 1 "^\[b\] $$mk" 1 '^\[a\] data transfers complete$$'; \
	pair "mckey: rdmago receiver, rdmago sender" \
		"$$R mckey -m $$mg -b $$A" "$$R mckey -m $$mg -b 10.0.5.2 -s" \
		1 "^\[a\] $$mk" 1 "^\[b\] $$mk" 1 '^\[a\] data transfers complete$$'; \
	W=--b-after-listen; SL=; VK=$$($(VM) valkey); VP=$(CURDIR)/hack/valkey-pair.sh; \
	vk() { pair "$$1" "$$VP server $$VK" "$$VP client $$2" \
		2 '^\[b\] SET: ' 2 '^\[b\] GET: ' 1 '^\[b\] Valkey Over RDMA test \[OK\]$$' 0 '^\[b\] FAILED'; }; \
	vk "valkey: valkey-server (RDMA), rdmago valkey-benchmark --rdma client (verified)" "$$R"; \
	PF="--arch-b arm64"; RB=$(CURDIR)/bin/linux_arm64/rdmago; \
	vk "x86 a, arm64 b: valkey: valkey-server (RDMA), rdmago valkey-benchmark --rdma client (verified)" "$$RB"; \
	pair "x86 a, arm64 b: rping: rdmago server, rping client" \
		"$$R rping -s -v -a $$A -S $$S" "/usr/bin/rping -c -V -v -C 10 -a $$A -S $$S" \
		10 "$$pa[0-9]: " 1 "$$pa$$p9" 10 "$$pb[0-9]: " 1 "$$pb$$p9"; \
	pair "x86 a, arm64 b: rping: rping server, rdmago client" \
		"/usr/bin/rping -s -v -a $$A -S $$S" "$$RB rping -c -V -v -C 10 -a $$A -S $$S" \
		10 "$$pa[0-9]: " 1 "$$pa$$p9" 10 "$$pb[0-9]: " 1 "$$pb$$p9"; \
	pair "x86 a, arm64 b: rstream: rdmago server, rstream -T a client (4 KiB, verified)" \
		"$$R rstream -S 4096 -C 200 -T v" "/usr/bin/rstream -s $$A -S 4096 -C 200 -T v -T a" \
		2 "$$rs"; \
	pair "x86 a, arm64 b: rstream: rstream server, rdmago client (64 KiB, verified)" \
		"/usr/bin/rstream -S 65536 -C 20 -T v" "$$RB rstream -s $$A -S 65536 -C 20 -T v" \
		2 "$$rs"; \
	echo "== test-pair ($(KERNEL)): 18 pairs, $$fails failed, $$(( $$(date +%s) - t0 )) s; full output in $$log"; \
	[ $$fails -eq 0 ]

## test-faults: RoCEv2 recovery between two VMs (vm pair, KERNEL for both)
## under packets dropped or corrupted by internal/faults's XDP program:
## rping and perftest (rdmago and rdma-core's, both ways) with 1% and 10%
## loss, 64 KiB messages, corrupted bytes, targeted drops, lost CM MADs.
## Logged to bin/test-faults-KERNEL.log; see docs/reliability.md. test-pair
## runs its short, deterministic set.
.PHONY: test-faults test-faults-short faultrun
faultrun:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/faultrun ./hack/faultrun
test-faults: vm build faultrun
	KERNEL=$(KERNEL) VM=$(VM) hack/test-faults.sh all
test-faults-short: vm build faultrun
	KERNEL=$(KERNEL) VM=$(VM) hack/test-faults.sh short
# test-pair also runs the short fault set (every 100th data packet dropped,
# about 40 s), so that CI sees loss recovered.
test-pair: test-faults-short

## test-pair-go: the cm package's pair tests (TestPair* in
## cm/pair_vm_test.go) in two VMs (vm pair, KERNEL for both), the same test
## binary in each: an RC stream of sends, RDMA writes and reads checked end
## to end under 1% loss, UD datagrams under 10% loss accounted for exactly
## by the receiving VM's injector, RNR retries exhausted, the keepalive
## ending an idle connection whose link went, a lost DREQ both ways. About
## 60 s on bookworm and 40 s on trixie under TCG, boot included. Logged to
## bin/test-pair-go.log; test-pair runs it.
PAIR_GO_TIMEOUT ?= 240s
.PHONY: test-pair-go
test-pair-go: vm
	CGO_ENABLED=0 $(GO) test -c -o bin/cm.test ./cm
	@set -o pipefail; echo "== pair ($(KERNEL)): go test -run '^TestPair' ./cm"; \
	$(VM) pair --kernel $(KERNEL) --timeout $(PAIR_GO_TIMEOUT) -- \
		bin/cm.test -test.run '^TestPair' -test.v ::: bin/cm.test -test.run '^TestPair' -test.v 2>&1 | \
		tee bin/test-pair-go.log
test-pair: test-pair-go
