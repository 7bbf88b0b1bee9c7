#!/usr/bin/env bash
# make publish REGISTRY=<host[:port]/path> [VERSION=<version>]: pushes the release that
# `make release` wrote to target/dist/<version>/ (DIST=<dir> to read another folder) and signs it:
#   <REGISTRY>/reboot-agent:<version>, <REGISTRY>/reboot-controller:<version>  each whole OCI
#       image index of its archive (both platforms and their SBOM attestations), copied by oras
#   oci://<REGISTRY>/charts/node-reboot-operator, version <version>          by `helm push`
# then signs both indexes and the chart by digest with cosign: with COSIGN_KEY (and
# COSIGN_PASSWORD) by that key, without a transparency log (the key is the trust); without
# it keyless (OIDC, Fulcio and Rekor: the release workflow's identity).
# Environment: REGISTRY_USERNAME and REGISTRY_PASSWORD log in (else the credentials of
# `docker login` / `oras login` and `helm registry login` are used); REGISTRY_CA_FILE is a
# private CA to trust beside the system's; TESTENV_BIN is where oras, helm and cosign are
# (default testenv/bin, `make testenv`).
# Idempotent: a tag that already holds the same digest is left as it is and a signature that
# the key already made is not made again; a tag that holds something else is refused (a
# published version never changes). Prints what it pushed, with digests.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "publish: $*" >&2; }
usage() { say "$*"; exit 2; }
fail() { say "$*"; exit 1; }

registry=${REGISTRY:-}
registry=${registry%/}
[ -n "$registry" ] || usage "REGISTRY is not set: run \`make publish REGISTRY=<host[:port]/path>\`, e.g. REGISTRY=ghcr.io/node-reboot-operator"
case $registry in
  *://*) usage "REGISTRY=$registry: give the registry without a scheme, as in REGISTRY=${registry#*://}" ;;
esac
host=${registry%%/*}
version=${VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)}
[ -n "$version" ] || fail "cannot read the workspace's version from Cargo.toml; set VERSION"
dist=${DIST:-target/dist/$version}
chart=node-reboot-operator-$version.tgz
for file in reboot-agent.oci.tar reboot-controller.oci.tar images.txt "$chart"; do
  [ -f "$dist/$file" ] || fail "$dist/$file: no such file; build the release of $version first with \`make release\`"
done

bin=${TESTENV_BIN:-testenv/bin}
for tool in oras helm cosign; do
  [ -x "$bin/$tool" ] || fail "missing $bin/$tool: build it with \`make testenv\` (or point TESTENV_BIN at a directory that has it)"
done
oras=$bin/oras helm=$bin/helm cosign=$bin/cosign

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A private CA: trusted beside the system's by every tool (all three are Go programs, which
# read SSL_CERT_FILE), so that no tool's own flag is needed.
if [ -n "${REGISTRY_CA_FILE:-}" ]; then
  [ -r "$REGISTRY_CA_FILE" ] || usage "REGISTRY_CA_FILE=$REGISTRY_CA_FILE: no such readable file; give the PEM of the registry's CA"
  for system in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
    if [ -r "$system" ]; then cat "$system" >> "$tmp/ca.pem"; break; fi
  done
  cat "$REGISTRY_CA_FILE" >> "$tmp/ca.pem"
  export SSL_CERT_FILE=$tmp/ca.pem
fi

# Why a tool failed, in the words of the fix; $1 says what was being done, $2 what it printed.
explain() {
  local what=$1 said=$2 fix
  # A network error first: its message names the address, whose port may hold "401" or "403".
  case $said in
    *"connection refused"*|*"no such host"*|*"i/o timeout"*|*"network is unreachable"*|*"no route to host"*|*"server misbehaving"*|*"context deadline exceeded"*)
      fix="cannot reach the registry $host: check REGISTRY (host[:port]/path) and that the registry is up" ;;
    *unauthorized*|*Unauthorized*|*"401 "*|*"authentication required"*|*denied*|*forbidden*|*Forbidden*|*"403 "*)
      fix="the registry $host refused the credentials${REGISTRY_USERNAME:+ of $REGISTRY_USERNAME}: check REGISTRY_USERNAME and REGISTRY_PASSWORD (a token that may push packages)" ;;
    *x509*|*certificate*)
      fix="the certificate of $host is not trusted: set REGISTRY_CA_FILE to the PEM of its CA" ;;
    *) fix="see what it said above" ;;
  esac
  say "cannot $what: $fix"
  say "it said: $(printf '%s' "$said" | tail -n 5)"
  exit 1
}

# Runs a tool; its output on success, else the reason and the fix.
run() {
  local what=$1 out
  shift
  out=$("$@" 2>&1) || explain "$what" "$out"
  printf '%s\n' "$out"
}

# One credentials file for all three (oras and helm take --registry-config, cosign
# DOCKER_CONFIG), so that the user's own are neither used nor changed.
registry_config=() to_registry_config=()
if [ -n "${REGISTRY_USERNAME:-}" ]; then
  [ -n "${REGISTRY_PASSWORD:-}" ] || usage "REGISTRY_USERNAME is set but REGISTRY_PASSWORD is not: set both, or neither to use the credentials of \`docker login\`"
  registry_config=(--registry-config "$tmp/config.json")
  to_registry_config=(--to-registry-config "$tmp/config.json")
  export DOCKER_CONFIG=$tmp
  run "log in to $host as $REGISTRY_USERNAME" "$oras" login "${registry_config[@]}" \
    --username "$REGISTRY_USERNAME" --password-stdin "$host" <<< "$REGISTRY_PASSWORD" > /dev/null
fi

# The digest a reference points to, or nothing when it does not exist; other errors stop.
remote_digest() {
  local out
  if out=$("$oras" manifest fetch "${registry_config[@]}" --descriptor "$1" 2>&1); then
    printf '%s\n' "$out" | sed -n 's/.*"digest": *"\(sha256:[0-9a-f]*\)".*/\1/p' | head -n1
  else
    case $out in
      *"not found"*|*MANIFEST_UNKNOWN*|*NAME_UNKNOWN*|*404*) ;;
      *) explain "read $1" "$out" ;;
    esac
  fi
}

# Refuses to change a published version; true when $1 already holds $2.
already_there() {
  local ref=$1 want=$2 have
  have=$(remote_digest "$ref") || exit 1
  [ -n "$have" ] || return 1
  [ "$have" = "$want" ] || fail "$ref already holds $have, not $want: a published version never changes; publish a new version (VERSION=...)"
}

# The digest of an image of images.txt, by its name without registry and tag.
listed_digest() {
  awk -F'\t' -v name="$1" '{ n = $1; sub(/:[^:\/]*$/, "", n); sub(/.*\//, "", n) } n == name { print $3 }' "$dist/images.txt" | head -n1
}

pushed=()
for image in reboot-agent reboot-controller; do
  digest=$(listed_digest "$image")
  [ -n "$digest" ] || fail "$dist/images.txt names no $image; build the release again with \`make release\`"
  ref=$registry/$image:$version
  if already_there "$ref" "$digest"; then
    say "$ref is already $digest"
  else
    run "push $image to $ref" "$oras" cp "${to_registry_config[@]}" --from-oci-layout \
      "$dist/$image.oci.tar@$digest" "$ref" > /dev/null
    have=$(remote_digest "$ref") || exit 1
    [ "$have" = "$digest" ] || fail "$ref is $have after the copy, not $digest of $dist/$image.oci.tar"
  fi
  pushed+=("$registry/$image@$digest")
done

# The chart: its manifest's layer is the archive itself, so the same archive is the same chart.
chart_ref=$registry/charts/node-reboot-operator:$version
chart_sha=sha256:$(sha256sum "$dist/$chart" | cut -d' ' -f1)
chart_digest=$(remote_digest "$chart_ref")
if [ -n "$chart_digest" ]; then
  manifest=$(run "read $chart_ref" "$oras" manifest fetch "${registry_config[@]}" "$chart_ref")
  case $manifest in
    *"$chart_sha"*) say "$chart_ref is already $chart_digest" ;;
    *) fail "$chart_ref already holds another chart ($chart_digest): a published version never changes; publish a new version (VERSION=...)" ;;
  esac
else
  said=$(run "push the chart to oci://$registry/charts" "$helm" push "${registry_config[@]}" "$dist/$chart" "oci://$registry/charts")
  chart_digest=$(printf '%s\n' "$said" | sed -n 's/^Digest: *\(sha256:[0-9a-f]*\).*/\1/p' | head -n1)
  [ -n "$chart_digest" ] || chart_digest=$(remote_digest "$chart_ref")
  [ -n "$chart_digest" ] || fail "helm push named no digest for $chart_ref: $said"
fi
pushed+=("$registry/charts/node-reboot-operator@$chart_digest")

# Signs each by digest: by COSIGN_KEY without a transparency log (none is needed to trust a
# key, and a private registry's release must not depend on Rekor), or keyless.
if [ -n "${COSIGN_KEY:-}" ]; then
  run "read the public key of COSIGN_KEY=$COSIGN_KEY (is COSIGN_PASSWORD right?)" \
    "$cosign" public-key --key "$COSIGN_KEY" > "$tmp/cosign.pub"
fi
for ref in "${pushed[@]}"; do
  if [ -n "${COSIGN_KEY:-}" ]; then
    if "$cosign" verify --key "$tmp/cosign.pub" --insecure-ignore-tlog=true "$ref" > /dev/null 2>&1; then
      say "$ref is already signed by that key"
    else
      run "sign $ref with COSIGN_KEY" "$cosign" sign --yes --key "$COSIGN_KEY" \
        --tlog-upload=false --use-signing-config=false "$ref" > /dev/null
    fi
  else
    run "sign $ref keyless (OIDC; set COSIGN_KEY for a key)" "$cosign" sign --yes "$ref" > /dev/null
  fi
done

for ref in "${pushed[@]}"; do
  echo "published and signed: $ref"
done
