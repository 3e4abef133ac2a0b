#!/usr/bin/env bash
# Builds localhost/kubecua/sandbox-vm-runner:dev, the image of a VM sandbox's pod (the pod
# backend's desktop.vm mode): the sandbox image plus qemu and this tree's episode server
# (sandbox-image/vm/runner.Dockerfile). A thin layer: a few hundred MB over the sandbox image's.
# Skipped when its inputs (the sandbox image's id, the Dockerfile, the episode server's files)
# are unchanged; KUBECUA_REBUILD=1 forces it. The VM disk itself is hack/build-vm-disk.sh's.
# Usage: hack/build-vm-runner.sh   (builds the sandbox image first if missing)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
sandbox=localhost/kubecua/sandbox:dev
tag=localhost/kubecua/sandbox-vm-runner:dev
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
log() { printf '[build-vm-runner] %s\n' "$*" >&2; }

"${PODMAN[@]}" image exists "$sandbox" || "$here/build-images.sh" sandbox
hash=$({
  "${PODMAN[@]}" image inspect --format '{{.Id}}' "$sandbox"
  cd "$repo" && find sandbox-image/vm/runner.Dockerfile sandbox-image/episode-server \( \
    -name .venv -o -name __pycache__ -o -name '.*_cache' -o -name .hypothesis -o -name tests \) \
    -prune -o -type f \
    -print | LC_ALL=C sort | xargs -d '\n' sha256sum
} | sha256sum | cut -c1-16)
if [[ ${KUBECUA_REBUILD:-0} != 1 && $("${PODMAN[@]}" image inspect --format \
    '{{index .Labels "io.kubecua.inputs"}}' "$tag" 2>/dev/null) == "$hash" ]]; then
  log "$tag is up to date (inputs $hash)"
  exit 0
fi
log "building $tag (inputs $hash)"
old=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
"${PODMAN[@]}" build -q "${LIMITS[@]}" -f "$repo/sandbox-image/vm/runner.Dockerfile" -t "$tag" \
  --build-arg "BASE=$sandbox" --label "io.kubecua.inputs=$hash" \
  --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt "$repo" >/dev/null
# The version it replaces: remove it (its own layers only; the sandbox image's stay).
if [[ -n $old && $old != $("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag") ]]; then
  "${PODMAN[@]}" rmi "$old" >/dev/null 2>&1 || true
fi
log "$tag ready"
