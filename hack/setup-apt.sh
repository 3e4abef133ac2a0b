#!/usr/bin/env bash
# Installs the Debian packages listed in hack/apt/*.txt (one per line, # comments), or in the
# list files given as arguments (`make demo` passes its own smaller set, hack/apt/demo/).
# A stamp keyed by the list's hash makes repeated runs free; a changed list installs again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${KUBECUA_CACHE:-$HOME/.cache/kubecua}
lists=("$@"); [[ ${#lists[@]} -gt 0 ]] || lists=("$here"/apt/*.txt)
mapfile -t pkgs < <(cat "${lists[@]}" | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)
[[ ${#pkgs[@]} -eq 0 ]] && exit 0
stamp=$cache/apt-$(printf '%s\n' "${pkgs[@]}" | sha256sum | cut -c1-16).stamp
[[ -f $stamp ]] && exit 0
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "[setup-apt] installing: ${missing[*]}" >&2
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_=sudo
  $sudo_ apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p "$cache" && touch "$stamp"
