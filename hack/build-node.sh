#!/usr/bin/env bash
# Builds what a real node needs beside Debian's containerd, runc and CNI plugins (hack/apt/node.txt):
#   kubelet, kube-proxy   from the same pinned k8s.io/kubernetes module as the control plane
#                         (wrapper in hack/go/k8s, same version ldflags)
#   kube-router           its NetworkPolicy controller (wrapper in hack/go/kube-router)
#   pause                 the pod sandbox image (hack/go/pause), as localhost/kubecua/pause:<version>
#                         in podman, since registry.k8s.io cannot be reached
# Binaries land in $KUBECUA_CACHE/bin/kubernetes-node-<version>/ (kube-router-<version>/) and are
# linked into $KUBECUA_CACHE/bin; nothing is rebuilt while the versions are unchanged.
# Usage: hack/build-node.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[build-node] %s\n' "$*" >&2; }

out=$bin/kubernetes-node-$KUBE_VERSION
if [[ -x $out/kubelet && -x $out/kube-proxy && -x $out/pause ]]; then
  log "kubelet, kube-proxy and pause $KUBE_VERSION cached"
else
  v=${KUBE_VERSION#v}
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kubelet and kube-proxy $KUBE_VERSION (several minutes on 2 cores)"
  mkdir -p "$out.tmp"
  (cd "$here/go/k8s" && go build -trimpath -ldflags "-s -w $ld" -o "$out.tmp/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  (cd "$here/go/pause" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/pause" .)
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
for b in kubelet kube-proxy; do ln -sfn "$out/$b" "$bin/$b"; done

# kube-router, for its NetworkPolicy controller only (the bridge CNI enforces no policy); it
# applies them with iptables and ipset (hack/apt/node.txt).
router=$bin/kube-router-$KUBE_ROUTER_VERSION
if [[ -x $router/kube-router ]]; then
  log "kube-router $KUBE_ROUTER_VERSION cached"
else
  log "building kube-router $KUBE_ROUTER_VERSION (a few minutes on 2 cores)"
  mkdir -p "$router.tmp"
  (cd "$here/go/kube-router" && go build -trimpath -o "$router.tmp/" -ldflags \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
  rm -rf "$router" && mv "$router.tmp" "$router"
fi
ln -sfn "$router/kube-router" "$bin/kube-router"

# The sandbox image every pod's namespaces live in, from the pause binary alone.
pause=localhost/kubecua/pause:$KUBE_VERSION
if ! podman image exists "$pause"; then
  rootfs=$(mktemp -d)
  cp "$out/pause" "$rootfs/pause"
  tar -C "$rootfs" -c pause | podman import --change 'ENTRYPOINT ["/pause"]' - "$pause" >/dev/null
  rm -rf "$rootfs"
  log "image $pause ready"
fi
log "node binaries ready in $out"
