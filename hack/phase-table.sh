#!/usr/bin/env bash
# The table of `make test`'s phases (hack/phase.sh), in the order they started: each one's
# wall time, whether it came from a cache (its output showed no build or install), and its
# status; the same as JSON in target/ci-times.json. A phase of several commands (a recipe of
# several lines) spans from the first one's start to the last one's end, and came from a
# cache only if each did.
set -euo pipefail
dir=target/ci-phases
[ -d "$dir" ] || { echo "phases: none recorded in $dir"; exit 0; }
cat "$dir"/* | awk '
  { name = $1
    if (!(name in start) || $2 < start[name]) start[name] = $2
    if ($3 > end[name]) end[name] = $3
    if ($4 != 0) status[name] = $4; else if (!(name in status)) status[name] = 0
    if (!(name in cached) || $5 == "no") cached[name] = $5
    if (!(name in seen)) { seen[name] = 1; names[++n] = name } }
  END {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (start[names[j]] < start[names[i]]) { t = names[i]; names[i] = names[j]; names[j] = t }
    first = start[names[1]]
    printf "%-18s %8s %8s %6s %7s\n", "phase", "from (s)", "wall (s)", "cache", "status"
    json = "["
    for (i = 1; i <= n; i++) {
      m = names[i]; wall = end[m] - start[m]
      cache = (m ~ /^test/) ? "-" : (cached[m] == "yes" ? "hit" : "built")
      printf "%-18s %8d %8d %6s %7s\n", m, start[m] - first, wall, cache, status[m] == 0 ? "ok" : "failed"
      if (end[m] > last) last = end[m]
      json = json sprintf("%s{\"phase\":\"%s\",\"started_s\":%d,\"wall_s\":%d,\"cache\":\"%s\",\"status\":%d}", i > 1 ? "," : "", m, start[m] - first, wall, cache, status[m])
    }
    printf "%-18s %8s %8d\n", "all", "", last - first
    print json "]" > "target/ci-times.json"
  }'
echo "phases: also in target/ci-times.json"
