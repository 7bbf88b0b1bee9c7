# The entry points of node-reboot-operator. `make test` is the one test command: it builds
# everything the tests need (the Go-built local control plane included) and runs every check.
SHELL := /bin/bash
CARGO ?= cargo
ARGS ?=

.PHONY: fuzz all release deny deny-tools testenv testenv-control-plane testenv-oldest-k8s test-oldest-k8s static cross-tools faketime-tools test-arm64 images chart chart-readme crd bins build test test-inputs lint cluster sandbox demo bench manifests vm-tools vm-image vm-e2e node-image node-e2e docs docs-tools docs-reference soak publish

all: build

# The local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl) built from Kubernetes' own Go modules into testenv/bin; skipped when up to date.
# Each phase of `make test` runs under hack/phase.sh, which records its time and whether it
# came from a cache; `make test` ends with their table (hack/phase-table.sh).
PHASE = hack/phase.sh $@ --

testenv:
	@$(PHASE) testenv/hack/build.sh

# The release binaries of the images, fully static (glibc linked in), built with the very
# command of Dockerfile.agent and Dockerfile.controller, into target/<arch>-unknown-linux-gnu/
# release/: every binary for this machine, and the images' two for the other architecture of
# the images (arm64 on amd64), cross-compiled with Debian's toolchain (hack/install-cross.sh).
# --target keeps RUSTFLAGS off build scripts and proc macros. The kubectl plugin of a release
# too (`make release`): static for both Linux architectures, and for Windows (amd64) with
# Debian's MinGW-w64, in one cargo run, each target's flags its own.
STATIC_TARGET ?= $(shell uname -m)-unknown-linux-gnu
CROSS_ARCH := $(if $(filter x86_64-%,$(STATIC_TARGET)),aarch64,x86_64)
CROSS_LINKER := CARGO_TARGET_$(shell echo $(CROSS_ARCH) | tr a-z A-Z)_UNKNOWN_LINUX_GNU_LINKER=$(CROSS_ARCH)-linux-gnu-gcc
WINDOWS_TARGET := x86_64-pc-windows-gnu
WINDOWS_LINKER := CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
CROSS_RUSTFLAGS := CARGO_TARGET_$(shell echo $(CROSS_ARCH) | tr a-z A-Z)_UNKNOWN_LINUX_GNU_RUSTFLAGS='-C target-feature=+crt-static'
# The images' two for both architectures in one cargo run, so that one's slow final link
# overlaps the other's compiling.
static: cross-tools
	$(PHASE) env $(CROSS_LINKER) RUSTFLAGS='-C target-feature=+crt-static' $(CARGO) build --release --locked --target $(STATIC_TARGET) --target $(CROSS_ARCH)-unknown-linux-gnu -p agent -p controller
	$(PHASE) env RUSTFLAGS='-C target-feature=+crt-static' $(CARGO) build --release --locked --target $(STATIC_TARGET) -p vm-node-reporter -p kubectl-reboot
	$(PHASE) env $(CROSS_LINKER) $(CROSS_RUSTFLAGS) $(WINDOWS_LINKER) $(CARGO) build --release --locked --target $(CROSS_ARCH)-unknown-linux-gnu --target $(WINDOWS_TARGET) -p kubectl-reboot

# Rust's standard library for the other architecture, Debian's cross toolchain, and QEMU's
# user mode registered with binfmt_misc (for test-arm64), when missing.
cross-tools:
	@$(PHASE) hack/install-cross.sh

# The agent's process-level tests against the arm64 binary of its image, under QEMU's user
# mode (hack/test-arm64.sh). Part of `make test`.
test-arm64: static
	@hack/test-arm64.sh

# OCI image archives in target/images/ (reboot-agent, reboot-controller, registry.k8s.io/pause,
# the test workload) from the static binaries, without a container engine, reproducibly.
# reboot-agent and reboot-controller are one OCI image index each, for amd64 and arm64, with
# an SPDX SBOM of each platform's binary attached as buildx attaches one (and written beside
# the archive as <program>.<arch>.spdx.json); pause and the workload are this machine's.
# target/images/images.txt: a line per image, its name, archive and digest (the index's, for
# the two programs) separated by tabs. Import one with
# `ctr -n k8s.io images import --all-platforms target/images/reboot-agent.oci.tar`.
# pause (compiled with gcc) and Debian's busybox-static are cached in
# ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator.
images: static
	$(PHASE) $(CARGO) run --quiet --locked -p oci-images -- $(ARGS)

# The chart of a release: target/chart/node-reboot-operator-<version>.tgz, its version and
# appVersion the workspace's, its values.yaml pinning reboot-controller and reboot-agent by
# the digests of target/images/images.txt (under OCI_IMAGES_REGISTRY, as `make images` named
# them), linted and rendered by helm before it is kept; the checked-in chart is not changed.
# Push it with `helm push target/chart/node-reboot-operator-<version>.tgz oci://<registry>`.
# CHART_ARGS go to the packager (`--help`); ARGS would reach `make images` too.
CHART_ARGS ?=
chart: testenv images
	$(PHASE) $(CARGO) run --quiet --locked -p chart-package -- $(CHART_ARGS)

# Pushes the release of `make release` (target/dist/<version>/) to REGISTRY and signs it
# (hack/publish.sh): both images' whole indexes (platforms and SBOM attestations) by oras as
# $(REGISTRY)/reboot-agent:<version> and $(REGISTRY)/reboot-controller:<version>, the chart by
# `helm push` to oci://$(REGISTRY)/charts, each signed by digest with cosign. VERSION: the
# workspace's by default. Environment: REGISTRY_USERNAME and REGISTRY_PASSWORD (else the
# credentials of `docker login`), REGISTRY_CA_FILE (a private CA), COSIGN_KEY and
# COSIGN_PASSWORD (key-based signing; keyless, by OIDC, without). Pushing again changes nothing.
REGISTRY ?=
VERSION ?=
publish: testenv
	@REGISTRY='$(REGISTRY)' VERSION='$(VERSION)' hack/publish.sh
# A release in target/dist/<version>/ (<version> the workspace's), the same bytes on every
# run (the release crate, release/): the two images' archives and SBOMs and images.txt
# (`make images`; images.txt names the archives by their file names in the folder), the
# packaged chart (`make chart`), the kubectl plugin's archives for linux amd64 and arm64
# (tar.gz) and windows amd64 (zip), each the binary of `make static` and LICENSE, the krew
# manifest reboot.yaml, and SHA256SUMS of every other file. macOS' plugin is built on a macOS
# runner by the release workflow (.github/workflows/release.yml), which adds its archives and
# writes reboot.yaml and SHA256SUMS again (docs/src/development.md, "Cutting a release").
# RELEASE_ARGS go to the assembler (`cargo run -p release-dist -- assemble --help`).
RELEASE_ARGS ?=
release: static images chart
	$(PHASE) $(CARGO) run --quiet --locked -p release-dist -- assemble $(RELEASE_ARGS)

build: static
	$(CARGO) build --workspace --all-targets --locked

# The module-cycle check (hack/module-cycles.py) fails on modules of a crate that import each
# other, outside test code; hack/architecture-names.py on a file, folder or docs page that
# ARCHITECTURE.md or a comment of the code, the Makefile, the scripts or the manifests names
# and that no longer exists. cargo-deny checks the dependency tree against deny.toml
# (licenses, bans, sources: offline; `make deny` checks advisories too, which fetches
# RustSec's database), and actionlint (testenv/bin, from its Go module) the GitHub workflows.
lint: deny-tools testenv
	$(PHASE) $(CARGO) fmt --all -- --check
	$(PHASE) python3 hack/module-cycles.py
	$(PHASE) python3 hack/architecture-names.py
	@# cargo-deny reads every package of Cargo.lock, each platform's (windows-sys too): a fresh
	@# machine's builds have not fetched them all when lint runs beside them.
	$(PHASE) $(CARGO) fetch --locked
	$(PHASE) $(CARGO_DENY) deny --offline --locked check --hide-inclusion-graph licenses bans sources
	$(PHASE) testenv/bin/actionlint .github/workflows/*.yml
	$(PHASE) $(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# cargo-deny from the Rust crate registry, pinned, built once into
# $NRO_CACHE/cargo-deny-<version>/ (hack/install-cargo-deny.sh).
CARGO_DENY_VERSION := 0.20.2
CARGO_DENY ?= $(NRO_CACHE)/cargo-deny-$(CARGO_DENY_VERSION)/bin/cargo-deny
deny-tools:
	@$(PHASE) env CARGO_DENY_VERSION=$(CARGO_DENY_VERSION) CARGO_DENY_ROOT=$(NRO_CACHE)/cargo-deny-$(CARGO_DENY_VERSION) hack/install-cargo-deny.sh

# Every check of deny.toml, RustSec's advisories included (they need the network: the CI
# workflow runs it).
deny: deny-tools
	$(CARGO_DENY) deny --locked check --hide-inclusion-graph

# The debug binaries that the end-to-end tests, the sandbox and the demo run as processes.
bins:
	$(PHASE) $(CARGO) build --workspace --bins --locked

# Every test; the two VM tiers last (the agent as a service, then real nodes with the chart),
# with their progress on the terminal. Each runs even when one before it fails, and any
# failing fails the target. The workspace's test binaries run several at a time
# (hack/test-binaries.sh; TEST_JOBS, default 4): they mostly wait on simulated reboots, and
# the real nodes' disk image builds beside them (only the last tier needs it). Then the arm64
# agent's process-level tests under QEMU's user mode (hack/test-arm64.sh).
test: test-inputs
	@status=0; \
	$(MAKE) --no-print-directory node-image & image=$$!; \
	hack/phase.sh test-workspace -- hack/test-binaries.sh || status=1; \
	hack/phase.sh test-arm64 -- hack/test-arm64.sh || status=1; \
	wait $$image || status=1; \
	hack/phase.sh test-vm-tiers -- $(CARGO) test --locked -p vmtest --no-fail-fast --lib --test vm_e2e --test node_e2e -- --nocapture || status=1; \
	hack/phase-table.sh; \
	exit $$status

# Fuzzing (hack/fuzz.sh): every cargo-fuzz target of fuzz/ for FUZZ_SECONDS each (default
# 60), from its corpus in fuzz/corpus/; fails naming the crashing input and how to reproduce
# and keep it. Nightly Rust and cargo-fuzz (pinned) are installed when missing. Not part of
# `make test`, which runs every kept input through the targets on stable (fuzz-targets/).
FUZZ_SECONDS ?= 60
fuzz:
	@FUZZ_SECONDS=$(FUZZ_SECONDS) NRO_CACHE=$(NRO_CACHE) hack/fuzz.sh

# The oldest supported Kubernetes release, proven by `make test-oldest-k8s`; the newest patch
# of that minor on the Go module proxy. docs/src/install.md says which versions are supported.
OLDEST_K8S := v1.30.14

# Its local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl; no kubelet) built from Kubernetes' own Go modules by testenv/hack/build.sh, from a
# module generated in target/oldest-k8s/module, into target/oldest-k8s/bin; each binary kept in
# $NRO_CACHE/oldest-k8s/bin/, so it is built once (testenv/hack/build-oldest-k8s.sh).
testenv-oldest-k8s:
	@testenv/hack/build-oldest-k8s.sh $(OLDEST_K8S) target/oldest-k8s

# The protocol and security tests on that control plane, and the test that its API server and
# kubectl are that release. Not part of `make test`: the first build of the control plane
# compiles for about 16 minutes on 2 cores (measured beside a cold CI run), then the tests take
# 1.5 minutes once `make bins` is built (docs/src/development.md, "The oldest supported
# Kubernetes"). Two commands: the filter after -- would also filter kubectl_version's tests away.
test-oldest-k8s: testenv-oldest-k8s bins
	@status=0; \
	export TESTENV_BIN=$(CURDIR)/target/oldest-k8s/bin TESTENV_EXPECT_VERSION=$(OLDEST_K8S); \
	$(CARGO) test --locked -p testenv --test kubectl_version || status=1; \
	$(CARGO) test --locked --no-fail-fast -p e2e --test scenarios -- protocol:: security:: || status=1; \
	exit $$status

# What the tests need, built at once where it can be: the Go build of testenv/bin, cargo's
# builds and the agent-as-a-service guests' image (debootstrap) each leave the CPU idle for
# parts of their time (downloads, links, package installs), so side by side they finish
# minutes sooner on a fresh machine than one after the other. The host's package installs go
# first: apt allows one at a time, and `make images` uses apt too. `release` assembles
# target/dist/<version>/ anew, which the publish, Quickstart and real-node tests install from, so
# they never test a release older than the code.
BUILD_JOBS ?= 8
test-inputs:
	@rm -rf target/ci-phases
	@$(MAKE) --no-print-directory vm-tools
	@$(MAKE) --no-print-directory cross-tools
	@$(MAKE) --no-print-directory faketime-tools
	@$(MAKE) --no-print-directory -j$(BUILD_JOBS) testenv lint static bins vm-image images chart release docs-tools deny-tools

# libfaketime from Debian's packages, when missing: the clock-skew tests
# (e2e/tests/clock_skew.rs) run controllers whose wall clock is minutes off.
faketime-tools:
	@$(PHASE) hack/install-faketime.sh

# The VM tier's host tools (QEMU, debootstrap, socat) from Debian's packages, when missing.
vm-tools:
	@$(PHASE) vm/image/install-tools.sh

# The guests' Debian base image, built once (about a minute) and cached in
# ~/.cache/node-reboot-operator/vm-image/.
vm-image: vm-tools
	@$(PHASE) vm/image/build.sh

# Real reboots: Debian VMs under QEMU with the static agent, the controller on the host
# (docs/src/development.md, "Real reboots in virtual machines"). VM_ACCEL=kvm where /dev/kvm
# works.
vm-e2e: testenv static bins vm-image
	$(CARGO) test --locked -p vmtest --lib --test vm_e2e -- --nocapture

# The real nodes' disk image (kubelet, containerd, runc, CNI, D-Bus, logind, AppArmor), built
# once (3-5 minutes) and cached under ~/.cache/node-reboot-operator/node-image/.
node-image: testenv vm-tools
	@$(PHASE) vm/node/image/build.sh

# Real nodes: three guests join the local control plane, the release of `make release` is
# published to a local registry (`make publish`), verified with cosign and installed from it
# with helm, the guests pulling its images, and every node is drained and rebooted for real
# (docs/src/development.md, "Real nodes"); then the signal and syscall methods, one node each, which
# `make test` leaves out (the tier's ignored test). Logs in target/node-e2e/run/.
node-e2e: testenv images release node-image bins
	$(CARGO) test --locked -p vmtest --test node_e2e -- --nocapture --ignored

# A control plane in the foreground; prints KUBECONFIG=<path> once ready; Ctrl-C stops it.
# The local control plane alone (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl): what `make cluster`, `make sandbox` and `make demo` start. The rest of testenv/bin
# (the real nodes' programs, Prometheus, helm, Toxiproxy) is built when a target needs it.
testenv-control-plane:
	@testenv/hack/build.sh --control-plane-only

cluster: testenv-control-plane
	@$(CARGO) run --quiet --locked -p testenv --bin testenv-cluster -- $(ARGS)

# A control plane, simulated nodes with real agents and the real controller; prints
# KUBECONFIG=<path>. ARGS="--nodes N --max-unavailable K --reboot-seconds T".
sandbox: testenv-control-plane
	@$(CARGO) build --locked -p agent -p controller --bins
	@$(CARGO) run --quiet --locked -p nodesim --bin sandbox -- $(ARGS)

# A rolling reboot of a simulated fleet, shown live, with a summary. ARGS="--nodes 12
# --max-unavailable 3 --reboot-seconds 3 --keep".
demo:
	@echo "demo: building what is missing. The first build of the local control plane compiles"
	@echo "demo: Kubernetes from source and takes 10-25 minutes on 2 cores; later runs start at once."
	@testenv/hack/build.sh --control-plane-only
	@$(CARGO) build --locked -p agent -p controller --bins
	@$(CARGO) run --quiet --locked -p demo --bin demo -- $(ARGS)

# The benchmark of the performance targets (docs/src/performance.md): a table on stdout,
# target/bench/report.json. ARGS=--quick is the reduced mode that `make test` runs
# (bench/tests/quick.rs).
bench: testenv
	$(CARGO) run --release --locked -p bench -- $(ARGS)

# A long soak, not part of `make test`: 50 simulated nodes under random reboot requests,
# cancels and faults (leaders killed and frozen, agents killed, API server restarts,
# administrators' cordons) for DURATION, watched by the chaos tests' independent observer;
# prints the figures (target/soak/report.json too) and exits non-zero on any violation,
# request lost or node left cordoned. ARGS: see `cargo run -p soak -- --help` (SOAK_SEED
# repeats a run's random choices).
DURATION ?= 30m
soak: testenv bins faketime-tools
	$(CARGO) run --quiet --locked -p soak -- --duration $(DURATION) $(ARGS)

# The docs: the mdBook site of docs/, built into target/book/. `make test` checks it
# (e2e/tests/docs.rs: the book builds, its links and anchors resolve, the commands in it name
# real flags and chart values, the generated parts agree with the programs). mdBook comes from
# the Rust crate registry, pinned, built once (about 4 minutes on 2 cores) into
# $NRO_CACHE/mdbook-<version>/ (default ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator);
# the tests find it through MDBOOK.
MDBOOK_VERSION := 0.5.4
NRO_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/node-reboot-operator
MDBOOK ?= $(NRO_CACHE)/mdbook-$(MDBOOK_VERSION)/bin/mdbook
export MDBOOK

docs-tools:
	@$(PHASE) env MDBOOK_VERSION=$(MDBOOK_VERSION) MDBOOK_ROOT=$(NRO_CACHE)/mdbook-$(MDBOOK_VERSION) hack/install-mdbook.sh

docs: docs-tools
	@$(MDBOOK) build docs

# Rewrites the generated parts of the docs (the flags of both programs, the chart's values,
# the alerts' runbooks) and the chart's README from the debug binaries, the chart and the
# alert rules.
docs-reference: bins
	DOCS_REFERENCE_WRITE=1 $(CARGO) test --locked -p e2e --test scenarios -- docs::the_generated_parts

# Rewrites charts/node-reboot-operator/README.md (what `helm show readme` shows) from
# Chart.yaml, values.yaml and values.schema.json.
chart-readme:
	DOCS_REFERENCE_WRITE=1 $(CARGO) test --locked -p e2e --test scenarios -- docs::the_generated_parts_of_the_chart_readme

# The RebootPool CustomResourceDefinition, generated from its type (common::pool::RebootPool)
# into the chart's crds/rebootpools.yaml and manifests/rebootpools-crd.yaml; the chart-package
# crate's test fails while either differs from what the type generates.
crd:
	$(CARGO) run --quiet --locked -p chart-package --bin crd

# What `kubectl apply -k manifests/` installs, rendered.
manifests: testenv
	@testenv/bin/kubectl kustomize manifests/
