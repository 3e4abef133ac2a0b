"""What an evaluation leaves on disk, under <output dir>/evaluations/:

    step-0003/summary.json           the figures (written last: its presence marks the step done)
    step-0003/episodes.jsonl         every episode in the trajectory format (trajectories.py),
    step-0003/screens/<key>/...      with extra keys step and domain
    step-0003/osworld/pyautogui/screenshot/<model>/<domain>/<task id>/
        result.txt                   the task's mean score, one float, as OSWorld's runner writes
        traj.jsonl                   one line per agent step, OSWorld's key names
        step_<n>_<episode key>.png   the screen after step n
    history.jsonl                    one summary line (no per-task rows) per evaluated step

OSWorld's runner plays one episode per task; with several, traj.jsonl holds every episode's
steps in order (each line names its `episode`) and result.txt their mean score.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.trajectories import write_trajectories

ACTION_SPACE, OBSERVATION_TYPE = "pyautogui", "screenshot"
# <output dir>/untrained/ holds the evaluation of the starting model before the warm-up
# (spec.evaluation.beforeWarmup), laid out as above; report/views.py reads it from there.
UNTRAINED = "untrained"


def evaluations_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "evaluations"


def step_dir(out_dir: str | Path, step: int) -> Path:
    return evaluations_dir(out_dir) / f"step-{step:04d}"


def is_done(out_dir: str | Path, step: int) -> bool:
    return (step_dir(out_dir, step) / "summary.json").is_file()


def start_fresh(out_dir: str | Path, step: int) -> Path:
    """An empty folder for the step: what an interrupted evaluation left there is discarded."""
    folder = step_dir(out_dir, step)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def write_results(
    folder: Path,
    summary: dict[str, Any],
    episodes: list[EpisodeResult],
    domains: dict[str, str],
) -> None:
    """Everything of one evaluated step; summary.json last, atomically, so a kill at any point
    leaves a step that the next run evaluates again."""
    step = int(summary["step"])
    for ep in episodes:  # one call each: the domain differs between lines
        domain = domains.get(ep.task_id, "default")
        write_trajectories(folder / "episodes.jsonl", [ep], step=step, domain=domain)
    osworld = folder / "osworld" / ACTION_SPACE / OBSERVATION_TYPE / summary["model"]
    for row in summary["tasks"]:
        task_eps = [e for e in episodes if e.task_id == row["task_id"]]
        write_osworld_task(osworld / row["domain"] / row["task_id"], row, task_eps)
    history = {k: v for k, v in summary.items() if k != "tasks"}
    with (folder.parent / "history.jsonl").open("a") as f:
        f.write(json.dumps(history) + "\n")  # readers keep the last line of a step
    tmp = folder / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, folder / "summary.json")


def write_osworld_task(folder: Path, row: dict[str, Any], episodes: list[EpisodeResult]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if row["mean_score"] is not None:  # no scored episode: no result, as for an unfinished task
        (folder / "result.txt").write_text(f"{row['mean_score']}\n")
    with (folder / "traj.jsonl").open("w") as f:
        for ep in episodes:
            for line in osworld_steps(folder, ep):
                f.write(json.dumps(line) + "\n")


def osworld_steps(folder: Path, ep: EpisodeResult) -> list[dict[str, Any]]:
    """One OSWorld runner line per turn: step_num (1-based), action, response (the reply),
    reward (0 per step; the score is in result.txt), done, info, screenshot_file (the screen
    after the step: the next one the agent was shown, else the final one)."""
    lines = []
    for i, turn in enumerate(ep.turns):
        after = next((t.screen for t in ep.turns[i + 1 :] if t.screen is not None), None)
        after = after if after is not None else ep.final_screen
        shot = None
        if after is not None:
            ext = "jpg" if after[:3] == b"\xff\xd8\xff" else "png"
            shot = f"step_{i + 1}_{ep.key}.{ext}"
            (folder / shot).write_bytes(after)
        last = i == len(ep.turns) - 1
        info: dict[str, Any] = {"episode": ep.key}
        if turn.feedback:
            info["feedback"] = turn.feedback
        if last:
            info.update(outcome=ep.outcome, score=ep.reward, detail=ep.detail or None)
        lines.append(
            {
                "episode": ep.key,
                "step_num": i + 1,
                "action": turn.action,
                "response": turn.reply,
                "reward": 0.0,
                "done": last,
                "info": info,
                "screenshot_file": shot,
            }
        )
    return lines


def read_history(out_dir: str | Path) -> list[dict[str, Any]]:
    """history.jsonl, one row per step (the last one written wins), sorted by step."""
    path = evaluations_dir(out_dir) / "history.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    by_step = {int(r["step"]): r for r in rows}
    return [by_step[s] for s in sorted(by_step)]
