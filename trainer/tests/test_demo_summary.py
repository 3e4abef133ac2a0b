"""`make demo`'s last lines (bench/learning/summary.py): GRPO's change is judged paired over the
same held-out instances, and the GRPO steps' shaped reward is shown beside their success."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learning.summary import summary


def evaluation(out: Path, step: int, succeeded: list[bool]) -> dict:
    """One evaluation of len(succeeded) instances as the run writes it (summary.json)."""
    rows = [
        {"task_id": f"colourkeys-{i:03d}", "scored": 1, "successes": int(ok)}
        for i, ok in enumerate(succeeded)
    ]
    folder = out / "evaluations" / f"step-{step:04d}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"tasks": rows}))
    rate = sum(succeeded) / len(succeeded)
    return {"step": step, "success_rate": rate, "scored": len(succeeded), "excluded": 0}


def write_history(out: Path, rows: list[dict]) -> None:
    (out / "evaluations/history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_paired_rise_of_ten_instances_against_none_is_outside_the_noise(tmp_path: Path) -> None:
    # 30 instances: 5 succeed before and after, 10 flip to success, none flip back.
    before = [True] * 5 + [False] * 25
    after = [True] * 15 + [False] * 15
    write_history(tmp_path, [evaluation(tmp_path, 0, before), evaluation(tmp_path, 4, after)])
    steps = [
        {"step": 1, "success_rate": 0.25, "shaped_reward_mean": 0.6, "episodes": 32},
        {"step": 2, "success_rate": 0.5, "shaped_reward_mean": 0.8, "episodes": 32},
    ]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    lines = summary(tmp_path)
    assert lines[1] == "  after the warm-up, step 0: 5/30 episodes = 17% (95% interval 7%-34%)"
    assert lines[2] == "  after GRPO, step 4: 15/30 episodes = 50% (95% interval 33%-67%)"
    # Exact McNemar: 2 x 0.5^10 = 0.00195.
    assert lines[3] == (
        "GRPO's change on the same 30 instances: +33.3 points (10 failed -> succeeded, 0"
        " succeeded -> failed; McNemar exact p = 0.00195): a rise outside the noise (p < 0.05)"
    )
    assert lines[4] == (
        "GRPO's 2 steps (64 training episodes): success per step 0.25, 0.50;"
        " shaped reward per step 0.60, 0.80"
    )


def test_three_flips_up_and_one_down_are_within_the_noise(tmp_path: Path) -> None:
    before = [True, False, False, False, True] + [False] * 25
    after = [False, True, True, True, True] + [False] * 25
    write_history(tmp_path, [evaluation(tmp_path, 0, before), evaluation(tmp_path, 2, after)])
    verdict = summary(tmp_path)[3]
    # Exact McNemar on 3 against 1: 2 x (1 + 4) / 16 = 0.625.
    assert verdict == (
        "GRPO's change on the same 30 instances: +6.7 points (3 failed -> succeeded, 1"
        " succeeded -> failed; McNemar exact p = 0.625): within the noise (p >= 0.05): not shown"
        " to be a change"
    )


def test_the_summary_opens_with_the_seed_and_whether_the_warm_up_reached_its_goal(
    tmp_path: Path,
) -> None:
    write_history(tmp_path, [evaluation(tmp_path, 0, [False] * 30)])
    goal = {"reply_match": 0.25, "replies": 96, "reply_match_min": 0.6, "below_goal": True,
            "extended_epochs": 30}  # fmt: skip
    warm = {"seed": 4, "epochs": 120, "goal": goal}
    (tmp_path / "warmup.json").write_text(json.dumps(warm))
    lines = summary(tmp_path)
    assert lines[0] == "seed 4 (make demo SEED=n, or run --seed n: the same recipe, another)"
    assert lines[1] == (
        "warm-up: 120 epochs, 30 of them added; the greedy policy reproduces 25% of 96"
        " demonstrated replies (goal 60%): BELOW ITS GOAL"
    )
    assert lines[2] == "held-out success (tasks never trained on, greedy):"
