#!/usr/bin/env bash
# Checks the chart's generated Grafana dashboards against Grafana's own dashboard types: the npm
# package @grafana/schema, compiled with tsc in strict mode (make lint-dashboards).
#   hack/grafana-schema-check/check.sh [FILE.json...]   default: charts/kubecua/dashboards/*.json
#   hack/grafana-schema-check/check.sh --self-test      proves an unknown field and a wrong type fail
# The pinned packages (package-lock.json) are installed once per lock file with `npm ci`, into
# $KUBECUA_CACHE/npm/grafana-schema-check-<hash of the lock>/, never into the repository.
set -euo pipefail
for tool in node npm; do
  command -v "$tool" >/dev/null || {
    echo "grafana-schema-check: needs $tool on PATH (Node.js 18 or later with npm; Debian 12: apt-get install nodejs npm)" >&2
    exit 1
  }
done
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}/npm
deps=$cache/grafana-schema-check-$(sha256sum "$here/package-lock.json" | cut -c1-16)
if [[ ! -f $deps/node_modules/typescript/bin/tsc ]]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.grafana-schema-check.XXXXXX")
  cp "$here/package.json" "$here/package-lock.json" "$tmp/"
  (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --cache "$cache/_cache" >&2)
  rm -rf "$deps"
  mv -T "$tmp" "$deps" || rm -rf "$tmp" # a concurrent run moved its copy in first
fi
cd "$repo"
if [[ $# -eq 0 ]]; then
  set -- charts/kubecua/dashboards/*.json
fi
exec node "$here/check.mjs" "$deps/node_modules" "$@"
