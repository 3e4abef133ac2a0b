#!/usr/bin/env bash
# Builds the real Kubernetes control plane from the Go module proxy and caches the binaries.
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes, wrapper in hack/go/k8s)
#   etcd                                                             (etcdmain wrapper in hack/go/etcd)
#   kwok, kwokctl, helm                                               (go install)
# kwokctl --runtime binary then runs the cluster from these local binaries (tests/kubecua_testkit/cluster.py, `make cluster-up`).
# Binaries land in $KUBECUA_CACHE/bin/<tool>-<version>/ and are linked into $KUBECUA_CACHE/bin.
# A binary that already exists is never rebuilt, so this is cheap to run again.
# Usage: hack/build-control-plane.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

# link NAME DIR: point $bin/NAME at the versioned build.
link() { ln -sfn "$2/$1" "$bin/$1"; }

build_kubernetes() {
  local out=$bin/kubernetes-$KUBE_VERSION
  if [[ -x $out/kube-apiserver && -x $out/kube-controller-manager && -x $out/kube-scheduler && -x $out/kubectl ]]; then
    log "kubernetes $KUBE_VERSION cached"
  else
    local v=${KUBE_VERSION#v} major minor
    major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
    local ld="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
      ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    log "building kubernetes $KUBE_VERSION (several minutes on 2 cores)"
    mkdir -p "$out.tmp"
    (cd "$here/go/k8s" && go build -trimpath -ldflags "-s -w $ld" -o "$out.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
    rm -rf "$out" && mv "$out.tmp" "$out"
  fi
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do link "$b" "$out"; done
}

build_etcd() {
  local out=$bin/etcd-$ETCD_VERSION
  if [[ -x $out/etcd ]]; then log "etcd $ETCD_VERSION cached"; else
    log "building etcd $ETCD_VERSION"
    mkdir -p "$out.tmp"
    (cd "$here/go/etcd" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .)
    rm -rf "$out" && mv "$out.tmp" "$out"
  fi
  link etcd "$out"
}

# go_install NAME MODULE_PATH VERSION [LDFLAGS]
go_install() {
  local name=$1 path=$2 version=$3 ld=${4:-}
  local out=$bin/$name-$version
  if [[ -x $out/$name ]]; then log "$name $version cached"; else
    log "building $name $version"
    GOBIN="$out.tmp" GOFLAGS= go install -trimpath -ldflags "-s -w $ld" "$path@$version"
    rm -rf "$out" && mv "$out.tmp" "$out"
  fi
  link "$name" "$out"
}

build_kubernetes
build_etcd
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
go_install kwokctl sigs.k8s.io/kwok/cmd/kwokctl "$KWOK_VERSION"
go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
log "binaries ready in $bin"
