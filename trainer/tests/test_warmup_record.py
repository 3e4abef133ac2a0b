"""The recorder on REAL local desktops (Xvfb + episode servers from `kubecua-sandbox-local`):
it plays the offline suite's reference solutions as agent replies, writes demonstrations with
real full-size screenshots and the real evaluator's reward, and its demonstrations, replayed
action by action through the episode API, succeed again. A task whose reference the agent cannot
say is skipped with a message. Needs `make sandbox-env` (skipped, saying so, without it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox, task
from PIL import Image

from kubecua_sandbox_client import ObservationOptions, SandboxClient
from kubecua_trainer.cli import main
from kubecua_trainer.config import TasksConfig
from kubecua_trainer.rollout.agent import parse_action
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import LocalSource, launcher_path
from kubecua_trainer.trajectories import Trajectory, read_trajectories
from kubecua_trainer.warmup.record import OUT_FILE, load_references, record_references

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "sandbox-image" / "tasks"
IDS = ["infeasible-cloud-upload", "gedit-greeting"]  # 1 turn (FAIL); 3 turns (type, save, DONE)

needs_desktops = pytest.mark.skipif(
    not launcher_path().exists() or not TASKS.exists(),
    reason=f"{launcher_path()} or {TASKS} missing: run `make sandbox-env`",
)


@needs_desktops
def test_references_outside_the_action_space_are_skipped_with_a_reason() -> None:
    refs, skipped = load_references(TASKS, [*IDS, "create-hello-file"])
    assert [r.task_id for r in refs] == IDS
    assert refs[1].replies[1] == "```python\npyautogui.hotkey('ctrl', 's')\n```"  # no poll loop
    assert len(skipped) == 1
    assert skipped[0].startswith("create-hello-file: its reference is not in the agent's action")


def test_record_plays_the_solution_entry_it_is_told_to() -> None:
    """--solution demonstration: a task family's biased demonstrator (colourkeys pressed m for
    both red squares of colourkeys-ryr) instead of the reference; a task without that entry (a
    held-out instance) is skipped, saying so."""
    ck = TASKS / "colourkeys"
    refs, skipped = load_references(ck, ["colourkeys-ryr", "colourkeys-rgb"], "demonstration")
    assert [r.task_id for r in refs] == ["colourkeys-ryr"]
    assert refs[0].replies[:3] == [f"```python\npyautogui.press('{k}')\n```" for k in "mym"]
    assert skipped == [
        "colourkeys-rgb: colourkeys-rgb.solutions.json has no demonstration steps; skipped"
    ]
    (ref,), _ = load_references(ck, ["colourkeys-ryr"])
    assert ref.replies[0] == "```python\npyautogui.press('r')\n```"


async def replay(leases: SandboxLeases, token: str | None, demo: Trajectory) -> float:
    """Start the demonstration's task afresh, send its recorded actions, return the score."""
    (task,) = load_tasks(TasksConfig(path=str(TASKS), ids=[demo.task_id]))
    async with leases.lease() as lease, SandboxClient(lease.url, token, 300) as client:
        obs = ObservationOptions(max_pixels=64 * 64)  # only the score matters here
        begun = await client.start_episode(task, observation=obs)
        try:
            for turn in demo.turns:
                assert turn.action is not None
                await client.step(begun.episode_id, turn.action)
            return (await client.evaluate(begun.episode_id)).score
        finally:
            await client.release(begun.episode_id)


@needs_desktops
@pytest.mark.asyncio
async def test_recorded_demonstrations_replay_successfully(tmp_path: Path) -> None:
    refs, _ = load_references(TASKS, IDS)
    source = LocalSource(2, tmp_path / "sandboxes", start_timeout=300)
    leases = SandboxLeases()
    try:
        await source.start(leases)
        episodes = await record_references(refs, leases, source.token, tmp_path / "demos")
        demos = list(read_trajectories(tmp_path / "demos" / OUT_FILE))
        scores = [await replay(leases, source.token, d) for d in demos]
    finally:
        await source.stop()
    assert sorted(e.outcome for e in episodes) == ["success", "success"], [
        e.detail for e in episodes
    ]
    assert sorted(d.task_id for d in demos) == sorted(IDS)
    assert scores == [1.0, 1.0]
    for demo in demos:
        ref = next(r for r in refs if r.task_id == demo.task_id)
        assert [t.reply for t in demo.turns] == ref.replies
        assert [t.action for t in demo.turns] == [parse_action(r).wire for r in ref.replies]
        assert demo.reward == 1.0
        assert demo.image_size == demo.screen_size  # replies keep the desktop's coordinates
        for turn in demo.turns:
            assert turn.screenshot is not None
            with Image.open(turn.screenshot) as shot:
                assert shot.size == demo.screen_size  # the desktop's own full-size image
                assert len(shot.convert("L").getcolors(256) or []) > 8  # a real screen, not blank
    line = json.loads((tmp_path / "demos" / OUT_FILE).read_text().splitlines()[0])
    assert line["recorded_by"] == "kubecua record"


def test_record_command_with_urls_and_a_token_file(tmp_path: Path, capsys) -> None:
    """The CLI against a loopback episode server (real HTTP, synthetic screen): the static
    source takes the token from --token-file; a second recording into the folder is refused."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "t1.json").write_text(json.dumps(task("t1", "clicked", 2)))
    steps = ["pyautogui.click(1, 2)", "import time\ntime.sleep(0.1)\npyautogui.press('a')", "DONE"]
    reference = [{"action": a, "action_space": "pyautogui"} for a in steps]
    (tasks / "t1.solutions.json").write_text(json.dumps({"reference": reference}))
    (tmp_path / "token").write_text(TOKEN + "\n")
    out = tmp_path / "demos"
    with LoopbackSandbox() as sandbox:
        args = ["record", "--tasks", str(tasks), "--urls", sandbox.url, "--out", str(out)]
        assert main([*args, "--token-file", str(tmp_path / "token"), "--repeats", "2"]) == 0
        assert sandbox.steps == ["pyautogui.click(1, 2)", "pyautogui.press('a')", "DONE"] * 2
        assert main([*args, "--token-file", str(tmp_path / "token")]) == 2
    printed = capsys.readouterr()
    assert "2 episodes {'success': 2}" in printed.out
    assert "exists; record into a new folder" in printed.err
    demos = list(read_trajectories(out))
    assert sorted(d.record["key"] for d in demos) == ["rec-t1-r00", "rec-t1-r01"]
    assert all(d.reward == 1.0 and len(d.turns) == 3 for d in demos)
