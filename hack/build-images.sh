#!/usr/bin/env bash
# Builds kubecua's container images with podman, with no registry in reach.
#   1. A Debian base from debootstrap, imported as docker.io/library/debian:bookworm, so every
#      Dockerfile keeps a standard FROM line and builds unchanged anywhere else.
#   2. Each image in IMAGES, tagged localhost/kubecua/<name>:dev, built from the repo root.
# The base is built once and cached as a tarball under $KUBECUA_CACHE/images/, keyed by suite.
# An image whose label io.kubecua.inputs matches the hash of its inputs (base image id, Dockerfile,
# every file its COPY lines name) is not rebuilt at all; KUBECUA_REBUILD=1 forces podman build
# (whose layer cache still applies).
# Usage: hack/build-images.sh [name ...]     (default: every Dockerfile listed below)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}/images
suite=bookworm
base=docker.io/library/debian:$suite
declare -A IMAGES=([sandbox]=sandbox-image/Dockerfile [operator]=operator/Dockerfile [trainer]=trainer/Dockerfile
  [tasks]=sandbox-image/tasks/Dockerfile)
# runc: crun refuses this host's cgroup layout; the host's hard rlimits are below podman's defaults.
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

log() { printf '[build-images] %s\n' "$*" >&2; }

ensure_base() {
  "${PODMAN[@]}" image exists "$base" && return
  local tarball=$cache/debian-$suite-minbase.tar
  if [[ ! -f $tarball ]]; then
    log "debootstrap $suite (about a minute)"
    local rootfs
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase "$suite" "$rootfs" http://deb.debian.org/debian >/dev/null
    mkdir -p "$cache" && tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  "${PODMAN[@]}" import "$tarball" "$base" >/dev/null
  log "base image $base ready"
}

# What the build reads, as one hash. Pruned like Dockerfile.dockerignore (venvs, caches, tests,
# and hypothesis's example database, which the fuzz tests write beside their sources: counted, it
# made make test rebuild the sandbox image and the VM disk in the middle of the run), which podman
# leaves out of the context too; file modes count (entrypoints are executables).
inputs_hash() {
  local dockerfile=$1 srcs files
  srcs=$(awk '$1 == "COPY" && !/--from/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' \
    "$repo/$dockerfile")
  # shellcheck disable=SC2086  # srcs: one path per word (none has spaces)
  files=$(cd "$repo" && find "$dockerfile" $srcs \( -name .venv -o -name __pycache__ \
    -o -name .mypy_cache -o -name .ruff_cache -o -name .pytest_cache -o -name .hypothesis \
    -o -name tests \) \
    -prune -o -type f -print \
    | LC_ALL=C sort)
  {
    "${PODMAN[@]}" image inspect --format '{{.Id}}' "$base"
    cd "$repo" && xargs -d '\n' stat -c '%a %n' <<<"$files" && xargs -d '\n' sha256sum <<<"$files"
  } | sha256sum | cut -c1-16
}

build() {
  local name=$1 dockerfile=${IMAGES[$1]} tag hash
  [[ -f $repo/$dockerfile ]] || { log "skip $name: $dockerfile does not exist yet"; return; }
  tag=localhost/kubecua/$name:dev
  hash=$(inputs_hash "$dockerfile")
  if [[ ${KUBECUA_REBUILD:-0} != 1 ]] && [[ $("${PODMAN[@]}" image inspect --format \
      '{{index .Labels "io.kubecua.inputs"}}' "$tag" 2>/dev/null) == "$hash" ]]; then
    log "$tag is up to date (inputs $hash)"
    return
  fi
  log "building $tag (inputs $hash)"
  local old extra=()
  old=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  # The trainer's locked wheels (4 GB) are in the host's uv cache once `make trainer-env` ran:
  # lend it to the build rather than download them again (trainer/Dockerfile uses it if there).
  local uv_cache=${UV_CACHE_DIR:-${KUBECUA_CACHE:-$HOME/.cache/kubecua}/uv}
  if [[ $name == trainer && -f $uv_cache/CACHEDIR.TAG ]]; then
    extra+=(--volume "$uv_cache:/var/cache/uv")
  fi
  # The host's CA bundle reaches pip inside the build as a secret (registry traffic is
  # TLS-intercepted here); Dockerfiles mount it optionally, so other builders need nothing.
  "${PODMAN[@]}" build "${LIMITS[@]}" "${extra[@]}" -f "$repo/$dockerfile" -t "$tag" \
    --label "io.kubecua.inputs=$hash" --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt "$repo"
  # The version it replaces is left untagged: remove it (and its layers no other image uses),
  # or every rebuild leaves gigabytes behind. Refused, harmlessly, while a container uses it.
  if [[ -n $old && $old != $("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag") ]]; then
    "${PODMAN[@]}" rmi "$old" >/dev/null 2>&1 || log "kept the replaced $old (in use)"
  fi
}

ensure_base
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=("${!IMAGES[@]}")
for n in "${names[@]}"; do
  [[ -n ${IMAGES[$n]:-} ]] || { echo "unknown image '$n'; known: ${!IMAGES[*]}" >&2; exit 2; }
  build "$n"
done
