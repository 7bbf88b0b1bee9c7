#!/usr/bin/env bash
# One phase of `make test`: runs the command after `--`, its output shown as it comes, and
# appends to target/ci-phases/<name> when it started and ended, its exit status, and whether
# its output shows a build or an install (a Rust crate compiled, a Go tool or a guest image
# built, a Debian package set up) or none (all of it came from a cache). hack/phase-table.sh
# prints the table of every phase at the end of `make test`.
set -uo pipefail
name=$1
shift
[ "${1:-}" = "--" ] && shift
dir=target/ci-phases
mkdir -p "$dir"
log=$(mktemp)
start=$(date +%s)
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
end=$(date +%s)
if grep -qE '^\s*Compiling |testenv: building|^Setting up |^Unpacking |^I: Retrieving|go: downloading|^\s*Installing ' "$log"; then
  cached=no
else
  cached=yes
fi
rm -f "$log"
echo "$name $start $end $status $cached" >> "$dir/$name"
exit "$status"
