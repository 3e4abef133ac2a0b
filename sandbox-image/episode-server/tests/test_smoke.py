"""Quick end-to-end: a trivial task through the client on a real desktop."""

from __future__ import annotations

import asyncio
import base64

from conftest import LocalSandbox

from kubecua_sandbox_client import SandboxClient

TASK = {
    "id": "smoke",
    "instruction": "write a file",
    "config": [],
    "evaluator": {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": "cat /home/user/s.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"include": ["yes"], "exclude": []}},
    },
}


def test_episode_scores_reference_and_resets(sandbox: LocalSandbox) -> None:
    async def run() -> tuple[float, bool, bytes]:
        async with SandboxClient(sandbox.url, sandbox.token) as sb:
            ep = await sb.start_episode(TASK)
            png = base64.b64decode(ep.observation.screenshot)
            code = "import pathlib; (pathlib.Path.home() / 's.txt').write_text('yes')"
            res = await sb.step(ep.episode_id, code)
            assert "error" not in res.info, res.info
            score = (await sb.evaluate(ep.episode_id)).score
            rel = await sb.release(ep.episode_id)
            return score, rel.clean, png

    score, clean, png = asyncio.run(run())
    assert png.startswith(b"\x89PNG")
    assert score == 1.0
    assert clean
    assert not (sandbox.home / "s.txt").exists()
