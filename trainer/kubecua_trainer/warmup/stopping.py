"""spec.warmup.stopWhen: measure the warming policy on training tasks between chunks of epochs.

After every stopWhen.everyEpochs epochs the engine gets the learner's weights and plays, on
stopWhen.tasks training tasks (spec.tasks, drawn with spec.seed, the same ones each time; never
held-out tasks), one greedy episode each and k episodes each at temperature 1, with the run's
maxTurns, leases and failure rules (evaluation/runner.py's episodes: nothing is trained on).
Greedy pass@1 is the share of scored greedy episodes that succeeded; pass@k the share of tasks
with a success among their scored k. The warm-up stops once pass@1 >= greedyPassMin and pass@k
>= passAtKMin, or as soon as pass@1 > greedyPassMax (overshot: going on only moves further out).
Sampling is seeded from (spec.seed, epochs), so a repeated measurement of the same weights on
one sandbox repeats. Each rank plays its share and gets every episode (all_gather), so every
rank scores the same check and takes the same decision.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubecua_api.warmup import WarmupStopConfig
from kubecua_trainer.evaluation.runner import play_evaluation, seeded_sampling
from kubecua_trainer.rollout.records import EpisodeResult

if TYPE_CHECKING:
    from kubecua_trainer.run.loop import Loop


@dataclass
class Check:
    epochs: int
    greedy_pass: float | None
    pass_at_k: float | None
    scored: int
    excluded: int
    verdict: str  # "go on", "stop" (in the window) or "overshot"

    def line(self, k: int) -> str:
        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.0%}"

        return (
            f"warm-up check after {self.epochs} epochs: greedy pass@1 {pct(self.greedy_pass)}, "
            f"pass@{k} {pct(self.pass_at_k)} on training tasks ({self.scored} scored episodes"
            f", {self.excluded} excluded): {self.verdict}"
        )


def probe_tasks(tasks: list[dict[str, Any]], rule: WarmupStopConfig, seed: int) -> list[dict]:
    """The training tasks every check measures: rule.tasks of them, drawn with the run's seed."""
    if len(tasks) <= rule.tasks:
        return list(tasks)
    return random.Random(f"kubecua-warmup-probe:{seed}").sample(tasks, rule.tasks)


def verdict(rule: WarmupStopConfig, greedy: float | None, at_k: float | None) -> str:
    """
    >>> r = WarmupStopConfig()
    >>> verdict(r, 0.1, 0.9), verdict(r, 0.3, 0.6), verdict(r, 0.3, 0.8), verdict(r, 0.6, 0.9)
    ('go on', 'go on', 'stop', 'overshot')
    """
    if greedy is None or at_k is None:
        return "go on"
    if greedy > rule.greedy_pass_max:
        return "overshot"
    if greedy >= rule.greedy_pass_min and at_k >= rule.pass_at_k_min:
        return "stop"
    return "go on"


def score(
    epochs: int,
    rule: WarmupStopConfig,
    greedy: list[EpisodeResult],
    sampled: list[EpisodeResult],
) -> Check:
    scored_greedy = [e for e in greedy if e.reward is not None]
    by_task: dict[str, list[bool]] = {}
    for e in sampled:
        if e.reward is not None:
            by_task.setdefault(e.task_id, []).append(e.outcome == "success")
    wins = sum(e.outcome == "success" for e in scored_greedy)
    g = wins / len(scored_greedy) if scored_greedy else None
    k = sum(any(v) for v in by_task.values()) / len(by_task) if by_task else None
    scored = len(scored_greedy) + sum(len(v) for v in by_task.values())
    return Check(epochs, g, k, scored, len(greedy) + len(sampled) - scored, verdict(rule, g, k))


async def measure(lp: Loop, tasks: list[dict], rule: WarmupStopConfig, epochs: int) -> Check | None:
    """One check of the warming policy (None: a stop abandoned it)."""
    d, stop = lp.dist, lp.stop
    await lp.sync.updated(0)  # the engine plays with the weights as they are now
    await lp.sync.checkpointed(0, None)
    ro = lp.ro
    greedy_ro = dataclasses.replace(
        ro, algorithm=ro.algorithm.model_copy(update={"temperature": 0.0, "temperature_end": None})
    )
    sampled_ro = dataclasses.replace(
        ro, algorithm=ro.algorithm.model_copy(update={"temperature": 1.0, "temperature_end": None})
    )
    share = (d.rank, d.world)

    async def both() -> tuple[list[EpisodeResult], list[EpisodeResult]]:
        greedy = await play_evaluation(greedy_ro, tasks, -epochs, 1, None, share)
        sampled = await play_evaluation(sampled_ro, tasks, -epochs, rule.k, None, share)
        return greedy, sampled

    seed = random.Random(f"kubecua-warmup:{lp.spec.seed}:{epochs}:{d.rank}").getrandbits(63)
    finishing, stop.finishing = stop.finishing, False  # a check is abandoned, not finished
    try:
        with seeded_sampling(seed):
            done, played = await stop.unless_stopped(both())
    finally:
        stop.finishing = finishing
    if d.any(not done):
        return None
    gathered = d.all_gather(played)
    greedy = [e for g, _ in gathered for e in g]
    sampled = [e for _, s in gathered for e in s]
    return score(epochs, rule, greedy, sampled)
