#!/usr/bin/env bash
# The unprivileged account a root-run kubecua-sandbox-local drops to for its desktop session,
# as the image runs its desktop as "user" (see docs/osworld-compat.md, "Local (non-image)
# sandboxes"). Idempotent; needs root. `make sandbox-env` runs it when make runs as root.
#   sandbox-image/install/local-desktop-user.sh sandbox-image/desktop-server/.venv/bin/python
# The account must run that venv (its interpreter, site-packages, the desktop-server package):
# directories on the way that it cannot enter (/root, say) get a search-only ACL for it.
#
# Security: like OSWorld's VM user, the account has sudo with the well-known password
# "password", so the agent on a local sandbox (and anyone on this host who can run
# `su kubecua-desktop`) can become root here. A root-run local sandbox could do that anyway.
set -euo pipefail
account=${KUBECUA_DESKTOP_ACCOUNT:-kubecua-desktop}
[[ $(id -u) -eq 0 ]] || { echo "local-desktop-user: needs root (sudo $0)" >&2; exit 1; }
if ! id -u "$account" >/dev/null 2>&1; then
  useradd --create-home --user-group --shell /bin/bash \
    --comment "kubecua local sandbox desktop" "$account"
fi
echo "$account:password" | chpasswd
# sudo asks for the account's password, as on OSWorld's VM (its user is in group sudo).
rule=/etc/sudoers.d/kubecua-desktop
printf '%s ALL=(ALL:ALL) ALL\n' "$account" >"$rule.tmp"
chmod 0440 "$rule.tmp"
visudo -cqf "$rule.tmp"
mv "$rule.tmp" "$rule"
as_account() { setpriv --reuid "$account" --regid "$account" --init-groups "$@"; }
# Search (x) on each directory above what the account must read, top down; only where missing.
reach() {
  local dir=/ part
  IFS=/ read -ra parts <<<"${1#/}"
  for part in "${parts[@]:0:${#parts[@]}-1}"; do
    dir=${dir%/}/$part
    as_account test -x "$dir" || setfacl -m "u:$account:x" "$dir"
  done
}
python=${1:?usage: $0 DESKTOP_VENV_PYTHON}
venv_python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
package=$("$python" -c 'import kubecua_desktop, os; print(os.path.dirname(kubecua_desktop.__file__))')
for path in "$(readlink -f "$python")" "$venv_python" "$package/__init__.py"; do
  reach "$path"
done
if ! as_account "$venv_python" -c "import kubecua_desktop.session"; then
  echo "local-desktop-user: $account cannot run $venv_python -m kubecua_desktop.session" >&2
  exit 1
fi
echo "local-desktop-user: $account ready (sudo with password \"password\")"
