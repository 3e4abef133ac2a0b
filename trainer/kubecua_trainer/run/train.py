"""The training loop of one TrainingRun: rollout -> advantages -> learner step -> checkpoint.

Each step plays algorithm.groupSize episodes for each of algorithm.tasksPerStep tasks on the
sandboxes, builds the batch (batch.py: GRPO advantages, dynamic sampling, success replay),
takes one optimizer step, saves a checkpoint every checkpoint.everySteps steps and at the end,
and publishes metrics, the report and (in a cluster) the TrainingRun status. A run resumes
from the latest checkpoint under its checkpoint directory on its own.

Under torchrun (trainer.nodes x gpusPerNode > 1 processes) the run is one job: each rank plays
its share of the episodes, the learner is FSDP2-sharded, rank 0 writes checkpoints, status and
report (distributed.py, sharded.py, docs/distributed-training.md). rollout.maxStaleness > 0 lets
the next steps' episodes play while a step learns. With trainer.placement disaggregated some
processes only generate and the others only learn (placement.py, disaggregated.py).
The parts: step.py (one step's rollout and update), saver.py (checkpoints), stopping.py (SIGTERM),
weight_sync.py (the engine's weights), learner_setup.py, loop.py (what the steps share).
Run: `python -m kubecua_trainer run examples/trainingrun-local.yaml`.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from typing import Any

import torch

from kubecua_trainer.config import TrainingRun, TrainingRunSpec
from kubecua_trainer.engines import build_engine
from kubecua_trainer.evaluation.held_out import load_held_out
from kubecua_trainer.learning.learner_setup import build_learner, build_sharded_learner
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.distributed import Dist, check_world, init_from_env, shutdown
from kubecua_trainer.parallel.gpu_share import share_for
from kubecua_trainer.placement.disaggregated import (
    NoEngine,
    Roles,
    build_generator,
    join_roles,
    learner_mesh,
)
from kubecua_trainer.placement.placement import placement_of
from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.curriculum import build_curriculum
from kubecua_trainer.rollout.episode import Rollout
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.rollout.verified import publish_verified, select_verified
from kubecua_trainer.run import pipeline
from kubecua_trainer.run.loop import Loop, RunOptions, RunResult
from kubecua_trainer.run.saver import Saver, run_dirs
from kubecua_trainer.run.step import Played, learn, play
from kubecua_trainer.run.stopping import Stop
from kubecua_trainer.sources import SandboxLeases, build_source
from kubecua_trainer.sources.reclaim import owner_of, reclaim
from kubecua_trainer.telemetry.cost import CostLedger
from kubecua_trainer.telemetry.cost import publish as publish_cost
from kubecua_trainer.telemetry.metrics import TrainerMetrics
from kubecua_trainer.telemetry.progress import RunProgress
from kubecua_trainer.telemetry.status import StatusPatcher, build_status
from kubecua_trainer.weights.weight_sync import build_weight_sync

__all__ = ["RunOptions", "RunResult", "Stop", "train"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


async def train(run: TrainingRun, opts: RunOptions | None = None) -> RunResult:
    opts = opts or RunOptions()
    d = init_from_env()
    failed = True  # until _train returns: an error leaves the others waiting (shutdown says why)
    try:
        check_world(run.spec, d.world, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        roles = join_roles(placement_of(run.spec, d.world), d)
        stop = opts.stop or Stop()
        if opts.handle_signals:
            stop.listen(signal.SIGTERM, already=bool(opts.signals_seen))
        try:
            result = await _train(run, opts, stop, d, roles)
            failed = False
            return result
        finally:
            stop.close()
    finally:
        shutdown(d, failed)


async def _train(
    run: TrainingRun, opts: RunOptions, stop: Stop, d: Dist, roles: Roles
) -> RunResult:
    spec = run.spec
    out_dir, ckpt_root = run_dirs(spec)
    result = RunResult(out_dir)
    cost = CostLedger(out_dir, spec)  # counts from here: loading the model is GPU time too
    seed_everything(spec.seed + d.rank)  # ranks sample differently; rank 0 as a single process
    tasks = load_tasks(spec.tasks, run.namespace)
    tasks, verified = select_verified(tasks, spec.tasks.verified)  # refused here when stale
    held_out = load_held_out(spec, run.namespace, tasks)  # refused here when it overlaps tasks
    gen: Policy | None
    if roles.placement.disaggregated and roles.learns:
        mesh = learner_mesh(roles, d.device())
        policy, learner, gen = build_sharded_learner(spec, roles.learner_dist, mesh)
    elif roles.placement.disaggregated:
        policy, learner = build_generator(spec, d)
        gen = policy
    elif d.enabled:
        policy, learner, gen = build_sharded_learner(spec, d)
    else:
        policy, learner, gen = build_learner(spec)
    replay = SuccessReplay(spec.algorithm.replay.max_per_task, seed=spec.seed)
    metrics, report = TrainerMetrics(), RunReport(out_dir, run.name)
    curriculum = build_curriculum(spec, tasks)
    saver = Saver(ckpt_root, spec, policy, learner, replay, metrics, roles.learner_dist,
                  curriculum=curriculum, writes=roles.learns)  # fmt: skip
    first_step = saver.resume()
    if roles.placement.disaggregated:  # the generators follow learner 0's checkpoint
        drawn = curriculum.state_dict() if curriculum is not None and d.is_main else None
        first_step, drawn = d.broadcast((first_step, drawn))
        saver.step = first_step - 1
        if curriculum is not None and drawn is not None and not roles.learns:
            curriculum.load_state_dict(drawn)  # the generators draw the tasks
    gen = gen if gen is not None else policy
    if d.serves_metrics:
        metrics.serve(spec.metrics.port, opts.metrics_addr)
    patch = opts.patch_status and d.is_main
    patcher = StatusPatcher(run.name, run.namespace or "default") if patch else None
    if d.is_main:
        publish_verified(verified, metrics, patcher, out_dir)
    # A learning process of the disaggregated placement leases no desktop and runs no engine.
    source = None
    if roles.generates:
        source = opts.source or build_source(spec.sandboxes, str(out_dir), run.namespace)
    leases = SandboxLeases()
    owner = owner_of(run.name, run.namespace)
    # One process whose engine generates with its own copy while the learner steps
    # (maxStaleness >= 1): the two share the GPU by stream priority and chunks (gpu_share.py).
    share = share_for(policy.device, not d.enabled and gen is not policy, opts.share_gpu)
    learner.share = share
    engine = build_engine(spec.rollout, gen, share) if roles.generates else NoEngine()
    sync = build_weight_sync(engine, policy, gen, saver.weights_for_engine, d, roles)
    if opts.on_built is not None:
        opts.on_built(engine, learner)
    with RunProgress(spec.steps, opts.console and d.is_main) as progress:
        try:
            await sync.updated(saver.step)  # the engine starts from the resumed weights
            ready = True
            if source is not None:
                progress.say(f"waiting for {spec.sandboxes.min_ready} sandbox(es)...")
                await source.start(leases)
                wait = leases.wait_ready(spec.sandboxes.min_ready, opts.sandbox_wait_seconds)
                ready, _ = await stop.unless_stopped(wait)
                if ready and opts.reclaim:  # before the collective below: no episode of ours yet
                    await reclaim(leases.ready, source.token, owner)
            if not d.any(not ready):  # a stop on any rank before the first step stops all
                token = source.token if source is not None else None
                ro = Rollout(gen, engine, leases, token, spec.algorithm, spec.rollout, owner,
                             seed=spec.seed)  # fmt: skip
                progress.resume_at(first_step - 1)
                loop = Loop(run=run, ro=ro, tasks=tasks, policy=policy, learner=learner,
                            replay=replay, metrics=metrics, saver=saver, report=report,
                            patcher=patcher, progress=progress, stop=stop, opts=opts,
                            result=result, dist=d, sync=sync, held_out=held_out,
                            curriculum=curriculum, cost=cost, roles=roles)  # fmt: skip
                if saver.path is not None:
                    await sync.checkpointed(saver.step, saver.path)
                await pipeline.before_steps(loop)  # warm-up, then the step-0 evaluation
                await _loop(first_step, loop)
            if stop.requested.is_set() and saver.step < spec.steps:  # finished: not a stop
                result.stopped_at = saver.step
                progress.say(f"stopped; step {saver.step} is checkpointed: {saver.path}")
        finally:
            if source is not None:
                await source.stop()
            await engine.close()
            if share is not None:
                share.close()
    if d.is_main:  # everything leased is back: evaluation's and a stop's episodes too
        publish_cost(cost, leases.held_seconds, metrics, patcher)
        report.try_render()
    result.last_checkpoint = saver.path
    result.history = report.history() if d.is_main else []
    result.main = d.is_main
    return result


async def _loop(first_step: int, lp: Loop) -> None:
    """Steps first_step..spec.steps; on a stop, checkpoint the last completed step and return.

    With rollout.maxStaleness s, the rollouts of steps k+1..k+s are started as soon as step k's
    rollout is in, so they play while step k learns; their first generations then use the
    weights of step k-1, which is s updates behind the policy that step k+s updates from. s = 0
    is the synchronous loop: a step's episodes start after the previous update.
    """
    spec, saver, stop, d = lp.spec, lp.saver, lp.stop, lp.dist
    inflight: dict[int, asyncio.Task[Played]] = {}

    def launch(step: int) -> None:
        if step <= spec.steps and step not in inflight:
            inflight[step] = asyncio.create_task(play(step, lp))

    stats: dict[str, Any] = {}
    try:
        for step in range(first_step, spec.steps + 1):
            stop.finishing = False
            early = inflight.get(step)  # launched while the last step learned (maxStaleness)
            if early is not None and lp.learner.share is not None:
                lp.learner.share.adapt(rollouts_ready=early.done())  # gpu_share.py
            launch(step)  # synchronous: only now, after the previous update
            done, played = await stop.unless_stopped(inflight.pop(step))
            if d.any(not done):  # abandoned mid-rollout (on any rank): the last step stands
                if saver.step < step - 1 and lp.opts.checkpoints:
                    last = saver.save_or_follow(step - 1)
                    if lp.dist.is_main and stats:
                        _publish_status(step - 1, spec, stats, last, lp.patcher)
                stop.requested.set()  # agreed by the ranks: a stop here too, whoever saw it
                return
            stop.finishing = True  # the rollout is paid for: a stop now waits for the update
            for ahead in range(step + 1, step + spec.rollout.max_staleness + 1):
                launch(ahead)  # plays while this step learns
            stats = await learn(step, played, lp)
            stopping = d.any(stop.requested.is_set())
            saved: str | None = None
            due = step % spec.checkpoint.every_steps == 0 or step == spec.steps or stopping
            if due and lp.opts.checkpoints:
                saved = saver.save_or_follow(step)
            await lp.sync.checkpointed(step, saved)
            if d.is_main:
                if lp.cost is not None:  # first: the report rendered next shows it
                    publish_cost(lp.cost, lp.ro.leases.held_seconds, lp.metrics, lp.patcher)
                _publish(step, spec, stats, saved, lp.report, lp.metrics, lp.patcher)
                lp.progress.end_step(stats)
            elif d.serves_metrics:  # the job's gauges on every pod; rank 0 alone counts
                lp.metrics.observe_step(stats, count=False)
                lp.metrics.observe_gpu()
            if lp.opts.on_step is not None:
                lp.opts.on_step(step, stats)
            if stopping:
                stop.requested.set()  # agreed by the ranks: a stop here too, whoever saw it
                return
            await pipeline.after_step(lp, step)  # the held-out evaluation, when due
    finally:
        for task in inflight.values():
            task.cancel()
        await asyncio.gather(*inflight.values(), return_exceptions=True)


def _publish(
    step: int,
    spec: TrainingRunSpec,
    stats: dict[str, Any],
    saved: str | None,
    report: RunReport,
    metrics: TrainerMetrics,
    patcher: StatusPatcher | None,
) -> None:
    metrics.observe_step(stats)
    metrics.observe_gpu()
    report.append_history({k: v for k, v in stats.items() if isinstance(v, int | float)})
    report.try_render()
    _publish_status(step, spec, stats, saved, patcher)


def _publish_status(
    step: int,
    spec: TrainingRunSpec,
    stats: dict[str, Any],
    saved: str | None,
    patcher: StatusPatcher | None,
) -> None:
    if patcher is not None:
        patcher.patch(
            build_status(
                step,
                spec.steps,
                stats.get("reward_mean"),
                stats.get("success_rate"),
                stats.get("engine_tokens_per_second"),
                (step, saved) if saved else None,
            )
        )
