#!/usr/bin/env bash
# Installs the host tools of the VM test tier from Debian's packages when one is missing:
# QEMU (the emulator and qemu-img), debootstrap, mkfs.ext4, socat (QEMU's guestfwd runs it
# for each connection of a guest to the API server) and setpriv (QEMU runs under
# `setpriv --pdeathsig KILL`, so that it dies with the test process).
set -euo pipefail
packages=(qemu-system-x86 qemu-utils debootstrap e2fsprogs socat util-linux)
export PATH=$PATH:/usr/sbin:/sbin
missing=0
for tool in qemu-system-x86_64 qemu-img debootstrap mkfs.ext4 socat setpriv; do
    command -v "$tool" >/dev/null || missing=1
done
((missing)) || exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "vm-tools: QEMU, debootstrap, socat or setpriv is missing; install them with:" >&2
    echo "  apt-get install -y ${packages[*]}" >&2
    exit 1
fi
echo "vm-tools: installing ${packages[*]} from Debian's packages"
start=$SECONDS
DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
echo "vm-tools: installed in $((SECONDS - start))s"
