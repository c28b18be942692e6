#!/bin/sh
# assets.sh: what the RDMA kernel VM (make rdma-kernel) boots, from
# Debian's packages: Debian 12's own kernel (linux-image-amd64: soft-RoCE,
# ib_uverbs, RDMA netlink), an initramfs of busybox and the kernel's
# modules, and the host programs the guest runs over the host's root
# (qemu, rdma-core's tools and providers, iproute2's rdma).
#
# Prints the directory that holds vmlinuz and initramfs.cpio.gz:
#   $EFAKIT_RDMA_CACHE (~/.cache/efakit-rdma)/<kernel release>
# Nothing is built twice: a directory with its stamp is reused.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cache=${EFAKIT_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/efakit-rdma}

# The host's packages: qemu (software emulation works everywhere; KVM
# where the CPU has it), rdma-core's libibverbs with its providers and
# ibv_devinfo, iproute2's rdma, busybox for the initramfs, kmod's depmod
# and cpio to build it.
need=
for p in qemu-system-x86:qemu-system-x86_64 busybox-static:busybox ibverbs-utils:ibv_devinfo \
	iproute2:rdma kmod:depmod cpio:cpio; do
	command -v "${p#*:}" >/dev/null 2>&1 || need="$need ${p%%:*}"
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || need="$need ibverbs-providers"
if [ -n "$need" ]; then
	echo "assets.sh: installing$need" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >&2
fi

# The kernel package linux-image-amd64 depends on names the release.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)
if [ -z "$pkg" ]; then
	apt-get update -qq >&2
	pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)
fi
[ -n "$pkg" ] || { echo "assets.sh: no linux-image-amd64 in the package lists" >&2; exit 1; }
release=${pkg#linux-image-}
out=$cache/$release
stamp=$out/.stamp-$(cat "$here/init" "$here/stage2" "$0" | cksum | cut -d' ' -f1)
if [ -e "$stamp" ]; then
	echo "$out"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "$pkg" >/dev/null 2>&1) || { echo "assets.sh: apt-get download $pkg failed" >&2; exit 1; }
dpkg-deb -x "$work"/linux-image-*.deb "$work/k"
depmod -b "$work/k" "$release"
mods=$work/k/lib/modules/$release

# The initramfs: busybox, the init scripts and the modules the guest
# loads with their dependencies (modules.dep, which busybox's modprobe
# reads). crc32_generic must come before rdma_rxe: without it
# "rdma link add" fails with ENOENT.
root=$work/root
mkdir -p "$root/bin" "$root/lib/modules/$release" "$root/proc" "$root/sys" "$root/dev" "$root/host" "$root/newroot" "$root/overlay"
cp "$(command -v busybox)" "$root/bin/busybox"
cp "$here/init" "$root/init"
cp "$here/stage2" "$root/stage2"
chmod 755 "$root/init" "$root/stage2"
wanted="virtio_pci 9pnet_virtio 9p overlay crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad dummy veth"
echo "$wanted" > "$root/modules"
cp "$mods/modules.dep" "$mods/modules.builtin" "$mods/modules.order" "$root/lib/modules/$release/"
for m in $wanted; do
	line=$(grep -E "/$m\.ko(\.xz)?:" "$mods/modules.dep") || { echo "assets.sh: module $m not in $pkg" >&2; exit 1; }
	for f in $(echo "$line" | tr -d ':'); do
		mkdir -p "$root/lib/modules/$release/$(dirname "$f")"
		cp "$mods/$f" "$root/lib/modules/$release/$f"
	done
done

rm -rf "$out"
mkdir -p "$out"
cp "$work/k/boot/vmlinuz-$release" "$out/vmlinuz"
# The kernel's ELF image inside the bzImage (xz) boots as a PVH guest:
# qemu then skips the decompression, about 3 s a boot under software
# emulation. The VM boots vmlinuz where this fails.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$out/vmlinuz" | head -n 1 | cut -d: -f1)
if [ -n "$off" ]; then
	tail -c +$((off + 1)) "$out/vmlinuz" | xz -dc 2>/dev/null > "$out/vmlinux" || true
	[ "$(head -c 4 "$out/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || rm -f "$out/vmlinux"
fi
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initramfs.cpio.gz"
touch "$stamp"
echo "$out"
