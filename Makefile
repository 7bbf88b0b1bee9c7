# The entry points of node-reboot-operator. `make test` is the one test command: it builds
# everything the tests need (the Go-built local control plane included) and runs every check.
SHELL := /bin/bash
CARGO ?= cargo
ARGS ?=

.PHONY: all testenv build test lint cluster sandbox

all: build

# The local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl) built from Kubernetes' own Go modules into testenv/bin; skipped when up to date.
testenv:
	@testenv/hack/build.sh

build:
	$(CARGO) build --workspace --all-targets --locked

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

test: testenv lint
	$(CARGO) test --workspace --locked --no-fail-fast

# A control plane in the foreground; prints KUBECONFIG=<path> once ready; Ctrl-C stops it.
cluster: testenv
	@$(CARGO) run --quiet --locked -p testenv --bin testenv-cluster -- $(ARGS)
