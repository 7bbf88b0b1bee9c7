#!/usr/bin/env bash
# What `make static` needs to build the images' binaries for the other architecture (arm64 on
# an amd64 machine, amd64 on an arm64 one), and what `make test-arm64` needs to run them:
# Rust's standard library for that target (rustup), Debian's cross C toolchain and static C
# library (the linker, and ring's C and assembly), and QEMU's user-mode emulator registered
# with binfmt_misc, so that the kernel runs a foreign binary through it (the `F` flag keeps the
# emulator open, so it works in other mount namespaces too). And for the kubectl plugin's Windows
# build (`make static`, `make release`): Rust's standard library for x86_64-pc-windows-gnu and
# Debian's MinGW-w64 cross compiler (its linker, and ring's C). Installs what is missing.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
case $(uname -m) in
  x86_64) cross=aarch64; deb_arch=arm64; binfmt=qemu-aarch64 ;;
  aarch64) cross=x86_64; deb_arch=amd64; binfmt=qemu-x86_64 ;;
  *) echo "cross-tools: no cross build is set up for a $(uname -m) machine" >&2; exit 1 ;;
esac
triple=$cross-unknown-linux-gnu
windows=x86_64-pc-windows-gnu
packages=("gcc-${cross//_/-}-linux-gnu" "libc6-dev-$deb_arch-cross" qemu-user-static gcc-mingw-w64-x86-64)
as_root() {
  if [[ $(id -u) == 0 ]]; then "$@"; else
    echo "cross-tools: run as root, or yourself: $*" >&2; exit 1
  fi
}

for target in "$triple" "$windows"; do
  if ! rustc --print target-libdir --target "$target" 2>/dev/null | xargs -I{} test -d {}; then
    command -v rustup >/dev/null || {
      echo "cross-tools: Rust's standard library for $target is missing and rustup is not installed; add the target to your toolchain" >&2
      exit 1
    }
    echo "cross-tools: rustup target add $target"
    rustup target add "$target"
  fi
done

missing=()
command -v "$cross-linux-gnu-gcc" >/dev/null || missing+=("${packages[0]}" "${packages[1]}")
[[ -e /usr/$cross-linux-gnu/lib/libc.a ]] || missing+=("${packages[1]}")
[[ -x /usr/libexec/qemu-binfmt/$cross-binfmt-P || -x /usr/bin/$binfmt-static ]] || missing+=(qemu-user-static)
command -v x86_64-w64-mingw32-gcc >/dev/null || missing+=(gcc-mingw-w64-x86-64)
if ((${#missing[@]})); then
  readarray -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "cross-tools: installing ${missing[*]} from Debian's packages"
  start=$SECONDS
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  echo "cross-tools: installed in $((SECONDS - start))s"
fi

# binfmt_misc: a machine without systemd-binfmt (a container, a CI runner) has it neither
# mounted nor registered. Debian's qemu-user-static ships the registration line.
binfmt_dir=/proc/sys/fs/binfmt_misc
if [[ ! -e $binfmt_dir/register ]]; then
  as_root mount -t binfmt_misc binfmt_misc "$binfmt_dir"
fi
if [[ ! -e $binfmt_dir/$binfmt ]]; then
  conf=/usr/lib/binfmt.d/$binfmt.conf
  [[ -r $conf ]] || { echo "cross-tools: $conf is missing; reinstall qemu-user-static" >&2; exit 1; }
  echo "cross-tools: registering $binfmt with binfmt_misc"
  as_root sh -c "cat '$conf' > '$binfmt_dir/register'"
fi
grep -qx enabled "$binfmt_dir/$binfmt" || {
  echo "cross-tools: $binfmt_dir/$binfmt is disabled; enable it with: echo 1 > $binfmt_dir/$binfmt" >&2
  exit 1
}
