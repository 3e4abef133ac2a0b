"""Links from a run to the live view of its sandboxes (liveview.py): status.liveView names the
latest episode's sandbox with the commands that show it, and the report lists the latest step's
sandboxes and their episodes; no token is written, and runs off a pool note nothing."""

from __future__ import annotations

import json
from pathlib import Path

from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.telemetry.liveview import SANDBOXES, note_sandboxes

NAMES = {"http://10.244.0.7:8000": "desks-0", "http://10.244.0.9:8000": "desks-2"}


def episodes(step: int) -> list[EpisodeResult]:
    urls = ["http://10.244.0.7:8000", "http://10.244.0.9:8000", "http://10.244.0.7:8000"]
    return [EpisodeResult(task_id="t", group_id="g", key=f"s{step:04d}-e{i}", sandbox=url)
            for i, url in enumerate(urls)]  # fmt: skip


def test_status_points_at_the_latest_episodes_sandbox_without_a_token(tmp_path: Path) -> None:
    link = note_sandboxes(tmp_path, NAMES, episodes(1), ("ml", "desks"))
    assert link == {
        "sandbox": "desks-0",  # the last episode's
        "namespace": "ml",
        "portForward": "kubectl -n ml port-forward pod/desks-0 6080:6080",
        "url": "http://127.0.0.1:6080/vnc.html?autoconnect=1&resize=scale"
        "&path=websockify%3Ftoken%3D<token>",
    }
    saved = json.loads((tmp_path / SANDBOXES).read_text())
    assert saved == {"namespace": "ml", "pool": "desks", "names": NAMES}


def test_report_lists_the_latest_steps_sandboxes_with_their_commands(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    for step in (1, 2):
        report.save_episodes(step, episodes(step))
        note_sandboxes(tmp_path, NAMES, episodes(step), ("ml", "desks"))
    html = report.render().read_text()
    assert 'id="live-view"' in html
    assert "kubectl -n ml port-forward pod/desks-0 6080:6080" in html
    assert "kubectl -n ml port-forward pod/desks-2 6080:6080" in html
    assert "s0002-e0, s0002-e2" in html  # desks-0's episodes of the latest step
    assert "s0001-e0" not in html.split('id="live-view"')[1].split("</table>")[0]
    assert "get secret -l kubecua.dev/pool=desks" in html  # how to get the token, not the token


def test_runs_off_a_pool_note_nothing(tmp_path: Path) -> None:
    assert note_sandboxes(tmp_path, NAMES, episodes(1), None) is None  # static URLs, local
    assert note_sandboxes(tmp_path, {}, episodes(1), ("ml", "desks")) is None  # names unknown
    assert not (tmp_path / SANDBOXES).exists()
    report = RunReport(tmp_path, "r")
    report.save_episodes(1, episodes(1))
    assert 'id="live-view"' not in report.render().read_text()
