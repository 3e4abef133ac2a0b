#!/usr/bin/env bash
# OSWorld's tasks run "google-chrome" and stop it with "pkill chrome"; Debian ships Chromium.
# A hard link named "chrome" beside Chromium's resources makes the browser's process name
# "chrome" (a symlink does not: Chromium re-executes its real path). Idempotent; needs root.
# The google-chrome wrapper itself lives in the desktop-server package and the session puts it
# on PATH; pass --wrapper to also install it as /usr/local/bin/google-chrome (the image does).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ -x /usr/lib/chromium/chromium ]] || { echo "link-chrome: chromium is not installed" >&2; exit 1; }
ln -f /usr/lib/chromium/chromium /usr/lib/chromium/chrome
if [[ ${1:-} == --wrapper ]]; then
  install -m 0755 "$here/../desktop-server/kubecua_desktop/session/google-chrome" /usr/local/bin/google-chrome
fi
