"""What the report's templates show, read from a run's output folder: episodes of the trajectory
format (trajectories.py) with each turn's overlay, and the evaluations' summaries (the
evaluation layout: evaluations/step-NNNN/summary.json and episodes.jsonl)."""

from __future__ import annotations

import json
import os
import re
from hashlib import sha1
from pathlib import Path
from typing import Any

from kubecua_trainer.evaluation.results import UNTRAINED
from kubecua_trainer.report.overlays import action_marks, describe, shapes
from kubecua_trainer.trajectories import Trajectory, read_trajectories

THUMB_WIDTH = 320  # px: wide enough to see a window's layout; the full size is a click away
SCORED = ("success", "failure")


def episode_views(jsonl: Path, page_dir: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Every episode of a trajectory file, with image paths relative to `page_dir`, and why
    the file could not be read, if so (a line cut short by a crash): the page then says so,
    and the render, which runs inside the training loop, goes on."""
    if not jsonl.exists():
        return [], None
    try:
        return [episode_view(t, jsonl.parent, page_dir) for t in read_trajectories(jsonl)], None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return [], f"{jsonl.name} could not be read: {err}"


def episode_view(traj: Trajectory, folder: Path, page_dir: Path) -> dict[str, Any]:
    rec = traj.record
    size = traj.image_size or traj.screen_size  # what the reply's coordinates refer to
    screen = traj.screen_size or traj.image_size or (16, 9)
    turns = []
    for i, (turn, row) in enumerate(zip(traj.turns, rec["turns"], strict=True)):
        marks, error = action_marks(turn.reply)
        turns.append(
            {
                "n": i + 1,
                "image": _rel(turn.screenshot, page_dir),
                "reply": turn.reply,
                "action": turn.action,
                "feedback": row.get("feedback"),
                "error": error,
                "shapes": shapes(marks, size) if size else [],
                "captions": [describe(m) for m in marks],
            }
        )
    final = rec.get("final_screenshot")
    return {
        "key": str(rec.get("key", "")),
        "group_id": rec.get("group_id", ""),
        "task_id": traj.task_id,
        "domain": rec.get("domain", ""),
        "instruction": traj.instruction,
        "outcome": traj.outcome,
        "excluded": traj.outcome not in SCORED,
        "reward": traj.reward,
        "shaped_reward": rec.get("shaped_reward"),
        "detail": rec.get("detail") or "",
        "seconds": rec.get("seconds"),
        "turns": turns,
        "final": _rel(folder / final if final else None, page_dir),
        "screen": list(screen),
        "thumb": [THUMB_WIDTH, round(THUMB_WIDTH * screen[1] / screen[0])],
    }


def _rel(path: Path | None, page_dir: Path) -> str | None:
    """A file's URL relative to the page that shows it (pages and files move together)."""
    if path is None:
        return None
    return Path(os.path.relpath(path, page_dir)).as_posix()


def anchor(task_id: str) -> str:
    """The HTML id of a task's section on an evaluation page; stable, and safe in a URL.

    >>> anchor("gedit-greeting"), anchor("a b/c")
    ('task-gedit-greeting', 'task-a_b_c-fa4fb7')
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)
    return (
        f"task-{safe}"
        if safe == task_id
        else f"task-{safe}-{sha1(task_id.encode()).hexdigest()[:6]}"
    )


def load_evaluations(out_dir: Path) -> list[dict[str, Any]]:
    """Every evaluation's summary.json, by step, with "dir" (its folder) added. A summary being
    written (not yet JSON) is left for the next render."""
    found: dict[int, dict[str, Any]] = {}
    for path in (out_dir / "evaluations").glob("step-*/summary.json"):
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        found[int(summary["step"])] = {**summary, "dir": path.parent}
    return [found[s] for s in sorted(found)]


def load_untrained(out_dir: Path) -> dict[str, Any] | None:
    """The step-0 summary of an evaluation of the model before any training (the run's own with
    spec.evaluation.beforeWarmup, or `evaluate --output-dir <out_dir>/untrained`), in
    <out_dir>/untrained/, with "dir"; None without one."""
    found = load_evaluations(out_dir / UNTRAINED)
    return found[0] if found and int(found[0]["step"]) == 0 else None


def before_after(
    first: dict[str, Any], last: dict[str, Any], out_dir: Path, thumb: int = THUMB_WIDTH // 2
) -> list[dict[str, Any]]:
    """Each held-out task of `last` beside `first` (two summaries): its success rate and counts
    then and now, and the final screen of its first episode each time (paths relative to
    out_dir, where report.html is). Tasks in order of id."""

    def side(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
        episodes, _ = episode_views(summary["dir"] / "episodes.jsonl", out_dir)
        shots: dict[str, dict[str, Any]] = {}
        for shown in episodes:
            shots.setdefault(shown["task_id"], shown)
        rows = {str(t["task_id"]): dict(t) for t in summary.get("tasks", [])}
        for tid, row in rows.items():
            ep = shots.get(tid)
            row["episode"] = ep
            if ep is not None:
                w, h = ep["screen"]
                row["thumb"] = [thumb, round(thumb * h / w)]
        return rows

    before, after = side(first), side(last)
    return [
        {"task_id": tid, "before": before.get(tid), "after": after[tid],
         "change": _change(before.get(tid), after[tid])}
        for tid in sorted(after)
    ]  # fmt: skip


def _change(before: dict[str, Any] | None, after: dict[str, Any]) -> float | None:
    """Points of success rate gained (after - before); None when either has no rate."""
    b = None if before is None else before.get("success_rate")
    a = after.get("success_rate")
    return a - b if isinstance(a, int | float) and isinstance(b, int | float) else None


def task_table(evaluations: list[dict[str, Any]], pages: str) -> dict[str, Any]:
    """Rows: held-out tasks; columns: evaluated steps; cells: the task's success rate with its
    counts and the link to its trajectories on that evaluation's page (None: not evaluated)."""
    steps = [int(e["step"]) for e in evaluations]
    rows: dict[str, dict[str, Any]] = {}
    for col, summary in enumerate(evaluations):
        for task in summary.get("tasks", []):
            tid = str(task["task_id"])
            row = rows.setdefault(
                tid,
                {"task_id": tid, "domain": task.get("domain", ""), "cells": [None] * len(steps)},
            )
            row["cells"][col] = {
                "rate": task.get("success_rate", 0.0),
                "successes": task.get("successes", 0),
                "scored": task.get("scored", 0),
                "excluded": task.get("excluded", 0),
                "href": f"{pages}/{eval_page_name(steps[col])}#{anchor(tid)}",
            }
    return {"steps": steps, "rows": [rows[t] for t in sorted(rows)]}


def eval_tasks(summary: dict[str, Any], episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An evaluation page's sections: each task of the summary with its episodes, then any task
    whose episodes the summary does not list (every episode excluded, say)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for ep in episodes:
        by_task.setdefault(ep["task_id"], []).append(ep)
    sections = [
        {**t, "anchor": anchor(str(t["task_id"])), "episodes": by_task.pop(str(t["task_id"]), [])}
        for t in summary.get("tasks", [])
    ]
    for tid in sorted(by_task):
        sections.append({"task_id": tid, "anchor": anchor(tid), "episodes": by_task[tid]})
    return sections


def step_page_name(step: int) -> str:
    return f"step-{step:04d}.html"


def eval_page_name(step: int) -> str:
    return f"eval-{step:04d}.html"
