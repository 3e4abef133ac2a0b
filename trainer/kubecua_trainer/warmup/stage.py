"""The warm-up stage of a run (pipeline.py): spec.warmup's supervised fine-tuning before GRPO.

It runs once per run: only while the run has no checkpoint, and it ends by writing the checkpoint
of step 0, so a resumed run skips it. A run killed (or stopped) during the warm-up has no
checkpoint yet and redoes the warm-up from the start when it resumes. Afterwards the engine gets
the warmed weights (its own copy refreshed, or a disk-loading server sent the checkpoint).
Each epoch's loss goes to the log and the console; <outputDir>/warmup.json keeps them all.
With KUBECUA_WARMUP_STATE=1 in its environment, a run of one process also writes the warm-up's
optimizer and shuffle state (<outputDir>/warmup-state.pt), so that its fit can be continued
from the step-0 checkpoint (bench/learning/continued_sft.py does); off by default, as for a
large model that state is twice its weights in fp32.
With spec.warmup.stopWhen the epochs run in chunks, the policy measured on training tasks after
each but the last (warmup/stopping.py), and the warm-up ends when the rule holds (warmup.json:
the checks). No check follows the last chunk: at spec.warmup.epochs the warm-up ends whatever it
says, and on real desktops a check costs as much as several GRPO steps.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import TYPE_CHECKING

import torch

from kubecua_trainer.threads import to_thread_on
from kubecua_trainer.warmup.demos import demo_samples, load_demonstrations
from kubecua_trainer.warmup.sft import DemoFit
from kubecua_trainer.warmup.stopping import Check, measure, probe_tasks

if TYPE_CHECKING:
    from kubecua_trainer.loop import Loop
    from kubecua_trainer.trajectories import Trajectory

log = logging.getLogger(__name__)
WARMUP_STATE = "warmup-state.pt"


async def warm_up_if_needed(lp: Loop) -> None:
    spec, saver, d = lp.spec, lp.saver, lp.dist
    if spec.warmup is None or saver.path is not None:
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

    def on_epoch(epoch: int, loss: float) -> None:
        now = time.monotonic()
        seconds, last[0] = now - last[0], now
        log.info("warm-up epoch %d/%d: loss %.4f (%.1f s)", epoch, cfg.epochs, loss, seconds)
        say(f"warm-up epoch {epoch}/{cfg.epochs}: loss {loss:.4f} per reply token")

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
    fitter.finish()
    fit = fitter.fit
    path = saver.save(0)
    if d.is_main:
        summary = {
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
    await _engine_gets_weights(lp, path)


async def _engine_gets_weights(lp: Loop, path: str) -> None:
    """The engine plays GRPO's first episodes with the warmed weights (version 0)."""
    await lp.sync.updated(0)
    await lp.sync.checkpointed(0, path)
