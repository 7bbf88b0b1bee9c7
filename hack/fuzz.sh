#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (or those named in FUZZ_TARGETS) for FUZZ_SECONDS each
# (default 60) with libFuzzer, starting from its kept corpus (fuzz/corpus/<target>/, read
# only: what the run finds interesting goes to target/fuzz-corpus/<target>/). Fails when a
# target crashed, naming the input (fuzz/artifacts/<target>/) and how to reproduce and keep it.
#
# cargo-fuzz needs Rust nightly: installed here when rustup has none, with the minimal
# profile; cargo-fuzz itself is built from the crate registry, pinned (CARGO_FUZZ_VERSION),
# once, into $NRO_CACHE/cargo-fuzz-<version>/. The targets are built without a sanitizer:
# the workspace forbids unsafe code, so AddressSanitizer would only slow them down; with
# debug assertions, so that an arithmetic overflow is a crash, as in the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FUZZ_SECONDS must be a positive whole number of seconds, not '$seconds'" >&2; exit 2; }
version=${CARGO_FUZZ_VERSION:-0.13.1}
cache=${NRO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator}
root=$cache/cargo-fuzz-$version

command -v rustup >/dev/null || { echo "fuzz: rustup is not installed; cargo-fuzz needs Rust nightly through it" >&2; exit 1; }
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: installing Rust nightly (minimal profile), which cargo-fuzz needs"
  rustup toolchain install nightly --profile minimal
fi
if ! [ -x "$root/bin/cargo-fuzz" ] || ! "$root/bin/cargo-fuzz" --version | grep -qx "cargo-fuzz $version"; then
  echo "fuzz: building cargo-fuzz $version from the crate registry into $root (once, a few minutes)"
  tmp=$root.tmp.$$
  trap 'rm -rf "$tmp"' EXIT
  cargo install cargo-fuzz --version "$version" --locked --root "$tmp" --quiet
  rm -rf "$root" && mv "$tmp" "$root"
fi
export PATH=$root/bin:$PATH

targets=${FUZZ_TARGETS:-$(basename -s .rs fuzz/fuzz_targets/*.rs | tr '\n' ' ')}
flags=(--sanitizer none --debug-assertions --codegen-units 16 --target-dir target/fuzz)
cargo +nightly fuzz build "${flags[@]}"
mkdir -p target/fuzz-logs
failed=()
for t in $targets; do
  [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "fuzz: no target $t (fuzz/fuzz_targets/$t.rs)" >&2; failed+=("$t"); continue; }
  work=target/fuzz-corpus/$t
  mkdir -p "$work" "fuzz/artifacts/$t"
  log=target/fuzz-logs/$t.log
  # -timeout: an input that takes 10 s is a hang worth a report; -rss_limit_mb likewise.
  if cargo +nightly fuzz run "${flags[@]}" "$t" "$work" "fuzz/corpus/$t" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    echo "fuzz: ok     $t: ${runs:-?} inputs in $seconds s, corpus $(find "$work" "fuzz/corpus/$t" -type f | wc -l) files"
  else
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
    echo "fuzz: FAILED $t (log: $log):"
    # The panic and its message, or libFuzzer's own verdict (a timeout, out of memory).
    { grep -A1 "panicked at" "$log" || grep -E "^==[0-9]+== ERROR|^SUMMARY" "$log"; } | head -n 6 | sed 's/^/  /'
    if [ -n "$artifact" ]; then
      echo "  the input: $artifact"
      echo "  reproduce: cargo +nightly fuzz run ${flags[*]} $t $artifact"
      echo "  keep it as a regression test (make test runs it): mkdir -p fuzz/regressions/$t && cp $artifact fuzz/regressions/$t/"
    fi
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran $seconds s without a crash; new inputs are in target/fuzz-corpus/ (fold them into fuzz/corpus/ with cargo fuzz cmin, see docs/src/development.md)"
