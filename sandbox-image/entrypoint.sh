#!/bin/sh
# The sandbox image's two run modes (docs/episode-api.md, "Run modes"):
#   (no args)       the full sandbox: desktop (:5000) and episode server (:8000) under supervisord
#   episode-server  only the episode server, for a desktop elsewhere (KUBECUA_DESKTOP_URL, e.g. a
#                   KubeVirt VM): what the operator's kubevirt backend runs, with `args: [episode-server]`
#   anything else   run as given (`podman run IMAGE bash`)
set -eu
case "${1:-}" in
  "") exec /usr/bin/supervisord -c /etc/kubecua/supervisord.conf ;;
  episode-server)
    shift
    exec /opt/kubecua/episode-server/.venv/bin/python -m kubecua_episode \
      --remote --host 0.0.0.0 --port 8000 "$@" ;;
  *) exec "$@" ;;
esac
