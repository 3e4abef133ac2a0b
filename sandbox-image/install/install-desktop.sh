#!/usr/bin/env bash
# Installs the desktop of a kubecua sandbox: the Debian packages in apt-packages.txt, then the
# OSWorld conventions (link-chrome.sh). The image's Dockerfile runs exactly this; on a dev host
# `make setup-apt` installs the same list (hack/apt/sandbox.txt links to it) and
# `make desktop-host` runs link-chrome.sh.
#   sudo sandbox-image/install/install-desktop.sh
# Leaves out: the non-root user and the Python venvs (the Dockerfile does those).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(sed 's/#.*//' "$here/apt-packages.txt" | tr -s ' \t' '\n' | grep -v '^$')
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
"$here/link-chrome.sh"
