"""The live view of a sandbox's desktop: x11vnc on the Xvfb display (on 127.0.0.1 only, read-only
unless the pool asks for interactive), and websockify serving Debian's noVNC to the browser and
bridging its WebSocket to x11vnc, behind the pool's bearer token (plugin/kubecua_live_token.py).

Off unless the pool enables it (SandboxPool spec.liveView; the operator sets KUBECUA_LIVE_VIEW).
The pool's NetworkPolicy opens no port for it: a user reaches it with `kubectl port-forward`.
Run: `python -m kubecua_desktop.liveview --help`.
"""
