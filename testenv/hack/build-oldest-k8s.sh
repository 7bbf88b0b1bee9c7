#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl) of another Kubernetes release than testenv/'s, the oldest supported one for
# `make test-oldest-k8s`, from Kubernetes' own Go modules, the way testenv/ builds its own.
# Usage: testenv/hack/build-oldest-k8s.sh vMAJOR.MINOR.PATCH DIR
#
# DIR/module/ is that release's Go module, generated: the go.mod of testenv/hack/gen-gomod.sh
# (that release's staging modules), testenv/'s tools.go and cmd/etcd, and `go mod tidy`, which
# picks the etcd server that release's own go.mod pins. It is generated again only when one of
# those inputs changes. testenv/hack/build.sh then builds DIR/bin/ from it, and keeps each
# binary in $NRO_CACHE/oldest-k8s/bin/ (default ${XDG_CACHE_HOME:-$HOME/.cache}/
# node-reboot-operator) keyed by what it is built from, so a second run, even after
# `cargo clean`, builds nothing. testenv/go.mod and testenv/bin/ are left alone.
set -euo pipefail
usage="usage: build-oldest-k8s.sh vMAJOR.MINOR.PATCH DIR (for example v1.30.14 target/oldest-k8s)"
[ $# -eq 2 ] || { echo "oldest-k8s: $usage" >&2; exit 2; }
release=$1 dir=$2
[[ $release =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "oldest-k8s: '$release' is not a release like v1.30.14; $usage" >&2; exit 2; }
command -v go >/dev/null || { echo "oldest-k8s: 'go' is not installed; install Go (see testenv/go.mod) and run it again" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
hack=$(cd "$(dirname "$0")" && pwd)
testenv=$(dirname "$hack")
module=$dir/module
cache=${NRO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator}/oldest-k8s/bin

inputs=$( (echo "$release"; cat "$hack/gen-gomod.sh" "$testenv/tools.go" "$testenv/cmd/etcd/main.go") | sha256sum | cut -c1-16)
if [ -f "$module/go.sum" ] && [ "$(cat "$module/.inputs" 2>/dev/null)" = "$inputs" ]; then
  echo "oldest-k8s: the Go module of Kubernetes $release in $module is up to date"
else
  echo "oldest-k8s: generating the Go module of Kubernetes $release in $module (go mod tidy downloads its modules)"
  rm -rf "$module"
  mkdir -p "$module/cmd/etcd"
  "$hack/gen-gomod.sh" "$release" "$module"
  cp "$testenv/tools.go" "$module/"
  cp "$testenv/cmd/etcd/main.go" "$module/cmd/etcd/"
  (cd "$module" && GOWORK=off GOFLAGS=-mod=mod go mod tidy)
  echo "$inputs" > "$module/.inputs"
fi

"$hack/build.sh" --module "$module" --out "$dir/bin" --cache "$cache" --control-plane-only

# The binaries must say the release they are built from: the tests trust them to.
version=$("$dir/bin/kube-apiserver" --version)
[ "$version" = "Kubernetes $release" ] || {
  echo "oldest-k8s: $dir/bin/kube-apiserver --version says '$version', not 'Kubernetes $release'; remove $dir and $cache and build again" >&2
  exit 1
}
echo "oldest-k8s: $dir/bin/kube-apiserver --version: $version"
