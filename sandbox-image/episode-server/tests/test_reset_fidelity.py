"""Every episode on one sandbox starts from the same state: what an earlier episode changed in
the desktop's user state (GNOME settings in dconf, files in the home) never shows in a later
one's reward. Settings are what a kept-alive dconf-service used to leak: it held the settings in
memory across the home's restore, so a repeated correct write was dropped (scored 0) and an
unrelated write brought an earlier episode's value back (a no-op scored 1)."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import LocalSandbox

from kubecua_sandbox_client import ObservationOptions, SandboxClient, SettleOptions

OBS = ObservationOptions(format="jpeg", max_pixels=320 * 180)
SETTLE = SettleOptions(min_seconds=0.0, max_seconds=0.0, stable_frames=1)
KEY = "org.gnome.desktop.interface color-scheme"
TASK: dict[str, Any] = {
    "id": "reset-dark-style",
    "instruction": "Switch the desktop to the dark style.",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": f"gsettings get {KEY}", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "'prefer-dark'\n"}},
    },
}


def gsettings(*args: str) -> str:
    """An action that runs gsettings on the desktop, as a terminal command would."""
    argv = ["gsettings", *args]
    return f"import subprocess; subprocess.run({argv!r}, check=True)"


CORRECT = [gsettings("set", *KEY.split(), "prefer-dark")]
NOOP: list[str] = []
# Writes another key: a dconf-service that kept the last episode's database in memory writes
# all of it back, prefer-dark included.
UNRELATED = [gsettings("set", "org.gnome.desktop.interface", "clock-show-seconds", "true")]


async def _episode(sb: SandboxClient, actions: list[str]) -> tuple[float, float]:
    ep = await sb.start_episode(TASK, OBS, SETTLE)
    try:
        for action in actions:
            result = await sb.step(ep.episode_id, action)
            assert "error" not in result.info, result.info
        await sb.step(ep.episode_id, "DONE")
        score = (await sb.evaluate(ep.episode_id)).score
    finally:
        released = await sb.release(ep.episode_id)
    assert released.clean
    return score, released.reset_seconds


def test_settings_task_scores_the_same_every_time_on_one_sandbox(sandbox: LocalSandbox) -> None:
    plan = [CORRECT, NOOP, CORRECT, UNRELATED, CORRECT, CORRECT, NOOP, UNRELATED] * 2

    async def run() -> list[tuple[float, float]]:
        async with SandboxClient(sandbox.url, sandbox.token, timeout=180) as sb:
            return [await _episode(sb, actions) for actions in plan]

    results = asyncio.run(run())
    scores = [score for score, _ in results]
    assert scores == [1.0 if actions is CORRECT else 0.0 for actions in plan]
    resets = sorted(seconds for _, seconds in results)
    print(f"reset seconds after a settings episode: p50 {resets[len(resets) // 2]:.2f}, "
          f"max {resets[-1]:.2f}")  # fmt: skip
