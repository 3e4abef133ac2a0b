"""Links to the live view of the sandboxes a run's episodes ran on (a SandboxPool with
spec.liveView; sandbox-image/desktop-server/kubecua_desktop/liveview/): the TrainingRun's
status.liveView names the latest episode's sandbox and how to watch it, and the report lists the
latest step's sandboxes (sandboxes.json beside it: episode-server URL -> sandbox name).

The trainer cannot tell whether the pool enabled the live view (it reads EndpointSlices only),
so the commands say that it must be. No token is written anywhere: the page's URL holds
<token>, which the user fills in from the pool's Secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubecua_api.liveview import LIVE_VIEW_PORT

if TYPE_CHECKING:
    from kubecua_trainer.rollout.records import EpisodeResult

SANDBOXES = "sandboxes.json"
PAGE = (f"http://127.0.0.1:{LIVE_VIEW_PORT}/vnc.html?autoconnect=1&resize=scale"
        "&path=websockify%3Ftoken%3D<token>")  # fmt: skip


def watch(namespace: str, sandbox: str, pool: str) -> dict[str, str]:
    """How to watch one sandbox: e.g. watch("ml", "desks-3", "desks")["portForward"] ==
    "kubectl -n ml port-forward pod/desks-3 6080:6080"."""
    secret = (f"kubectl -n {namespace} get secret -l kubecua.dev/pool={pool}"
              " -o jsonpath='{.items[0].data.token}' | base64 -d")  # fmt: skip
    return {
        "sandbox": sandbox,
        "namespace": namespace,
        "portForward": f"kubectl -n {namespace} port-forward pod/{sandbox} "
        f"{LIVE_VIEW_PORT}:{LIVE_VIEW_PORT}",
        "url": PAGE,
        "token": secret,
    }


def note_sandboxes(
    out_dir: Path, names: dict[str, str], episodes: list[EpisodeResult],
    where: tuple[str, str] | None,
) -> dict[str, str] | None:  # fmt: skip
    """Rank 0 after a step: remember the names of the sandboxes its episodes ran on (for the
    report); status.liveView for the latest one. where: (namespace, pool), for a pool's
    sandboxes only (None: nothing to note)."""
    ran = {e.sandbox: names[e.sandbox] for e in episodes if e.sandbox in names}
    if where is None or not ran:
        return None
    path = Path(out_dir) / SANDBOXES
    known = json.loads(path.read_text()) if path.exists() else {}
    known["namespace"], known["pool"] = where
    known.setdefault("names", {}).update(ran)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known))
    tmp.replace(path)
    latest = next(names[e.sandbox] for e in reversed(episodes) if e.sandbox in names)
    link = watch(where[0], latest, where[1])
    return {k: v for k, v in link.items() if k != "token"}  # status.liveView


def read_sandboxes(out_dir: Path) -> dict[str, Any] | None:
    path = Path(out_dir) / SANDBOXES
    return dict(json.loads(path.read_text())) if path.exists() else None
