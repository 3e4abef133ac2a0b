"""The last lines of `make demo`: the run's seed and its warm-up's goal, held-out success
untrained, after the warm-up and after GRPO,
each with the number of episodes behind it and its 95% interval, then whether GRPO's change is
outside the noise, and where the curves and the report are. Reads what the run wrote
(<out>/evaluations/history.jsonl, one line per evaluated step, each step's summary.json, and the
same under <out>/untrained); prints nothing it did not find.

Outside the noise: the warm-up's evaluation and the last one score the same held-out instances,
so each instance is a pair (failed or succeeded, before and after). McNemar's exact test
(bench/learning/paired.py) asks whether the instances that flipped to success outnumber those
that flipped to failure by more than coin tosses would. Two Wilson intervals that overlap can
still hide a paired change this test finds; two that do not overlap need no test.

    .venv/bin/python -m bench.learning.summary ../out/demo
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from bench.learning import paired

ALPHA = 0.05  # the demo's one test: a two-sided level, said in the line it prints


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate.

    >>> tuple(round(x, 3) for x in wilson(3, 30))
    (0.035, 0.256)
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def line(e: dict[str, Any]) -> str:
    n = int(e["scored"])
    k = round(e["success_rate"] * n)
    lo, hi = wilson(k, n)
    excluded = f", {e['excluded']} excluded" if e.get("excluded") else ""
    return (
        f"step {e['step']}: {k}/{n} episodes = {e['success_rate']:.0%} "
        f"(95% interval {lo:.0%}-{hi:.0%}{excluded})"
    )


def history(out: Path) -> list[dict[str, Any]]:
    path = out / "evaluations" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def rise(out: Path, first: int, last: int) -> str | None:
    """GRPO's change between two evaluations of the run, paired over the instances both scored,
    with McNemar's exact p and the verdict at ALPHA; None when a summary.json is missing."""
    paths = [out / "evaluations" / f"step-{s:04d}" / "summary.json" for s in (first, last)]
    if not all(p.exists() for p in paths):
        return None
    test = paired.compare([(paired.outcomes(out, first), paired.outcomes(out, last))])
    b, c, n = test["fail_to_success"], test["success_to_fail"], test["pairs"]
    points = 100 * (b - c) / max(1, n)
    if test["p"] < ALPHA:
        word = "a rise" if b > c else "a fall"
        verdict = f"{word} outside the noise (p < {ALPHA})"
    else:
        verdict = f"within the noise (p >= {ALPHA}): not shown to be a change"
    return (
        f"GRPO's change on the same {n} instances: {points:+.1f} points ({b} failed -> succeeded,"
        f" {c} succeeded -> failed; McNemar exact p = {test['p']:.3g}): {verdict}"
    )


def training(out: Path) -> str | None:
    """The GRPO steps' training episodes: success and shaped reward (spec.reward) per step, from
    <out>/history.jsonl; None before any step."""
    path = out / "history.jsonl"
    steps = (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )
    if not steps:
        return None
    success = ", ".join(f"{s['success_rate']:.2f}" for s in steps)
    shaped = ", ".join(
        f"{s.get('shaped_reward_mean', s.get('reward_mean', 0.0)):.2f}" for s in steps
    )
    episodes = sum(int(s.get("episodes", 0)) for s in steps)
    return (
        f"GRPO's {len(steps)} steps ({episodes} training episodes): success per step {success};"
        f" shaped reward per step {shaped}"
    )


def seed_and_warmup(out: Path, evals: list[dict[str, Any]]) -> list[str]:
    """The seed the run used (its warmup.json's, else its first evaluation's) and, with a
    warm-up, whether it reached spec.warmup.goal (warmup/goal.py)."""
    warm_path = out / "warmup.json"
    warm = json.loads(warm_path.read_text()) if warm_path.exists() else {}
    seed = warm.get("seed")
    if seed is None and evals:
        path = out / "evaluations" / f"step-{evals[0]['step']:04d}" / "summary.json"
        seed = json.loads(path.read_text()).get("seed") if path.exists() else None
    lines = []
    if seed is not None:
        lines.append(f"seed {seed} (make demo SEED=n, or run --seed n: the same recipe, another)")
    goal = warm.get("goal")
    if goal:
        verdict = "BELOW ITS GOAL" if goal["below_goal"] else "goal met"
        more = f", {goal['extended_epochs']} of them added" if goal["extended_epochs"] else ""
        lines.append(
            f"warm-up: {warm['epochs']} epochs{more}; the greedy policy reproduces"
            f" {goal['reply_match']:.0%} of {goal['replies']} demonstrated replies"
            f" (goal {goal['reply_match_min']:.0%}): {verdict}"
        )
    return lines


def summary(out: Path) -> list[str]:
    """The untrained model's figure (<out>/untrained, when `make demo` evaluated it), then the
    run's first evaluation (after the warm-up) and its last, then the paired verdict."""
    evals = history(out)
    first = seed_and_warmup(out, evals)
    if not evals:
        return [*first, f"no evaluation found ({out / 'evaluations/history.jsonl'} is missing)"]
    lines = [*first, "held-out success (tasks never trained on, greedy):"]
    untrained = history(out / "untrained")
    if untrained:
        lines.append(f"  untrained model: {line(untrained[0]).split(': ', 1)[1]}")
    labels = ["after the warm-up" if evals[0]["step"] == 0 else "first evaluation", "after GRPO"]
    shown = (evals[0], evals[-1]) if len(evals) > 1 else (evals[0],)
    lines += [f"  {labels[i]}, {line(e)}" for i, e in enumerate(shown)]
    if len(evals) > 1 and (verdict := rise(out, evals[0]["step"], evals[-1]["step"])):
        lines.append(verdict)
    if steps := training(out):
        lines.append(steps)
    for name in ("curves.png", "report.html"):
        if (out / name).exists():
            lines.append(f"{name.split('.')[0]}: {out / name}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the run's output folder")
    print("\n".join(summary(p.parse_args(argv).out)))


if __name__ == "__main__":
    main()
