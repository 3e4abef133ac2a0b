"""The evaluation stage of a run (pipeline.py): held-out tasks at step 0, every
evaluation.everySteps steps and at the last step; a run with steps 0 only evaluates.

A step is evaluated once: evaluations/step-NNNN/summary.json on disk marks it done, so a resumed
run skips it, and a run killed mid-evaluation evaluates it again. An evaluated step is
checkpointed first (when checkpoint.everySteps did not already), so an evaluation that fails or
is stopped never costs training work, and the weights behind each figure stay on disk (within
checkpoint.keep) for a standalone evaluation. A stop abandons an evaluation (its sandboxes are
released) and the run exits as stopped.
With evaluation.beforeWarmup the starting model is evaluated too, before the warm-up, by the same
rules (not checkpointed: the warm-up's checkpoint is step 0), into untrained/evaluations/.
Figures: evaluation/scoring.py; files: evaluation/results.py; episodes: evaluation/runner.py.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubecua_trainer.config import EvaluationConfig
from kubecua_trainer.evaluation import results
from kubecua_trainer.evaluation.runner import (
    eval_rollout,
    play_evaluation,
    sampling_seed,
    seeded_sampling,
)
from kubecua_trainer.evaluation.scoring import TaskFigures, summarize
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.telemetry.status import build_evaluation_status

if TYPE_CHECKING:
    from kubecua_trainer.run.loop import Loop


def is_due(cfg: EvaluationConfig, step: int, steps: int) -> bool:
    """Step 0 when atStart (always for an evaluate-only run), every everySteps, the last step.
    Example: everySteps 2, 5 steps, atStart: 0, 2, 4, 5."""
    if step == 0:
        return cfg.at_start or steps == 0
    return step == steps or (cfg.every_steps > 0 and step % cfg.every_steps == 0)


async def evaluate_if_due(lp: Loop, step: int) -> None:
    cfg = lp.spec.evaluation
    if cfg is None or lp.held_out is None or not is_due(cfg, step, lp.spec.steps):
        return
    if _done(lp, lp.result.out_dir, step):
        return  # a resumed run: this step's figures are on disk already
    if step > lp.saver.step:  # collective, as every rank gets here
        lp.saver.save(step)  # the work behind the figures is kept whatever happens next
    await _evaluate(lp, cfg, step, untrained=False)


async def evaluate_untrained_if_asked(lp: Loop) -> bool:
    """spec.evaluation.beforeWarmup: the starting model, evaluated as the run's step 0 is, into
    <outputDir>/untrained/ (what `evaluate --output-dir <outputDir>/untrained` writes, which the
    report and bench/learning/summary.py read). Only before the warm-up has run (no checkpoint
    yet: after it, the starting weights are gone) and until its summary.json is written.
    False: a stop abandoned it (agreed by the ranks)."""
    cfg = lp.spec.evaluation
    if cfg is None or lp.held_out is None or not cfg.before_warmup or lp.saver.path is not None:
        return True
    if _done(lp, lp.result.out_dir / results.UNTRAINED, 0):
        return True  # a run killed or stopped during the warm-up: evaluated already
    return await _evaluate(lp, cfg, 0, untrained=True)


def _done(lp: Loop, out_dir: Path, step: int) -> bool:
    """Whether step's summary.json is on rank 0's disk, for every rank."""
    d = lp.dist
    return bool(d.broadcast(results.is_done(out_dir, step) if d.is_main else None))


async def _evaluate(lp: Loop, cfg: EvaluationConfig, step: int, untrained: bool) -> bool:
    """Every rank plays its share; rank 0 writes the results and publishes them (an untrained
    evaluation: only the report and a console line, as the status and metrics follow the run's
    steps). False: a stop abandoned it, and the run exits as stopped."""
    assert lp.held_out is not None
    tasks, domains = lp.held_out.tasks, lp.held_out.domains
    t0 = time.monotonic()
    episodes = await _play(lp, cfg, tasks, step)
    name = "the untrained model" if untrained else f"step {step}"
    if episodes is None:
        lp.progress.say(f"evaluation of {name} stopped; the next run evaluates it again")
        lp.result.stopped_at = lp.saver.step  # the run is not finished: exit as stopped
        lp.stop.requested.set()  # agreed by the ranks: a stop on every rank
        return False
    if lp.dist.is_main:
        out_dir = lp.result.out_dir / results.UNTRAINED if untrained else lp.result.out_dir
        summary = _summary(lp, cfg, step, episodes, tasks, domains, time.monotonic() - t0)
        results.write_results(results.start_fresh(out_dir, step), summary, episodes, domains)
        if untrained:
            lp.report.try_render()
            lp.progress.say(console_line(summary, f"evaluation of {name} (before the warm-up)"))
        else:
            _publish(lp, summary, episodes)
    return True


async def _play(
    lp: Loop, cfg: EvaluationConfig, tasks: list[dict], step: int
) -> list[EpisodeResult] | None:
    """Every rank plays its share; rank 0 gets them all (key order). None: a stop abandoned it
    (on any rank)."""
    d, stop = lp.dist, lp.stop
    total = len(tasks) * cfg.episodes_per_task
    lp.progress.start_step(step, total)
    lp.progress.bar.update(lp.progress.steps, info=f"step {step}: evaluation")

    def on_episode(ep: EpisodeResult) -> None:
        lp.progress.episode_done(ep.outcome)

    ro = eval_rollout(lp.ro, cfg)
    share = (d.rank, d.world)
    play = play_evaluation(ro, tasks, step, cfg.episodes_per_task, on_episode, share)
    finishing, stop.finishing = stop.finishing, False  # an evaluation is abandoned, not finished
    try:
        with seeded_sampling(sampling_seed(lp.spec.seed, step, d.rank)):
            done, played = await stop.unless_stopped(play)
    finally:
        stop.finishing = finishing
    if d.any(not done):
        return None
    gathered = d.all_gather(played)
    return sorted((e for mine in gathered for e in mine), key=lambda e: e.key)


def _summary(
    lp: Loop,
    cfg: EvaluationConfig,
    step: int,
    episodes: list[EpisodeResult],
    tasks: list[dict],
    domains: dict[str, str],
    seconds: float,
) -> dict[str, Any]:
    figures = []
    for task in tasks:
        tid = str(task["id"])
        mine = [e for e in episodes if e.task_id == tid]
        figures.append(TaskFigures(tid, domains.get(tid, "default"), mine))
    overall = summarize(figures, cfg.episodes_per_task)
    tasks_rows = overall.pop("tasks")
    return {
        "step": step,
        "model": Path(lp.spec.model.path).name,
        "seed": lp.spec.seed,
        "temperature": cfg.temperature,
        "episodes_per_task": cfg.episodes_per_task,
        "max_turns": cfg.max_turns or lp.spec.algorithm.max_turns,
        **overall,
        "tasks": tasks_rows,
        "seconds": round(seconds, 3),
    }


def _publish(lp: Loop, summary: dict[str, Any], episodes: list[EpisodeResult]) -> None:
    """Metrics, the TrainingRun status (in a cluster), the report and one console line. The
    report is rendered here, not only after a training step: the last evaluation comes after
    the last step's render, and the report would end on the one before it."""
    lp.metrics.observe_evaluation(summary, Counter(e.outcome for e in episodes))
    if lp.patcher is not None:
        lp.patcher.patch({"evaluation": build_evaluation_status(summary)})
    lp.report.try_render()
    lp.progress.say(console_line(summary))


def republish_last(lp: Loop) -> None:
    """A resumed run shows its newest evaluation (up to its checkpoint) on its new metrics
    endpoint and in the status again: a restarted pod's gauges start empty, and a kill between
    summary.json and the status patch would leave the status behind."""
    if lp.spec.evaluation is None or not lp.dist.is_main:
        return
    out_dir = lp.result.out_dir
    done = [row["step"] for row in results.read_history(out_dir) if row["step"] <= lp.saver.step]
    done = [s for s in done if results.is_done(out_dir, s)]
    if not done:
        return
    path = results.step_dir(out_dir, max(done)) / "summary.json"
    summary = json.loads(path.read_text())
    lp.metrics.observe_evaluation(summary, {})  # its episodes were counted by that run
    if lp.patcher is not None:
        finished = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        lp.patcher.patch({"evaluation": build_evaluation_status(summary, finished)})


def console_line(summary: dict[str, Any], title: str | None = None) -> str:
    """e.g. "evaluation at step 4: success 38% of 8 scored episodes (1 excluded: timeout 1),
    pass@4 75%, 12.3s"; `title` replaces "evaluation at step 4"."""
    rate = summary["success_rate"]
    text = (title or f"evaluation at step {summary['step']}") + ": "
    text += f"success {rate:.0%}" if rate is not None else "success n/a"
    text += f" of {summary['scored']} scored episodes"
    if summary["excluded"]:
        reasons = ", ".join(f"{k} {n}" for k, n in summary["excluded_by_reason"].items())
        text += f" ({summary['excluded']} excluded: {reasons})"
    k = max(summary["pass_at_k"], key=int)
    if k != "1" and summary["pass_at_k"][k] is not None:
        text += f", pass@{k} {summary['pass_at_k'][k]:.0%}"
    return text + f", {summary['seconds']:.1f}s"
