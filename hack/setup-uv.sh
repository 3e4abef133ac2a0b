#!/usr/bin/env bash
# Installs the pinned uv into $KUBECUA_CACHE/bin/uv-<version>/ (from PyPI, the only index reachable).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}
dest=$cache/bin/uv-$UV_VERSION
[[ -x $dest/uv ]] && exit 0
tmp=$(mktemp -d)
python3 -m pip install --quiet --disable-pip-version-check --target "$tmp" "uv==$UV_VERSION"
mkdir -p "$dest" && cp "$tmp/bin/uv" "$dest/uv" && rm -rf "$tmp"
echo "[setup-uv] uv $UV_VERSION in $dest" >&2
