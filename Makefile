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
GOTEST    := CGO_ENABLED=0 $(GO) test -count=1
STATICCHECK_VERSION ?= v0.8.2

export CGO_ENABLED := 0
SHELL := /bin/bash

.PHONY: all build vm deps test test-unit test-vm test-device test-nodevice test-kernels demo bench generate check-generate lint vet clean

all: build

build:
	$(GO) build -trimpath -o bin/rdmago ./cmd/rdmago

vm:
	$(GO) build -o bin/vm ./hack/vm

deps: vm
	$(VM) deps

## test: host unit tests, the ABI check, every package in the VM on the
## default kernel, and the device tests on the other kernels.
test: vet test-unit check-generate test-vm test-device test-nodevice

test-unit:
	$(GOTEST) ./...

test-vm: deps
	$(GOTEST) -v -exec "$(VM) run --kernel $(KERNEL) --" ./... 2>&1 | tee $(CURDIR)/bin/test-vm.log | grep -Ev '^(=== RUN|=== PAUSE|=== CONT|    --- PASS|--- PASS)'; test $${PIPESTATUS[0]} -eq 0
	@echo "== skipped in the VM (each must name a feature the kernel or provider lacks, or another VM mode):"; grep -B2 -- '--- SKIP' $(CURDIR)/bin/test-vm.log | grep -v '^--$$' || echo "   none"

# The device tests on every kernel but the default one.
test-device: deps
	@set -e; pkgs=$$(grep -l '^func TestDevice' $$(git ls-files '*_test.go') | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	for k in $(filter-out $(KERNEL),$(KERNELS)); do \
		echo "== device tests on $$k: $$pkgs"; \
		$(GOTEST) -exec "$(VM) run --kernel $$k --" -run '$(DEVICE_RUN)' -v $$pkgs; \
	done

# The no-device errors, in a VM booted without rxe0.
test-nodevice: deps
	RDMAGO_EXPECT_NO_DEVICE=1 $(GOTEST) -v -exec "$(VM) run --no-rdma --kernel $(KERNEL) --" -run '^TestNoDevice' ./uverbs ./cmd/rdmago

## test-kernels: everything on every kernel.
test-kernels: deps test-unit
	@set -e; for k in $(KERNELS); do \
		echo "== all tests on $$k"; \
		$(GOTEST) -exec "$(VM) run --kernel $$k --" ./...; \
	done

## demo: boot the soft-RoCE VM and run the rdmago tools in it.
demo: deps build
	$(VM) run --kernel $(KERNEL) -- $(CURDIR)/hack/demo.sh $(CURDIR)/bin/rdmago

bench: deps
	$(GOTEST) -exec "$(VM) run --kernel $(KERNEL) --" -run '^$$' -bench . -benchmem ./...

## generate: regenerate the kernel ABI from the pinned uapi headers.
generate:
	hack/abigen/generate.sh

check-generate:
	hack/abigen/check.sh

vet:
	$(GO) vet ./...

lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

clean:
	rm -rf bin
