#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl), the node's programs for the real-node tier (kubelet, containerd and its runc shim,
# the CNI plugins), Prometheus, promtool, Alertmanager, helm (4 and 3), toxiproxy-server, mailpit, the registry,
# oras, cosign and actionlint into testenv/bin/. A binary is
# rebuilt only when what it is built from changed (go.mod and go.sum for the control plane and
# the kubelet, the pinned version for the others), so a warm `make test` spends no time here,
# and pinning a new tool does not rebuild the control plane.
# Every binary is also kept outside the checkout, in $NRO_CACHE/bin/ (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator), named by the same key, so a fresh
# clone on the same machine copies it instead of compiling it. `rm -rf` that folder to clear it.
#
# Options, for another Kubernetes release (testenv/hack/build-oldest-k8s.sh builds the oldest
# supported one with them):
#   --module DIR   the Go module to build from (default testenv/): its go.mod pins the
#                  release and has a cmd/etcd like testenv/'s
#   --out DIR      where the binaries go (default testenv/bin)
#   --cache DIR    where they are kept outside the checkout (default $NRO_CACHE/bin); give each
#                  module its own, as a new build of a binary drops its older copies there
#   --control-plane-only   etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
#                  kubectl only (no kubelet, containerd, CNI plugins, Prometheus or helm)
set -euo pipefail
module_dir='' out_dir='' cache_dir='' control_plane_only=''
while [ $# -gt 0 ]; do
  case $1 in
    --module|--out|--cache)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "testenv: $1 needs a directory" >&2; exit 2; }
      [ "$1" = --module ] || mkdir -p "$2"
      [ -d "$2" ] || { echo "testenv: $1 $2: no such directory" >&2; exit 2; }
      dir=$(cd "$2" && pwd)
      case $1 in --module) module_dir=$dir ;; --out) out_dir=$dir ;; --cache) cache_dir=$dir ;; esac
      shift 2 ;;
    --control-plane-only) control_plane_only=1; shift ;;
    *) echo "testenv: unknown argument '$1'; the options are --module DIR, --out DIR, --cache DIR and --control-plane-only" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
module_name=testenv/ out_name=testenv/bin
if [ -n "$module_dir" ]; then cd "$module_dir"; module_name=$module_dir/; fi
[ -z "$out_dir" ] || out_name=$out_dir
out=${out_dir:-$PWD/bin}
[ -f go.mod ] || { echo "testenv: ${module_name} has no go.mod; generate it with testenv/hack/gen-gomod.sh" >&2; exit 1; }

release=$(sed -n 's/^\s*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' go.mod | head -n1)
etcd_release=$(sed -n 's/^\s*go.etcd.io\/etcd\/server\/v3 \(v[0-9.]*\)$/\1/p' go.mod | head -n1)
[ -n "$release" ] || { echo "testenv: cannot read the k8s.io/kubernetes version from ${module_name}go.mod" >&2; exit 1; }
command -v go >/dev/null || { echo "testenv: 'go' is not installed; install Go >= $(sed -n 's/^go //p' go.mod) and run 'make testenv'" >&2; exit 1; }

major_minor=${release#v}; major=${major_minor%%.*}; minor=${major_minor#*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w \
 -X ${pkg}.gitVersion=${release} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} \
 -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=${release} \
 -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

# What each binary is built from; bump build_format when the way they are built changes.
build_format=2
control_plane_stamp=$( (echo "$build_format $ldflags"; cat go.mod go.sum cmd/etcd/main.go) | sha256sum | cut -c1-16)
stamp_of() { # $1: a target or tool spec
  case $1 in
    *@*|without-ui:*) echo "$build_format $1" | sha256sum | cut -c1-16 ;;
    *) echo "$control_plane_stamp" ;;
  esac
}
cache=${cache_dir:-${NRO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator}/bin}
mkdir -p "$out" "$cache"
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod

targets=(etcd:./cmd/etcd kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver
  kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager
  kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler kubectl:k8s.io/kubernetes/cmd/kubectl
  kubelet:k8s.io/kubernetes/cmd/kubelet)
# Prometheus, its promtool and Alertmanager for the health-gate and alert tests, helm for
# the chart's tests, and Toxiproxy (the fault proxy the network-fault tests put between each
# program and the API server), each built from its
# own module: their go.mod, not ours, picks their dependencies. Prometheus builds with
# `go install pkg@version` (its web UI is left out without the builtinassets tag).
# Alertmanager's module lacks the UI bundle it embeds (ui/app/dist is built by npm in its
# release process), so it is built from a copy of its module with a placeholder page there.
prometheus_version=v0.316.0  # Prometheus 3.16
alertmanager_version=v0.34.1
helm_version=v4.3.1
toxiproxy_version=v2.12.0
# Mailpit: the real SMTP server the e-mail notification test sends to, read back by its API.
mailpit_version=v1.33.1
# The release tier: a real OCI registry (CNCF Distribution, the reference implementation that
# ghcr.io, Harbor and others speak the API of), oras to push the images' OCI archives with their
# platforms and SBOMs, cosign to sign and verify them, Helm 3 beside Helm 4 for the Quickstart
# test, and actionlint for the GitHub workflows.
registry_version=v3.1.2
oras_version=v1.3.6
cosign_version=v3.1.3
helm3_version=v3.22.0
actionlint_version=v1.7.12
# The real nodes' runtime (vm/node): containerd 2.x, because kubelet v1.38 drops the 1.x
# fallback that Debian's containerd 1.6/1.7 needs; static (no cgo) without the snapshotters
# that need C. runc needs cgo and libseccomp, so the guests take Debian's.
containerd_version=v2.4.2
cni_version=v1.9.1
tools=(containerd:github.com/containerd/containerd/v2/cmd/containerd@${containerd_version}
  containerd-shim-runc-v2:github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${containerd_version}
  ctr:github.com/containerd/containerd/v2/cmd/ctr@${containerd_version}
  bridge:github.com/containernetworking/plugins/plugins/main/bridge@${cni_version}
  host-local:github.com/containernetworking/plugins/plugins/ipam/host-local@${cni_version}
  loopback:github.com/containernetworking/plugins/plugins/main/loopback@${cni_version}
prometheus:github.com/prometheus/prometheus/cmd/prometheus@${prometheus_version}
  promtool:github.com/prometheus/prometheus/cmd/promtool@${prometheus_version}
  alertmanager:without-ui:github.com/prometheus/alertmanager@${alertmanager_version}:./cmd/alertmanager
  helm:helm.sh/helm/v4/cmd/helm@${helm_version}
  toxiproxy-server:github.com/Shopify/toxiproxy/v2/cmd/server@${toxiproxy_version}
  mailpit:github.com/axllent/mailpit@${mailpit_version}
  registry:github.com/distribution/distribution/v3/cmd/registry@${registry_version}
  oras:oras.land/oras/cmd/oras@${oras_version}
  cosign:github.com/sigstore/cosign/v3/cmd/cosign@${cosign_version}
  helm3:helm.sh/helm/v3/cmd/helm@${helm3_version}
  actionlint:github.com/rhysd/actionlint/cmd/actionlint@${actionlint_version})
if [ -n "$control_plane_only" ]; then
  control_plane=()
  for t in "${targets[@]}"; do [ "${t%%:*}" = kubelet ] || control_plane+=("$t"); done
  targets=("${control_plane[@]}") tools=()
fi

todo=()
for t in "${targets[@]}" "${tools[@]}"; do
  name=${t%%:*}
  stamp=$(stamp_of "${t#*:}")
  if [ -x "$out/$name" ] && [ "$(cat "$out/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then continue; fi
  if [ -x "$cache/$name-$stamp" ]; then
    cp "$cache/$name-$stamp" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
    echo "$stamp" > "$out/.$name.stamp"
    echo "testenv: $name from the cache $cache"
    continue
  fi
  todo+=("$t")
done
if [ ${#todo[@]} -eq 0 ]; then
  if [ -n "$control_plane_only" ]; then
    echo "testenv: control plane ${release} (etcd ${etcd_release}) is up to date in ${out_name}"
  else
    echo "testenv: control plane and kubelet ${release}, containerd ${containerd_version}, CNI plugins ${cni_version}, Prometheus, promtool, Alertmanager, helm, toxiproxy-server, mailpit, registry, oras, cosign, helm3 and actionlint are up to date in ${out_name}"
  fi
  exit 0
fi
if [ -n "$control_plane_only" ]; then
  echo "testenv: building ${#todo[@]} binaries (Kubernetes ${release}, etcd ${etcd_release}) into ${out_name}."
else
  echo "testenv: building ${#todo[@]} binaries (Kubernetes ${release}, etcd ${etcd_release}, Prometheus ${prometheus_version}, Alertmanager ${alertmanager_version}, helm ${helm_version}, Toxiproxy ${toxiproxy_version}, Mailpit ${mailpit_version}, registry ${registry_version}, oras ${oras_version}, cosign ${cosign_version}, Helm ${helm3_version}, actionlint ${actionlint_version}) into ${out_name}."
fi
echo "testenv: the first build downloads the modules and compiles for 15-30 minutes on 2 cores; later builds are cached."
i=0
for t in "${todo[@]}"; do
  i=$((i + 1)); name=${t%%:*}; target=${t#*:}
  start=$SECONDS
  echo "testenv: [$i/${#todo[@]}] $name ..."
  case $target in
    without-ui:*)
      spec=${target#without-ui:}; module=${spec%%:*}; pkg=${spec#*:}
      src=$(GOFLAGS= go mod download -json "$module" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
      [ -d "$src" ] || { echo "testenv: cannot download $module" >&2; exit 1; }
      work=$(mktemp -d)
      cp -r "$src/." "$work/"
      chmod -R u+w "$work"
      mkdir -p "$work/ui/app/dist"
      echo '<!doctype html><title>Alertmanager</title><p>The web UI is not built here; the API is at /api/v2/.' > "$work/ui/app/dist/index.html"
      (cd "$work" && GOFLAGS= go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "$pkg")
      mv "$out/$name.tmp" "$out/$name"
      rm -rf "$work" ;;
    *@*)
      gobin=$(mktemp -d)
      # remove_all_sd: none of Prometheus' service discoveries (cloud SDKs, client-go), which
      # are most of its compile time; the tests scrape nothing.
      # containerd: leave out the snapshotters that need cgo (btrfs, devmapper, zfs).
      GOBIN=$gobin GOFLAGS= go install -trimpath -tags "remove_all_sd no_btrfs no_devmapper no_zfs" \
        -ldflags "-s -w" "$target"
      # go install names the binary after its package's folder (toxiproxy's is cmd/server).
      pkg_path=${target%@*}
      mv "$gobin/${pkg_path##*/}" "$out/$name"
      rm -rf "$gobin" ;;
    *)
      ldf=$ldflags
      [ "$name" = etcd ] && ldf="-s -w"
      go build -trimpath -ldflags "$ldf" -o "$out/$name.tmp" "$target"
      mv "$out/$name.tmp" "$out/$name" ;;
  esac
  stamp=$(stamp_of "$target")
  echo "$stamp" > "$out/.$name.stamp"
  rm -f "$cache/$name"-*
  cp "$out/$name" "$cache/$name-$stamp.tmp" && mv "$cache/$name-$stamp.tmp" "$cache/$name-$stamp"
  echo "testenv: [$i/${#todo[@]}] $name built in $((SECONDS - start))s"
done
echo "testenv: done; binaries are in ${out_name}"
