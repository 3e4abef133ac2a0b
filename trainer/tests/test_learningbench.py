"""The learning benchmark's pure parts: the family as the trainer reads it, the reward read from a
reply, the goal's verdict, and the demo's closing lines (no desktops, no model)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learning import family
from bench.learning.run import verdict
from bench.learning.summary import summary


def test_family_splits_and_warmup_instances() -> None:
    train, heldout = family.load_split("train"), family.load_split("heldout")
    assert (len(train), len(heldout)) == (70, 30)
    assert not {t["id"] for t in train} & {t["id"] for t in heldout}
    warm = family.warmup_tasks()
    assert len(warm) == 16
    assert {t["id"] for t in warm} <= {t["id"] for t in train}


def test_offline_reward_is_one_only_for_typing_exactly_the_words() -> None:
    task = next(t for t in family.load_split("heldout") if t["id"] == "typeword-black-banana")
    assert family.offline_reward(task, family.reference_reply(task)) == 1.0
    assert family.offline_reward(task, "```python\npyautogui.write('black')\n```") == 0.0
    assert family.offline_reward(task, "```python\npyautogui.write('black bananas')\n```") == 0.0
    assert family.offline_reward(task, "DONE") == 0.0
    assert family.offline_reward(task, "write('black banana')") == 0.0  # not an action


def _run(start: float, end: float, n: int = 30) -> dict:
    point = {"episodes": n}
    return {"heldout_start": {**point, "success": start}, "heldout_end": {**point, "success": end},
            "rise": round(end - start, 4)}  # fmt: skip


def test_verdict_needs_every_seed_up_20_points_and_a_still_control() -> None:
    seeds = [_run(0.1, 0.4), _run(0.2, 0.4), _run(0.0, 0.3)]
    assert verdict(seeds, _run(0.1, 0.1333))["goal_reached"]  # the control moved 1 episode of 30
    assert not verdict(seeds, _run(0.1, 0.2))["goal_reached"]  # 3 episodes: it moved
    low = [_run(0.1, 0.4), _run(0.2, 0.3), _run(0.0, 0.3)]
    assert not verdict(low, _run(0.1, 0.1))["every_seed_rises_20_points"]


def test_demo_summary_gives_the_episodes_behind_each_figure(tmp_path: Path) -> None:
    (tmp_path / "evaluations").mkdir()
    rows = [{"step": 0, "success_rate": 0.1, "scored": 30, "excluded": 0},
            {"step": 4, "success_rate": 0.3, "scored": 30, "excluded": 2}]  # fmt: skip
    (tmp_path / "evaluations/history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "curves.png").write_bytes(b"png")
    lines = summary(tmp_path)
    assert lines[1] == "  after the warm-up, step 0: 3/30 episodes = 10% (95% interval 3%-26%)"
    assert (
        lines[2] == "  after GRPO, step 4: 9/30 episodes = 30% (95% interval 17%-48%, 2 excluded)"
    )
    assert lines[3] == f"curves: {tmp_path / 'curves.png'}"
    assert summary(tmp_path / "nothing")[0].startswith("no evaluation found")
    # The untrained model's figure, when the demo evaluated it into <out>/untrained.
    (tmp_path / "untrained/evaluations").mkdir(parents=True)
    row = {"step": 0, "success_rate": 0.0, "scored": 30, "excluded": 0}
    (tmp_path / "untrained/evaluations/history.jsonl").write_text(json.dumps(row) + "\n")
    lines = summary(tmp_path)
    assert lines[1] == "  untrained model: 0/30 episodes = 0% (95% interval 0%-11%)"
    assert lines[2].startswith("  after the warm-up, step 0: 3/30")
