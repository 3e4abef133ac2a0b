"""A SandboxPool's live view (spec.liveView): watch a sandbox's desktop in a browser while an
agent acts on it. noVNC, served by the sandbox on its port 6080 behind the pool's bearer token,
reached with `kubectl port-forward pod/<sandbox> 6080`; the pool's NetworkPolicy opens no port
for it (sandbox-image/desktop-server/kubecua_desktop/liveview/)."""

from __future__ import annotations

from pydantic import Field

from kubecua_api.common import ApiModel

LIVE_VIEW_PORT = 6080


class LiveView(ApiModel):
    enabled: bool = Field(
        default=False,
        description="Serve the live view from each sandbox (backend pod without desktop.vm"
        " only: the image's x11vnc and noVNC). Off by default.",
    )
    interactive: bool = Field(
        default=False,
        description="Let the viewer's mouse and keyboard reach the desktop. By default the view"
        " is read-only: x11vnc drops every input event.",
    )

    @property
    def mode(self) -> str:
        """KUBECUA_LIVE_VIEW for the sandbox image: off, viewOnly or interactive."""
        if not self.enabled:
            return "off"
        return "interactive" if self.interactive else "viewOnly"


class LiveViewStatus(ApiModel):
    sandbox: str | None = Field(
        default=None, description="The sandbox (pod) the run's latest episode ran on."
    )
    namespace: str | None = Field(default=None, description="Its namespace.")
    port_forward: str | None = Field(
        default=None,
        description="The command that brings its live view to 127.0.0.1 (its pool must set"
        " spec.liveView.enabled).",
    )
    url: str | None = Field(
        default=None,
        description="The page to open then, with the pool's token (its Secret's token key) in"
        " place of <token>.",
    )
