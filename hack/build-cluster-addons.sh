#!/usr/bin/env bash
# Builds the cluster add-ons the integration tests run as local processes against the control
# plane (docs/cluster-integrations.md):
#   kueue                 sigs.k8s.io/kueue/cmd/kueue (go install)
#   prometheus-operator   cmd/operator, through the wrapper module hack/go/prometheus-operator
#   metrics-server        sigs.k8s.io/metrics-server/cmd/metrics-server (go install)
# Binaries land in $KUBECUA_CACHE/bin/<tool>-<version>/ and are linked into $KUBECUA_CACHE/bin;
# nothing is rebuilt while the versions (hack/versions.env) are unchanged. The CRDs the tests
# install come from the same modules in the Go module cache (`go env GOMODCACHE`).
# Usage: hack/build-cluster-addons.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[build-cluster-addons] %s\n' "$*" >&2; }

kueue=$bin/kueue-$KUEUE_VERSION
if [[ -x $kueue/kueue ]]; then log "kueue $KUEUE_VERSION cached"; else
  log "building kueue $KUEUE_VERSION (several minutes on 2 cores)"
  GOBIN="$kueue.tmp" GOFLAGS= go install -trimpath -ldflags \
    "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  rm -rf "$kueue" && mv "$kueue.tmp" "$kueue"
fi
ln -sfn "$kueue/kueue" "$bin/kueue"

promop=$bin/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION
if [[ -x $promop/prometheus-operator ]]; then
  log "prometheus-operator $PROMETHEUS_OPERATOR_VERSION cached"
else
  log "building prometheus-operator $PROMETHEUS_OPERATOR_VERSION (a few minutes on 2 cores)"
  mkdir -p "$promop.tmp"
  (cd "$here/go/prometheus-operator" && go build -trimpath -o "$promop.tmp/prometheus-operator" \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_OPERATOR_VERSION#v}" \
    github.com/prometheus-operator/prometheus-operator/cmd/operator)
  rm -rf "$promop" && mv "$promop.tmp" "$promop"
fi
ln -sfn "$promop/prometheus-operator" "$bin/prometheus-operator"

metrics=$bin/metrics-server-$METRICS_SERVER_VERSION
if [[ -x $metrics/metrics-server ]]; then log "metrics-server $METRICS_SERVER_VERSION cached"; else
  log "building metrics-server $METRICS_SERVER_VERSION (a few minutes on 2 cores)"
  GOBIN="$metrics.tmp" GOFLAGS= go install -trimpath -ldflags \
    "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
    "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION"
  rm -rf "$metrics" && mv "$metrics.tmp" "$metrics"
fi
ln -sfn "$metrics/metrics-server" "$bin/metrics-server"
# The CRDs' and manifests' source, fetched into the module cache (a no-op once there).
GOFLAGS= go mod download "sigs.k8s.io/kueue@$KUEUE_VERSION" \
  "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
  "sigs.k8s.io/metrics-server@$METRICS_SERVER_VERSION"
log "add-ons ready in $bin"
