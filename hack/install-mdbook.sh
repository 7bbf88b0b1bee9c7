#!/usr/bin/env bash
# Installs mdBook MDBOOK_VERSION from the Rust crate registry into MDBOOK_ROOT (its bin/mdbook),
# once: a version already there is kept. Built with --locked (the crate's own Cargo.lock) and
# without the `serve` and `watch` features, which `make docs` does not use; into a temporary
# root first, so that an interrupted build leaves nothing that looks installed.
set -euo pipefail
: "${MDBOOK_VERSION:?}" "${MDBOOK_ROOT:?}"
bin=$MDBOOK_ROOT/bin/mdbook
if [ -x "$bin" ] && "$bin" --version | grep -qx "mdbook v$MDBOOK_VERSION"; then
  exit 0
fi
command -v cargo >/dev/null || { echo "docs: cargo is not installed; mdBook is built with it" >&2; exit 1; }
echo "docs: building mdBook $MDBOOK_VERSION from the crate registry into $MDBOOK_ROOT (once, a few minutes)"
tmp=$MDBOOK_ROOT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --features search \
  --root "$tmp" --quiet
rm -rf "$MDBOOK_ROOT"
mkdir -p "$(dirname "$MDBOOK_ROOT")"
mv "$tmp" "$MDBOOK_ROOT"
"$bin" --version
