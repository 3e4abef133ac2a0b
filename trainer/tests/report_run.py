"""A run's output folder with real content, for the report's tests: episodes written by the
trainer's own writer (trajectories.write_trajectories) with full-size 1920x1080 PNG screenshots
whose text says what they are, training history, and two evaluations in the evaluation layout.

The model saw each screenshot resized to 1280x720 (SEEN), so its replies' coordinates are in
that image; the actions sent to the desktop are scaled by 1.5, as the rollout does.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.trajectories import write_trajectories

SCREEN = (1920, 1080)
SEEN = (1280, 720)
CLICK = (960, 180)  # in SEEN: 75% across, 25% down; (1440, 270) on the screen
DRAG = ((100, 600), (400, 650))
FEEDBACK = "Your last reply was not a valid action: no action found."
# Held-out results: (task, domain) -> successes out of 2 episodes, at steps 0 and 2.
EVALS = {
    0: {("files-rename", "files"): 1, ("gedit-greeting", "gedit"): 0},
    2: {("files-rename", "files"): 2, ("gedit-greeting", "gedit"): 1},
}
HISTORY = [
    {"step": 1, "reward_mean": 0.25, "success_rate": 0.0, "episodes": 2, "excluded": 1},
    {"step": 2, "reward_mean": 0.5, "success_rate": 0.5, "episodes": 2, "excluded": 1},
]


@functools.cache  # drawing and encoding a 1920x1080 PNG is the slow part of building a run
def screen(label: str) -> tuple[bytes, Image.Image]:
    """A 1920x1080 desktop with a title bar, `label` in large text and a button at CLICK; as
    the desktop sends it (PNG bytes) and as the model saw it (resized to SEEN)."""
    img = Image.new("RGB", SCREEN, (236, 236, 240))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, SCREEN[0], 48), fill=(40, 60, 120))
    draw.text((40, 120), label, fill=(0, 0, 0), font=ImageFont.load_default(size=72))
    x, y = CLICK[0] * 3 // 2, CLICK[1] * 3 // 2
    draw.rectangle((x - 90, y - 30, x + 90, y + 30), fill=(200, 40, 40))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return buf.getvalue(), img.resize(SEEN)


def episode(key: str, task_id: str, reward: float | None) -> EpisodeResult:
    """Four turns: a click, a drag then typing, an invalid reply, DONE after text feedback."""
    ep = EpisodeResult(task_id=task_id, group_id=key[:9], key=key, instruction=f"Do {task_id}")
    shots = [screen(f"{task_id} turn {i}") for i in range(3)]
    (a, b), code = DRAG, "pyautogui.write('hello')"
    ep.turns = [
        Turn(shots[0][1], f"```python\npyautogui.click({CLICK[0]}, {CLICK[1]})\n```",
             "pyautogui.click(1440, 270)", screen=shots[0][0]),
        Turn(shots[1][1], f"```python\npyautogui.moveTo{a}\npyautogui.dragTo{b}\n{code}\n```",
             "pyautogui.moveTo(150, 900)...", screen=shots[1][0]),
        Turn(shots[2][1], "I am not sure what to do", None, feedback=FEEDBACK,
             screen=shots[2][0]),
        Turn(None, "DONE", "DONE"),
    ]  # fmt: skip
    ep.final_screen, ep.final_screenshot = screen(f"{task_id} final")
    ep.screen_size = SCREEN
    if reward is None:
        ep.fail("setup_failed", "HTTP 502 SetupFailed")
    else:
        ep.score(reward)
    return ep


def build_run(out: Path) -> RunReport:
    """Two training steps and evaluations at steps 0 and 2, then render()."""
    report = RunReport(out, "demo")
    for row in HISTORY:
        step = int(row["step"])
        keys = [f"s{step:04d}-g00-e{e:02d}" for e in range(2)]
        eps = [episode(keys[0], "t1", float(row["reward_mean"]) * 2), episode(keys[1], "t1", None)]
        report.save_episodes(step, eps)
        report.append_history(row)
    for step, tasks in EVALS.items():
        write_evaluation(out, step, tasks)
    report.render()
    return report


def write_evaluation(out: Path, step: int, tasks: dict[tuple[str, str], int]) -> None:
    """The evaluation layout of the contracts: episodes.jsonl + screens, summary.json, history."""
    folder = out / "evaluations" / f"step-{step:04d}"
    rows = []
    for t, ((task_id, domain), wins) in enumerate(sorted(tasks.items())):
        keys = [f"eval-s{step:04d}-t{t:03d}-e{e:02d}" for e in range(2)]
        eps = [episode(k, task_id, 1.0 if e < wins else 0.0) for e, k in enumerate(keys)]
        write_trajectories(folder / "episodes.jsonl", eps, step=step, domain=domain)
        pass_2 = 1.0 if wins else 0.0
        rows.append({"task_id": task_id, "domain": domain, "scored": 2, "excluded": 0,
                     "successes": wins, "success_rate": wins / 2, "mean_score": wins / 2,
                     "pass_at_k": {"1": wins / 2, "2": pass_2}, "episodes": keys})  # fmt: skip
    wins = sum(tasks.values())
    summary = {
        "step": step, "model": "tiny", "seed": 0, "temperature": 0.0, "episodes_per_task": 2,
        "max_turns": 4, "success_rate": wins / 4, "mean_score": wins / 4, "scored": 4,
        "excluded": 0, "excluded_by_reason": {}, "seconds": 1.0,
        "pass_at_k": {k: sum(r["pass_at_k"][k] for r in rows) / 2 for k in ("1", "2")},
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps({**summary, "tasks": rows}))
    with (out / "evaluations" / "history.jsonl").open("a") as f:
        f.write(json.dumps(summary) + "\n")
