#!/usr/bin/env bash
# Builds the base disk image of the VM test tier (docs/src/development.md, "Real reboots in virtual machines"):
# Debian bookworm, debootstrap --variant=minbase, systemd as init, the cloud kernel with an
# initramfs of just the virtio drivers, a static network and the units of vm/image/rootfs.
# The result is cached outside the checkout, so that a fresh clone reuses it, in
# ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator/vm-image/<key>/ (or $NRO_CACHE/vm-image),
# where the key hashes this script,
# vm/image/rootfs and the Debian mirror ($DEBIAN_MIRROR), so it is built once; the agent and the
# reporter are NOT in it: each run gives every VM a seed disk with the current binaries
# (vm/harness/src/seed.rs).
#
# Output: base.qcow2 (the root file system, ext4 on /dev/vda), vmlinuz and initrd.img (booted
# directly by QEMU with -kernel, so the image needs no boot loader), and `key`.
# Needs root (debootstrap chroots, and the image keeps file owners), debootstrap, mkfs.ext4
# (e2fsprogs 1.43 or later, for -d) and qemu-img.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${VM_IMAGE_CACHE:-${NRO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator}/vm-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd-sysv,udev,kmod,linux-image-cloud-amd64,initramfs-tools
# Units that a node of this test does not need; masked so that a boot is short.
masked=(apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
    e2scrub_reap.service fstrim.timer logrotate.timer getty@tty1.service
    serial-getty@ttyS0.service getty-static.service systemd-networkd-wait-online.service
    systemd-timesyncd.service systemd-pstore.service remote-fs.target)

# Every input of the image: this script, the files copied into it and where the packages come
# from (another mirror may serve other versions).
key=$( (cat "$0"; echo "mirror=$mirror"
    cd "$here/rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum) |
    sha256sum | cut -c1-16)
out=$cache/$key
if [[ -f $out/base.qcow2 ]]; then
    echo "vm-image: ready $out (cached)"
    exit 0
fi

missing=()
for tool in debootstrap mkfs.ext4 qemu-img; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "vm-image: missing ${missing[*]}; install them with:" >&2
    echo "  apt-get install -y debootstrap e2fsprogs qemu-utils qemu-system-x86 socat" >&2
    exit 1
fi
if [[ $(id -u) != 0 ]]; then
    echo "vm-image: building the image needs root (debootstrap chroots, and the image keeps" >&2
    echo "  file owners); run make vm-image as root once, later runs use the cache $cache" >&2
    exit 1
fi

start=$SECONDS
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

echo "vm-image: debootstrap bookworm ($packages) from $mirror"
if ! debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    echo "vm-image: debootstrap failed (full log above); is $mirror reachable?" >&2
    exit 1
fi
echo "vm-image: debootstrap done after $((SECONDS - start))s; configuring"

cp -a "$here/rootfs/." "$rootfs/"
mkdir -p "$rootfs/opt/node-reboot"
chroot "$rootfs" systemctl enable --quiet systemd-networkd.service reboot-agent.service \
    vm-node-reporter.service
chroot "$rootfs" systemctl mask --quiet "${masked[@]}"
chroot "$rootfs" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 || {
    cat "$work/initramfs.log" >&2
    exit 1
}
# No root password, no login: the test reads the serial console and never logs in.
rm -f "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages

mkdir -p "$work/out"
cp "$rootfs"/boot/vmlinuz-* "$work/out/vmlinuz"
cp "$rootfs"/boot/initrd.img-* "$work/out/initrd.img"
echo "vm-image: writing the disk image"
mkfs.ext4 -q -L nro-root -d "$rootfs" "$work/base.raw" 1G >/dev/null
qemu-img convert -O qcow2 "$work/base.raw" "$work/out/base.qcow2"
echo "$key" >"$work/out/key"
rm -rf "$out"
mv "$work/out" "$out"
# Images of other inputs are stale: keep the cache at one image.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name "build.*" -exec rm -rf {} +
echo "vm-image: built in $((SECONDS - start))s"
echo "vm-image: ready $out"
