"""The warm-up stage of a run (pipeline.py): spec.warmup's supervised fine-tuning before GRPO.

It runs once per run: only while the run has no checkpoint, and it ends by writing the checkpoint
of step 0, so a resumed run skips it. A run killed (or stopped) during the warm-up has no
checkpoint yet and redoes the warm-up from the start when it resumes. Afterwards the engine gets
the warmed weights (its own copy refreshed, or a disk-loading server sent the checkpoint).
Each epoch's loss is one console line (with the time left) and one log record (the run's log
file, trainer.log: cli.py); <outputDir>/warmup.json keeps them all.
With KUBECUA_WARMUP_STATE=1 in its environment, a run of one process also writes the warm-up's
optimizer and shuffle state (<outputDir>/warmup-state.pt), so that its fit can be continued
from the step-0 checkpoint (bench/learning/continued_sft.py does); off by default, as for a
large model that state is twice its weights in fp32.
With spec.warmup.stopWhen the epochs run in chunks, the policy measured on training tasks after
each but the last (warmup/stopping.py), and the warm-up ends when the rule holds (warmup.json:
the checks). No check follows the last chunk: at spec.warmup.epochs the warm-up ends whatever it
says, and on real desktops a check costs as much as several GRPO steps.
After the last epoch spec.warmup.goal measures whether the warm-up took (warmup/goal.py, on the
demonstrations, no desktop), and below it goal.onBelowGoal continues, extends once or fails the
run; the measurement and what was done go to warmup.json ("goal"), the console, status.warmup,
the kubecua_trainer_warmup_* gauges and the report. A run resumed after its warm-up shows them
again, and one whose warm-up failed its goal fails again at once rather than go on to GRPO from
the checkpoint it kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import torch

from kubecua_trainer.parallel.threads import to_thread_on
from kubecua_trainer.telemetry.status import build_warmup_status
from kubecua_trainer.warmup import goal as goals
from kubecua_trainer.warmup.demos import demo_samples, load_demonstrations
from kubecua_trainer.warmup.sft import DemoFit
from kubecua_trainer.warmup.stopping import Check, measure, probe_tasks

if TYPE_CHECKING:
    from kubecua_trainer.run.loop import Loop
    from kubecua_trainer.trajectories import Trajectory

log = logging.getLogger(__name__)
WARMUP_STATE = "warmup-state.pt"


async def warm_up_if_needed(lp: Loop) -> None:
    spec, saver, d = lp.spec, lp.saver, lp.dist
    if spec.warmup is None:
        return
    if saver.path is not None:
        resumed(lp)
        return
    cfg = spec.warmup
    demos = load_demonstrations(spec, lp.held_out.ids if lp.held_out else set())
    say = lp.progress.say if d.is_main else (lambda _: None)
    say(
        f"warm-up: {len(demos)} demonstrations of {len({x.task_id for x in demos})} tasks, "
        f"{cfg.epochs} epoch(s) of batches of {cfg.batch_size}, learning rate {cfg.learning_rate:g}"
    )

    def build(demo: Trajectory) -> list:
        return demo_samples(lp.policy, demo, spec.algorithm, spec.rollout)

    last = [time.monotonic()]
    total = [cfg.epochs]  # an extension (goal.onBelowGoal extend) raises it
    timing = EpochTimes()

    def on_epoch(epoch: int, loss: float) -> None:
        now = time.monotonic()
        seconds, last[0] = now - last[0], now
        left = timing.left(seconds, total[0] - epoch)
        log.info("warm-up epoch %d/%d: loss %.4f (%.1f s)", epoch, total[0], loss, seconds)
        say(
            f"warm-up epoch {epoch}/{total[0]}: loss {loss:.4f} per reply token"
            f" ({seconds:.1f} s{left})"
        )

    def should_stop() -> bool:  # every rank answers alike: the steps hold collectives
        return d.any(lp.stop.requested.is_set())

    t0 = time.monotonic()
    fitter = DemoFit(lp.learner, demos, build, cfg, spec.seed)
    rule = cfg.stop_when
    probe = probe_tasks(lp.tasks, rule, spec.seed) if rule else []
    checks: list[Check] = []
    fit_seconds = 0.0  # in the fit alone, checks left out
    while fitter.epochs < cfg.epochs:
        chunk = cfg.epochs - fitter.epochs
        if rule is not None:
            chunk = min(chunk, rule.every_epochs)
        t1 = last[0] = time.monotonic()
        fit = await to_thread_on(lp.policy.device, fitter.run, chunk, on_epoch, should_stop)
        fit_seconds += time.monotonic() - t1
        if fit.stopped:
            say("stopped during the warm-up; nothing saved: the next run redoes it from the start")
            return
        if rule is None or fitter.epochs >= cfg.epochs:
            continue  # the last chunk: the warm-up ends whatever a check would say
        t1 = time.monotonic()
        check = await measure(lp, probe, rule, fitter.epochs)
        log.info("warm-up check: %.1f s", time.monotonic() - t1)
        if check is None:
            say("stopped during a warm-up check; nothing saved: the next run redoes the warm-up")
            return
        checks.append(check)
        log.info(check.line(rule.k))  # in the log too: a run stopped later keeps no warmup.json
        say(check.line(rule.k))
        if check.verdict != "go on":
            break
    goal = cfg.goal
    indices = goals.goal_indices(len(demos), goal, spec.seed)
    reached = await _measure_goal(lp, fitter, indices)
    log.info(reached.line())
    say(reached.line())
    extended = 0
    if not reached.met and goal.on_below_goal == "extend":
        say(f"extending the warm-up by {goal.extend_epochs} epochs (goal.onBelowGoal extend)")
        total[0] = fitter.epochs + goal.extend_epochs
        t1 = last[0] = time.monotonic()
        fit = await to_thread_on(
            lp.policy.device, fitter.run, goal.extend_epochs, on_epoch, should_stop
        )
        fit_seconds += time.monotonic() - t1
        if fit.stopped:
            say("stopped during the warm-up; nothing saved: the next run redoes it from the start")
            return
        extended = goal.extend_epochs
        reached = await _measure_goal(lp, fitter, indices)
        log.info(reached.line())
        say(reached.line())
    result = goals.outcome(reached, goal, extended)
    fitter.finish()
    fit = fitter.fit
    path = saver.save(0)  # kept whatever the goal says: the work is not lost, and can be evaluated
    goal_record = goals.record(reached, goal, extended, result)
    if d.is_main:
        summary = {
            "seed": spec.seed,
            "demonstrations": len(demos),
            "tasks": sorted({x.task_id for x in demos}),
            "epochs": fitter.epochs,
            "max_epochs": cfg.epochs,
            "optimizer_steps": fit.steps,
            "reply_tokens_per_epoch": fit.tokens_per_epoch,
            "epoch_losses": [round(x, 6) for x in fit.epoch_losses],
            "seconds": round(time.monotonic() - t0, 3),
            "fit_seconds": round(fit_seconds, 3),
            "checkpoint": path,
            "goal": goal_record,
        }
        if rule is not None:
            summary["stop_when"] = rule.model_dump(by_alias=True)
            summary["checks"] = [dataclasses.asdict(c) for c in checks]
            summary["stopped_by"] = checks[-1].verdict if checks else "no check"
            if not checks or checks[-1].verdict == "go on":
                summary["stopped_by"] = "epochs (the rule never held)"
        (lp.result.out_dir / "warmup.json").write_text(json.dumps(summary, indent=1) + "\n")
        if os.environ.get("KUBECUA_WARMUP_STATE") == "1" and not d.enabled:
            torch.save(fitter.state_dict(), lp.result.out_dir / WARMUP_STATE)
        _publish(lp, goal_record)
        lp.report.try_render()  # a run that fails here shows its warm-up section
        say(_result_line(goal_record))
    if result == goals.FAILED:
        raise goals.WarmupBelowGoal(goals.failure_message(goal_record))
    await _engine_gets_weights(lp, path)


class EpochTimes:
    """The time left of the warm-up from its epochs' mean time so far (the first left out once
    there are others: it builds the demonstrations' samples, which later epochs reuse)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def left(self, seconds: float, epochs_left: int) -> str:
        """e.g. "; about 1 min 30 s left"; "" at the last epoch.

        >>> t = EpochTimes(); t.left(5.0, 10), t.left(1.0, 90), t.left(1.0, 0)
        ('; about 50 s left', '; about 1 min 30 s left', '')
        """
        self.seconds.append(seconds)
        if epochs_left <= 0:
            return ""
        times = self.seconds[1:] or self.seconds
        eta = round(epochs_left * sum(times) / len(times))
        text = f"{eta // 60} min {eta % 60} s" if eta >= 60 else f"{eta} s"
        return f"; about {text} left"


async def _measure_goal(lp: Loop, fitter: DemoFit, indices: list[int]) -> goals.GoalCheck:
    """spec.warmup.goal's measurement of the weights as they are now, with the engine's policy
    (its copy refreshed first, where it has one); every rank takes rank 0's figure."""
    assert lp.spec.warmup is not None
    await lp.sync.updated(0)
    policy = lp.ro.policy
    check = await to_thread_on(
        policy.device, goals.measure, policy, fitter.samples, indices, lp.spec.warmup.goal,
        fitter.epochs,
    )  # fmt: skip
    return lp.dist.broadcast(check)


def _publish(lp: Loop, goal: dict[str, Any], measured: datetime | None = None) -> None:
    """The goal's figures on the metrics endpoint and in the status (rank 0)."""
    lp.metrics.observe_warmup(goal)
    if lp.patcher is not None:
        lp.patcher.patch({"warmup": build_warmup_status(goal, measured)})


def _result_line(goal: dict[str, Any]) -> str:
    result = goal["result"]
    if result == goals.MET:
        return "the warm-up reached its goal"
    if result == goals.MET_AFTER:
        return f"the warm-up reached its goal after {goal['extended_epochs']} more epochs"
    if result == goals.CONTINUED:
        return (
            "WARNING: the warm-up ended below its goal; GRPO starts anyway"
            " (spec.warmup.goal.onBelowGoal continue): expect little to reinforce"
        )
    return "the warm-up ended below its goal: the run fails (its step-0 checkpoint is kept)"


def resumed(lp: Loop) -> None:
    """A run resumed after its warm-up: the goal's figures on this process's metrics endpoint
    and in the status again (a restarted pod's gauges start empty), and a warm-up that failed
    its goal fails the run again. Runs whose warmup.json has no goal (older) show nothing."""
    d = lp.dist
    goal: dict[str, Any] | None = None
    path = lp.result.out_dir / "warmup.json"
    if d.is_main and path.exists():
        goal = json.loads(path.read_text()).get("goal")
    goal = d.broadcast(goal)
    if goal is None:
        return
    if d.is_main:
        _publish(lp, goal, datetime.fromtimestamp(path.stat().st_mtime, UTC))
    if goal["result"] == goals.FAILED:
        if d.is_main:
            lp.progress.say(_result_line(goal))
        raise goals.WarmupBelowGoal(goals.failure_message(goal))


async def _engine_gets_weights(lp: Loop, path: str) -> None:
    """The engine plays GRPO's first episodes with the warmed weights (version 0)."""
    await lp.sync.updated(0)
    await lp.sync.checkpointed(0, path)
