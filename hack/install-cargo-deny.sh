#!/usr/bin/env bash
# Installs cargo-deny CARGO_DENY_VERSION from the Rust crate registry into CARGO_DENY_ROOT (its
# bin/cargo-deny), once: a version already there is kept. Built with --locked (the crate's own
# Cargo.lock), into a temporary root first, so that an interrupted build leaves nothing that
# looks installed. `make lint` runs it on deny.toml's licenses, bans and sources.
set -euo pipefail
: "${CARGO_DENY_VERSION:?}" "${CARGO_DENY_ROOT:?}"
bin=$CARGO_DENY_ROOT/bin/cargo-deny
if [ -x "$bin" ] && "$bin" --version | grep -qx "cargo-deny $CARGO_DENY_VERSION"; then
  exit 0
fi
command -v cargo >/dev/null || { echo "deny-tools: cargo is not installed; cargo-deny is built with it" >&2; exit 1; }
echo "deny-tools: building cargo-deny $CARGO_DENY_VERSION from the crate registry into $CARGO_DENY_ROOT (once, a few minutes)"
start=$SECONDS
tmp=$CARGO_DENY_ROOT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
cargo install cargo-deny --version "$CARGO_DENY_VERSION" --locked --root "$tmp" --quiet
rm -rf "$CARGO_DENY_ROOT"
mkdir -p "$(dirname "$CARGO_DENY_ROOT")"
mv "$tmp" "$CARGO_DENY_ROOT"
echo "deny-tools: $("$bin" --version) built in $((SECONDS - start))s"
