#!/usr/bin/env bash
# Runs every test of the workspace but the VM tiers (`-p vmtest`), several test binaries at a
# time. Most of them wait on a control plane and on simulated reboots rather than on the CPU
# (the chaos tests use 25 s of CPU in 120 s), so `cargo test` running them one after the other
# left a 2-core machine idle for most of 14 minutes.
#
# Each binary runs from its package's directory, as `cargo test` runs it; its output goes to
# target/test-logs/<package>-<binary>.log and is printed in full when it fails. A line per
# binary says how it ended and how long it took; the longest binaries of the last run start
# first (target/test-times.txt). TEST_JOBS (default 4) is how many run at once;
# TEST_JOBS=1 runs them one by one. Arguments go to every test binary (a name filter, or
# --test-threads=1, for example).
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=${TEST_JOBS:-4}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "test-binaries: TEST_JOBS must be a positive whole number, not '$jobs'" >&2; exit 2; }
logs=target/test-logs
times=target/test-times.txt
rm -rf "$logs" && mkdir -p "$logs"

# Every test binary as "<package's directory> <name> <executable>", from cargo's own build
# messages; the name is the package's directory, the target's kind and its name
# (e2e-test-chaos, controller-lib-controller, kubectl-reboot-bin-kubectl-reboot).
cargo test --workspace --exclude vmtest --locked --no-run --message-format=json-render-diagnostics \
  | sed -n 's|.*"manifest_path":"\([^"]*\)/Cargo.toml","target":{"kind":\["\([^"]*\)"[^}]*"name":"\([^"]*\)".*"profile":{[^}]*"test":true}.*"executable":"\([^"]*\)".*|\1 \2-\3 \4|p' \
  | while read -r dir name exe; do echo "$dir ${dir##*/}-$name $exe"; done > "$logs/binaries.txt" \
  || { echo "test-binaries: the tests do not build" >&2; exit 1; }

# The end-to-end scenarios are one test binary with a module a subject (e2e/tests/scenarios.rs):
# each module runs in a process of its own, as "<dir> e2e-test-<module> <exe> <module>::", so
# they still spread over TEST_JOBS processes, longest first, a log each, as when each was a
# binary. With arguments (a name filter, say) the binary runs once, whole: two filters would
# run what matches either. A filter picks the tests whose names contain it anywhere, so a test
# outside every module (run by no filter) or one that another module's filter also picks (run
# twice) fails the run instead of being skipped or repeated.
scenario_modules() {
  local dir exe
  read -r dir _ exe < <(grep ' e2e-test-scenarios ' "$logs/binaries.txt") || return 0
  [ -z "$TEST_BINARY_ARGS" ] || return 0
  "$exe" --list | sed -n 's/: test$//p' | awk -v dir="$dir" -v exe="$exe" '
    {
      tests[NR] = $0
      cut = index($0, "::")
      if (cut == 0) {
        print "test-binaries: the scenario " $0 " is outside every module of e2e/tests/scenarios.rs: no run would pick it; move it into one" > "/dev/stderr"
        bad = 1
      } else modules[substr($0, 1, cut - 1)] = 1
    }
    END {
      for (i in tests) for (m in modules) if (index(tests[i], m "::") > 1) {
        print "test-binaries: the filter " m ":: also picks " tests[i] ", which would run twice; rename one of the modules" > "/dev/stderr"
        bad = 1
      }
      if (bad) exit 1
      for (m in modules) print dir " e2e-test-" m " " exe " " m "::"
    }'
}
export TEST_BINARY_ARGS="$*"
modules=$(scenario_modules) || { echo "test-binaries: the scenarios do not list" >&2; exit 1; }
if [ -n "$modules" ]; then
  grep -v ' e2e-test-scenarios ' "$logs/binaries.txt" > "$logs/binaries.tmp"
  echo "$modules" >> "$logs/binaries.tmp"
  mv "$logs/binaries.tmp" "$logs/binaries.txt"
fi

# Longest first by the last run's times; binaries without a time first, in cargo's order.
while read -r dir name exe filter; do
  t=$(awk -v n="$name" '$1 == n { print $2 }' "$times" 2>/dev/null || true)
  # No blank at the end of a line: xargs -L would join the next line to it.
  echo "${t:-999999} $dir $name $exe${filter:+ $filter}"
done < "$logs/binaries.txt" | sort -s -k1,1nr | cut -d' ' -f2- > "$logs/order.txt"
count=$(wc -l < "$logs/order.txt")
((count > 0)) || { echo "test-binaries: cargo named no test binary; did its output format change?" >&2; exit 1; }
echo "test-binaries: $count test binaries (and the doc tests), $jobs at a time; logs in $logs/"

run_one() { # $1 the package's directory, $2 the binary's name, $3 the executable, $4 a filter
  local dir=$1 name=$2 exe=$3 filter=${4:-} start status
  start=$SECONDS
  # shellcheck disable=SC2086 # the arguments of the script, split as the shell split them
  (cd "$dir" && "$exe" ${filter:+"$filter"} $TEST_BINARY_ARGS) > "$logs/$name.log" 2>&1
  status=$?
  local result; result=$(grep -h '^test result:' "$logs/$name.log" | tail -n1)
  if ((status == 0)); then
    echo "test-binaries: ok     $name in $((SECONDS - start)) s: ${result#test result: }"
  else
    echo "test-binaries: FAILED $name in $((SECONDS - start)) s (exit $status): ${result#test result: }"
    sed "s/^/$name| /" "$logs/$name.log"
    echo "$name" >> "$logs/failed.txt"
  fi
  echo "$name $((SECONDS - start))" >> "$logs/times.txt"
}
export -f run_one
export logs

start=$SECONDS
# The doc tests build as they run, so cargo runs them, beside the binaries.
(if cargo test --workspace --exclude vmtest --locked --doc > "$logs/doc-tests.log" 2>&1; then
  echo "test-binaries: ok     the doc tests"
else
  echo "doc-tests" >> "$logs/failed.txt"; echo "test-binaries: FAILED the doc tests:"; cat "$logs/doc-tests.log"
fi) &
doc=$!
xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' run_one < "$logs/order.txt" \
  || echo "xargs (a binary's run was killed; not every binary ran)" >> "$logs/failed.txt"
wait "$doc"
ran=$(wc -l < "$logs/times.txt" 2>/dev/null || echo 0)
((ran == count)) || echo "only $ran of $count binaries ran" >> "$logs/failed.txt"
[ -s "$logs/times.txt" ] && sort -k2,2nr "$logs/times.txt" > "$times"

total() { cat "$logs"/*.log | sed -n "s/^test result: .* \([0-9]*\) $1;.*/\1/p" | awk '{ n += $1 } END { print n + 0 }'; }
passed=$(total passed)
failed=$(total failed)
echo "test-binaries: $passed tests passed, $failed failed, in $((SECONDS - start)) s"
if [ -s "$logs/failed.txt" ]; then
  echo "test-binaries: failed: $(paste -sd' ' "$logs/failed.txt")"
  exit 1
fi
