#!/usr/bin/env bash
# Builds the disk image of the real-node tier (make node-e2e): Debian trixie with systemd,
# D-Bus and logind (so that `systemctl reboot` waits for the kubelet's graceful shutdown),
# AppArmor (so that containerd confines pods and the agent's `Unconfined` is exercised),
# Debian's runc, iptables, and from testenv/bin the kubelet, containerd 2.x, its runc shim, ctr
# and the CNI plugins, with the units and configuration of vm/node/image/rootfs.
#
# trixie, not bookworm: its runc (1.1.15+) and kernel (6.12) are what containerd 2.x expects.
# What differs per node and per run (the name, the kubelet's certificate, the pod network,
# the image archives) is on each guest's seed disk, so that a code change never rebuilds this.
#
# Cached outside the checkout, in $NRO_CACHE/node-image/<key>/ (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator), where the key hashes this script,
# rootfs/, the mirror and the build stamps of the binaries it copies: a fresh clone reuses it.
# Output: base.qcow2, vmlinuz, initrd.img, key. Needs root, debootstrap, mkfs.ext4, qemu-img.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin=$repo/testenv/bin
cache=${NRO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-reboot-operator}/node-image
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
packages=systemd-sysv,udev,kmod,linux-image-cloud-amd64,initramfs-tools,dbus,libpam-systemd,apparmor,runc,iptables,iproute2,procps
programs=(kubelet containerd containerd-shim-runc-v2 ctr)
cni_plugins=(bridge host-local loopback)
masked=(apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
    e2scrub_reap.service fstrim.timer logrotate.timer getty@tty1.service
    serial-getty@ttyS0.service getty-static.service systemd-networkd-wait-online.service
    systemd-timesyncd.service systemd-pstore.service remote-fs.target
    man-db.timer ldconfig.service systemd-journal-catalog-update.service
    systemd-update-done.service)

for name in "${programs[@]}" "${cni_plugins[@]}"; do
    [[ -x $bin/$name && -f $bin/.$name.stamp ]] || {
        echo "node-image: $bin/$name is missing; run make testenv first" >&2
        exit 1
    }
done
key=$( (cat "$0"; echo "mirror=$mirror"
    for name in "${programs[@]}" "${cni_plugins[@]}"; do echo "$name $(cat "$bin/.$name.stamp")"; done
    cd "$here/rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum) |
    sha256sum | cut -c1-16)
out=$cache/$key
if [[ -f $out/base.qcow2 ]]; then
    echo "node-image: ready $out (cached)"
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "node-image: building the image needs root (debootstrap chroots); run make node-image" >&2
    echo "  as root once, later runs use the cache $cache" >&2
    exit 1
fi

start=$SECONDS
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
echo "node-image: debootstrap $suite from $mirror (2-5 minutes)"
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    echo "node-image: debootstrap failed (its log's end is above); is $mirror reachable?" >&2
    exit 1
fi
echo "node-image: debootstrap done after $((SECONDS - start))s; configuring"
cp -a "$here/rootfs/." "$rootfs/"
for name in "${programs[@]}"; do install -m 0755 "$bin/$name" "$rootfs/usr/local/bin/$name"; done
mkdir -p "$rootfs/opt/cni/bin" "$rootfs/opt/node-reboot" "$rootfs/etc/cni/net.d"
for name in "${cni_plugins[@]}"; do install -m 0755 "$bin/$name" "$rootfs/opt/cni/bin/$name"; done
# No DNS server is reachable, and the kubelet hands pods this file.
rm -f "$rootfs/etc/resolv.conf"
echo "nameserver 127.0.0.1" >"$rootfs/etc/resolv.conf"
chroot "$rootfs" systemctl enable --quiet systemd-networkd.service node-setup.service \
    containerd.service node-images.service kubelet.service node-logs.service
chroot "$rootfs" systemctl mask --quiet "${masked[@]}"
# AppArmor ships ~100 profiles of desktop programs; loading them costs a minute of every boot
# under emulation. Only containerd's own profile (which it loads itself) confines anything here.
find "$rootfs/etc/apparmor.d" -maxdepth 1 -type f -delete
# What systemd would otherwise do at each guest's first boot (its overlay is new every run).
chroot "$rootfs" ldconfig
chroot "$rootfs" journalctl --update-catalog
chroot "$rootfs" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 || {
    cat "$work/initramfs.log" >&2
    exit 1
}
for tool in systemd-logind dbus-daemon apparmor_parser runc iptables; do
    [[ -n $(find "$rootfs/usr" -name "$tool" -type f -print -quit) ]] || {
        echo "node-image: $tool is not in the image; the package list of this script is wrong" >&2
        exit 1
    }
done
rm -f "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages

mkdir -p "$work/out"
cp "$rootfs"/boot/vmlinuz-* "$work/out/vmlinuz"
cp "$rootfs"/boot/initrd.img-* "$work/out/initrd.img"
echo "node-image: writing the disk image"
mkfs.ext4 -q -L nro-node -d "$rootfs" "$work/root.raw" 6G >/dev/null
qemu-img convert -O qcow2 "$work/root.raw" "$work/out/base.qcow2"
echo "$key" >"$work/out/key"
rm -rf "$out"
mv "$work/out" "$out"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name "build.*" -exec rm -rf {} +
echo "node-image: built in $((SECONDS - start))s"
echo "node-image: ready $out"
