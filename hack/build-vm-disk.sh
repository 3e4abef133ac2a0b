#!/usr/bin/env bash
# Builds the kubecua desktop as a VM disk, without loop mounts or a bootloader:
#   1. sandbox-image/vm/Dockerfile on top of localhost/kubecua/sandbox:dev (kernel, initramfs, init)
#   2. its filesystem, exported with `podman export`, becomes an ext4 image (mkfs.ext4 -d), then a
#      qcow2: the read-only base that every VM's copy-on-write overlay sits on
#   3. the kernel and initramfs beside it, for direct kernel boot (root=/dev/vda)
#   4. with --containerdisk: localhost/kubecua/sandbox-vm-disk:dev, a KubeVirt containerDisk image:
#      the qcow2 under /disk/, the kernel and initramfs under /boot/ (for KubeVirt's kernelBoot).
#      Optional because it is a second copy of the disk (3.4 GB); make test does not need it.
# Output: $KUBECUA_CACHE/vm/<inputs hash>/{disk.qcow2,vmlinuz,initrd.img}, and the directory's path
# on stdout. The hash covers the sandbox image's id and this builder's files; unchanged inputs cost
# a second. Older disks are removed (each is several GB). KUBECUA_REBUILD=1 forces a rebuild.
# Usage: hack/build-vm-disk.sh [--containerdisk]   (builds the sandbox image first if missing)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}/vm
sandbox=localhost/kubecua/sandbox:dev
rootfs_tag=localhost/kubecua/sandbox-vm-rootfs:dev
disk_tag=localhost/kubecua/sandbox-vm-disk:dev
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
log() { printf '[build-vm-disk] %s\n' "$*" >&2; }
containerdisk=0
case ${1:-} in
  "") ;;
  --containerdisk) containerdisk=1 ;;
  *) log "unknown argument '$1'; usage: $0 [--containerdisk]"; exit 2 ;;
esac

# The exported files keep their owners (root, user) only when written by root: unprivileged,
# run the whole build inside podman's user namespace, where the file owners map back.
if [[ $(id -u) -ne 0 && -z ${KUBECUA_IN_USERNS:-} ]]; then
  KUBECUA_IN_USERNS=1 exec podman unshare "$0" "$@"
fi
for tool in qemu-img mkfs.ext4; do
  command -v "$tool" >/dev/null || { log "$tool is missing: make setup-apt (hack/apt/vm.txt)"; exit 2; }
done
# One build at a time: make test runs test-vm and test-bench-smoke (bench-vm) in different lanes
# (hack/run-suites.sh), and both ask for the disk; the second waits here, then finds it up to date.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock -w 1200 9 || log "another build held $cache/.build.lock for 20 min; going on without it"
"${PODMAN[@]}" image exists "$sandbox" || "$here/build-images.sh" sandbox

inputs=(hack/build-vm-disk.sh sandbox-image/vm/Dockerfile sandbox-image/vm/init.sh
  sandbox-image/vm/supervisord.conf)
hash=$({
  "${PODMAN[@]}" image inspect --format '{{.Id}}' "$sandbox"
  cd "$repo" && stat -c '%a %n' "${inputs[@]}" && sha256sum "${inputs[@]}"
} | sha256sum | cut -c1-16)
out=$cache/$hash
image_hash() { "${PODMAN[@]}" image inspect --format '{{index .Labels "io.kubecua.inputs"}}' "$1" 2>/dev/null || true; }

build_containerdisk() {
  [[ $(image_hash "$disk_tag") == "$hash" ]] && { log "$disk_tag is up to date"; return; }
  log "building the containerDisk image $disk_tag"
  local ctx old
  ctx=$(mktemp -d "$cache/.containerdisk.XXXXXX")
  # KubeVirt's containerDisk convention: the disk under /disk/, owned by qemu's uid 107.
  printf '%s\n' "FROM scratch" "COPY --chown=107:107 disk.qcow2 /disk/disk.qcow2" \
    "COPY --chown=107:107 vmlinuz initrd.img /boot/" >"$ctx/Containerfile"
  ln "$out/disk.qcow2" "$out/vmlinuz" "$out/initrd.img" "$ctx/"
  old=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$disk_tag" 2>/dev/null || true)
  "${PODMAN[@]}" build -q -f "$ctx/Containerfile" -t "$disk_tag" --label "io.kubecua.inputs=$hash" \
    "$ctx" >/dev/null
  rm -rf "$ctx"
  if [[ -n $old && $old != $("${PODMAN[@]}" image inspect --format '{{.Id}}' "$disk_tag") ]]; then
    "${PODMAN[@]}" rmi "$old" >/dev/null 2>&1 || true
  fi
}

if [[ ${KUBECUA_REBUILD:-0} != 1 && -f $out/disk.qcow2 ]]; then
  log "VM disk is up to date (inputs $hash)"
  [[ $containerdisk == 1 ]] && build_containerdisk
  echo "$out"
  exit 0
fi

log "building $rootfs_tag (inputs $hash)"
old_rootfs=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$rootfs_tag" 2>/dev/null || true)
"${PODMAN[@]}" build -q "${LIMITS[@]}" -f "$repo/sandbox-image/vm/Dockerfile" -t "$rootfs_tag" \
  --build-arg "BASE=$sandbox" --label "io.kubecua.inputs=$hash" "$repo" >/dev/null

# The version it replaces holds a whole older sandbox image's layers: remove it.
if [[ -n $old_rootfs && $old_rootfs != $("${PODMAN[@]}" image inspect --format '{{.Id}}' "$rootfs_tag") ]]; then
  "${PODMAN[@]}" rmi "$old_rootfs" >/dev/null 2>&1 || log "kept the replaced $old_rootfs (in use)"
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/.build.XXXXXX")
ctr=""
cleanup() { [[ -n $ctr ]] && "${PODMAN[@]}" rm -f "$ctr" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/root" "$work/out"
ctr=$("${PODMAN[@]}" create "$rootfs_tag" true)
log "exporting the filesystem"
"${PODMAN[@]}" export "$ctr" | tar -C "$work/root" --numeric-owner -xpf -
# podman's bind-mount placeholders: the init writes /etc/hosts; resolv.conf comes from DHCP.
: >"$work/root/etc/resolv.conf"
echo kubecua-vm >"$work/root/etc/hostname"
# /boot/vmlinuz and /boot/initrd.img are links inside the guest's tree: resolve them there.
guest_file() { local t; t=$(readlink "$work/root/boot/$1"); [[ $t == /* ]] || t=/boot/$t; echo "$work/root$t"; }
cp "$(guest_file vmlinuz)" "$work/out/vmlinuz"
cp "$(guest_file initrd.img)" "$work/out/initrd.img"
# The root filesystem: its contents plus 2 GiB for what the desktop writes (overlays hold the
# writes; the base stays read-only).
used_mb=$(du -sm "$work/root" | cut -f1)
log "mkfs.ext4 -d ($used_mb MB of files)"
mkfs.ext4 -q -F -L kubecua-root -d "$work/root" "$work/root.raw" "$((used_mb + 2048))M" >/dev/null
rm -rf "$work/root"
qemu-img convert -f raw -O qcow2 "$work/root.raw" "$work/out/disk.qcow2"
rm -f "$work/root.raw"
chmod 0444 "$work/out/"*
echo "$hash" >"$work/out/inputs"

# Replace older disks (VMs still running on one keep their open files until they stop).
for d in "$cache"/*/; do if [[ ${d%/} != "$out" ]]; then rm -rf "$d"; fi; done
mkdir -p "$cache" && rm -rf "$out" && mv "$work/out" "$out"
log "VM disk ready: $out ($(du -sh "$out/disk.qcow2" | cut -f1))"
[[ $containerdisk == 1 ]] && build_containerdisk
echo "$out"
