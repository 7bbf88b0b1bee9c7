#!/usr/bin/env bash
# libfaketime from Debian's packages, when missing: the clock-skew tests (e2e/tests/clock_skew.rs)
# start controllers whose wall clock is minutes off with LD_PRELOAD of its libfaketime.so.1.
# Prints nothing when it is there already.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
installed() {
  dpkg -L libfaketime 2>/dev/null | grep -q '/faketime/libfaketime\.so\.1$'
}
installed && exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "faketime-tools: libfaketime is missing; install it with: apt-get install -y libfaketime" >&2
  exit 1
fi
echo "faketime-tools: installing libfaketime from Debian's packages"
start=$SECONDS
DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libfaketime >/dev/null
installed || { echo "faketime-tools: libfaketime is installed but has no libfaketime.so.1" >&2; exit 1; }
echo "faketime-tools: installed in $((SECONDS - start))s"
