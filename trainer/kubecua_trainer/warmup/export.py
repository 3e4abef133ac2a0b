"""Export a run's successful episodes as demonstrations (rejection-sampling fine-tuning data).

    python -m kubecua_trainer export-successes out/demo --to demos/run1.jsonl [--min-reward 1.0]

Reads the training episodes a run wrote (<run output>/episodes/step-*.jsonl; evaluation episodes
are left out: they are of held-out tasks), keeps those whose reward is at least --min-reward,
and writes them to a new trajectory file with copies of their screenshots beside it
(<file's folder>/screens/<key>/), every field of each line kept. spec.warmup.demonstrations of
the next run can point at the file. Leaves out: de-duplicating identical episodes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from kubecua_trainer.config import ConfigError
from kubecua_trainer.trajectories import read_trajectories


def export_successes(run_dir: Path, to: Path, min_reward: float = 1.0) -> tuple[int, int]:
    """(episodes read, episodes exported). Refuses to touch an existing file."""
    files = sorted((run_dir / "episodes").glob("step-*.jsonl"))
    if not files:
        raise ConfigError(f"{run_dir}: no episodes/step-*.jsonl (is it a run's output folder?)")
    if to.exists():
        raise ConfigError(f"--to: {to} exists; export into a new file")
    read, kept = 0, []
    for f in files:
        for traj in read_trajectories(f):
            read += 1
            if traj.reward is not None and traj.reward >= min_reward:
                kept.append((traj.record, f.parent))
    keys = [str(record.get("key") or "episode") for record, _ in kept]
    taken = [k for k in keys if (to.parent / "screens" / k).exists()]
    if taken or len(set(keys)) < len(keys):  # checked before copying anything
        raise ConfigError(f"--to: episode keys {taken or keys} taken in {to.parent / 'screens'}")
    to.parent.mkdir(parents=True, exist_ok=True)
    lines = [_copy(record, src, to.parent) for record, src in kept]
    to.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return read, len(lines)


def _copy(record: dict[str, Any], src: Path, dest: Path) -> dict[str, Any]:
    """The line with its screenshots copied under dest/screens/<key>/ and the paths redone."""
    line = json.loads(json.dumps(record))  # a deep copy
    key = str(line.get("key") or "episode")
    target = dest / "screens" / key

    def moved(rel: str | None) -> str | None:
        if not rel:
            return rel
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target / Path(rel).name)
        return f"screens/{key}/{Path(rel).name}"

    for turn in line["turns"]:
        turn["screenshot"] = moved(turn.get("screenshot"))
    line["final_screenshot"] = moved(line.get("final_screenshot"))
    return line
