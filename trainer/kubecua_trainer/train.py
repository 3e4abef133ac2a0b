"""The training loop of one TrainingRun: rollout -> advantages -> learner step -> checkpoint.

Each step plays algorithm.groupSize episodes for each of algorithm.tasksPerStep tasks on the
sandboxes, builds the batch (batch.py: GRPO advantages, dynamic sampling, success replay),
takes one optimizer step, saves a checkpoint every checkpoint.everySteps steps and at the end,
and publishes metrics, the report and (in a cluster) the TrainingRun status. A run resumes
from the latest checkpoint under its checkpoint directory on its own.

Under torchrun (trainer.nodes x gpusPerNode > 1 processes) the run is one job: each rank plays
its share of the episodes, the learner is FSDP2-sharded, rank 0 writes checkpoints, status and
report (distributed.py, sharded.py, docs/distributed-training.md). rollout.maxStaleness > 0 lets
the next steps' episodes play while a step learns.
Run: `python -m kubecua_trainer run examples/trainingrun-local.yaml`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kubecua_trainer import pipeline
from kubecua_trainer.batch import Batch, assemble_batch, episodes_of, validate_samples
from kubecua_trainer.checkpoint import (
    checkpoint_time,
    latest_checkpoint,
    load_checkpoint,
    load_sharded_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    save_sharded_checkpoint,
    save_sharded_weights,
    save_weights,
)
from kubecua_trainer.config import TrainingRun, TrainingRunSpec
from kubecua_trainer.distributed import Dist, check_world, init_from_env, shutdown
from kubecua_trainer.engines import build_engine
from kubecua_trainer.evaluation.stage import HeldOut, load_held_out
from kubecua_trainer.exchange import Held, deliver_pixels, gather_screens, strip
from kubecua_trainer.learner import Learner, passes, trainable
from kubecua_trainer.metrics import TrainerMetrics
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.perf.fast_paths import compile_layers
from kubecua_trainer.perf.optimizer import MasterAdamW
from kubecua_trainer.progress import RunProgress
from kubecua_trainer.replay import SuccessReplay
from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.episode import Rollout
from kubecua_trainer.rollout.groups import (
    Group,
    merge_groups,
    rollout_groups,
    scheduled_temperature,
    tasks_for_step,
)
from kubecua_trainer.rollout.records import EXCLUDED, EpisodeResult
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.sharded import generation_copy, refresh_weights, shard_policy
from kubecua_trainer.sources import SandboxLeases, SandboxSource, build_source
from kubecua_trainer.status import StatusPatcher, build_status
from kubecua_trainer.tokens import check_image_pads

log = logging.getLogger(__name__)


@dataclass
class RunOptions:
    """How this process runs the spec (not part of the spec)."""

    console: bool = True
    metrics_addr: str = "127.0.0.1"
    patch_status: bool = False  # cluster mode: patch the TrainingRun's status subresource
    sandbox_wait_seconds: float = 600.0
    source: SandboxSource | None = None  # tests hand in a source that is already running
    on_step: Any = None  # callback(step, stats), e.g. for tests to inject failures
    handle_signals: bool = False  # SIGTERM -> Stop (the CLI; a pod being suspended or evicted)
    signals_seen: list[int] | None = None  # SIGTERMs the CLI caught before the run listened
    stop: Stop | None = None  # tests hand one in to stop the run from outside
    on_engine: Any = None  # callback(engine) once built (perf/loop_bench.py reads its counters)
    # False: write no checkpoint (perf/loop_bench.py: a 3B run's optimizer state is ~50 GB)
    checkpoints: bool = True


@dataclass
class RunResult:
    out_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    last_checkpoint: str | None = None
    stopped_at: int | None = None  # a stop ended the run; its last completed step (0: none)
    main: bool = True  # False on the ranks > 0 of a distributed run (no report, no history)

    @property
    def report(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def curves(self) -> Path:
        return self.out_dir / "curves.png"


def run_dirs(spec: TrainingRunSpec) -> tuple[Path, Path]:
    """(output dir, checkpoint root): local runs keep both under outputDir."""
    if spec.output_dir:
        return Path(spec.output_dir), Path(spec.output_dir) / "checkpoints"
    return Path(spec.checkpoint.path) / "run", Path(spec.checkpoint.path)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def build_learner(spec: TrainingRunSpec) -> tuple[Policy, Learner, Policy | None]:
    """One process: (policy, learner, the engine's own copy or None). The embedded engine
    generates with the learner's module, except when rollouts overlap learning
    (rollout.maxStaleness > 0): it then gets a full copy of the weights (bf16 on a GPU),
    refreshed after each update, so generation does not wait for the update to finish."""
    policy = load_policy(
        spec.model.path, spec.model.dtype, None, spec.trainer.gradient_checkpointing
    )
    reference = _reference(spec, policy)
    overlap = spec.rollout.max_staleness > 0 and spec.rollout.engine == "hf"
    gen = generation_copy(policy) if overlap else None
    optimizer = speed_up(policy, spec)
    return policy, Learner(policy, spec.algorithm, reference, optimizer=optimizer), gen


def build_sharded_learner(spec: TrainingRunSpec, d: Dist) -> tuple[Policy, Learner, Policy]:
    """Under torchrun: (policy, learner, the engine's policy). The learner's module is sharded
    with FSDP2 and the engine gets a full copy of it, refreshed after every update."""
    device = str(d.device())
    policy = load_policy(
        spec.model.path, spec.model.dtype, device, spec.trainer.gradient_checkpointing
    )
    reference = _reference(spec, policy)
    gen = generation_copy(policy)
    if spec.model.freeze_vision:
        policy.model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if spec.trainer.compile and policy.device.type == "cuda":
        compile_layers(policy.model)
    net = shard_policy(policy, offload=spec.trainer.optimizer_offload)
    return policy, Learner(policy, spec.algorithm, reference, net=net, dist=d), gen


def _reference(spec: TrainingRunSpec, policy: Policy) -> Policy | None:
    if spec.algorithm.kl_coef <= 0:
        return None
    # k3 KL needs a frozen copy of the initial policy
    return load_policy(spec.model.path, spec.model.dtype, device=str(policy.device))


def speed_up(policy: Policy, spec: TrainingRunSpec) -> torch.optim.Optimizer | None:
    """The learner levers measured in docs/benchmarks.md, as the spec asks for them; returns the
    optimizer to use, or None for the learner's default AdamW."""
    model = policy.model
    if spec.model.freeze_vision:
        model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if spec.trainer.compile and policy.device.type == "cuda":
        compile_layers(model)
    if not spec.trainer.optimizer_offload:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    return MasterAdamW(params, lr=spec.algorithm.learning_rate, offload=True)


def image_pad_check(policy: Policy) -> Any:
    return lambda sample: check_image_pads(sample, policy.merge_size, policy.image_pad_id)


class Stop:
    """SIGTERM (a suspend, an eviction) asks the run to stop without losing completed work.

    A rollout in flight is abandoned (its episodes release their sandboxes in `finally`); once a
    step's rollout is complete, the step is finished instead (its optimizer step included), since
    a half-applied update must never be checkpointed. The caller then saves the last completed
    step. Handlers are installed only when asked (the CLI), never in a test's event loop.
    """

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.finishing = False  # the current step's rollout is done: finish it, do not abandon
        self._signals: list[int] = []

    def listen(self, *signals: int) -> None:
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self.requested.set)
            self._signals.append(sig)

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.remove_signal_handler(sig)
        self._signals.clear()

    async def unless_stopped(self, coro: Any) -> tuple[bool, Any]:
        """(True, result) when coro completed, (False, None) when a stop abandoned it."""
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self.requested.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self.finishing:
                await task
        except BaseException:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False, None


async def train(run: TrainingRun, opts: RunOptions | None = None) -> RunResult:
    opts = opts or RunOptions()
    d = init_from_env()
    try:
        check_world(run.spec, d.world, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        stop = opts.stop or Stop()
        if opts.handle_signals:
            stop.listen(signal.SIGTERM)
            if opts.signals_seen:
                stop.requested.set()
        try:
            return await _train(run, opts, stop, d)
        finally:
            stop.close()
    finally:
        shutdown(d)


@dataclass
class Saver:
    """Writes checkpoints of one run and remembers the newest: step, path. Distributed, every
    rank calls save() and resume() (they gather and broadcast) and rank 0 alone touches disk."""

    root: Path
    spec: TrainingRunSpec
    policy: Policy
    learner: Learner
    replay: SuccessReplay
    metrics: TrainerMetrics
    dist: Dist = field(default_factory=Dist)
    step: int = 0
    path: str | None = None

    def resume(self) -> int:
        """Load the newest checkpoint under root if any; returns the first step to run."""
        latest = self.dist.broadcast(
            latest_checkpoint(str(self.root)) if self.dist.is_main else None
        )
        if latest is not None:
            if self.dist.enabled:
                state = load_sharded_checkpoint(
                    latest, self.policy, self.learner, self.replay, self.dist
                )
            else:
                state = load_checkpoint(latest, self.policy, self.learner, self.replay)
            self.step, self.path = int(state["step"]), latest
            self._observe_checkpoint(latest)
        return self.step + 1

    def _observe_checkpoint(self, path: str) -> None:
        """Every pod's metrics show the checkpoint's time (rank 0's volume has the file)."""
        stamp = self.dist.broadcast(checkpoint_time(path) if self.dist.is_main else None)
        if self.dist.serves_metrics and stamp is not None:
            self.metrics.checkpoint_written(stamp)

    def save(self, step: int) -> str:
        if self.dist.enabled:
            path = save_sharded_checkpoint(
                self.root, step, self.policy, self.learner, self.replay, self.dist
            )
        else:
            path = save_checkpoint(str(self.root), step, self.policy, self.learner, self.replay)
        self._observe_checkpoint(path)
        if self.dist.is_main:
            log.info("checkpoint of step %d written by rank %d: %s", step, self.dist.rank, path)
            prune_checkpoints(str(self.root), keep=self.spec.checkpoint.keep)
        self.step, self.path = step, path
        return path

    def weights_for_engine(self, step: int, saved: str | None) -> str:
        """A directory with this step's weights for servers that load from disk: the checkpoint
        when one was written, else a weights-only copy under <root>/weights (last two kept)."""
        if saved is not None:
            return saved
        if self.dist.enabled:
            return save_sharded_weights(self.root / "weights", step, self.policy, self.dist)
        return save_weights(self.root / "weights", step, self.policy)


@dataclass
class Loop:
    """What a run's steps share (built once by _train)."""

    run: TrainingRun
    ro: Rollout
    tasks: list[dict]
    saver: Saver
    report: RunReport
    patcher: StatusPatcher | None
    progress: RunProgress
    stop: Stop
    opts: RunOptions
    result: RunResult
    dist: Dist
    gen: Policy  # the engine's policy: the learner's own in a single process
    held_out: HeldOut | None = None  # spec.evaluation's tasks, loaded once

    @property
    def spec(self) -> TrainingRunSpec:
        return self.run.spec


async def _train(run: TrainingRun, opts: RunOptions, stop: Stop, d: Dist) -> RunResult:
    spec = run.spec
    out_dir, ckpt_root = run_dirs(spec)
    result = RunResult(out_dir)
    seed_everything(spec.seed + d.rank)  # ranks sample differently; rank 0 as a single process
    tasks = load_tasks(spec.tasks, run.namespace)
    held_out = load_held_out(spec, run.namespace, tasks)  # refused here when it overlaps tasks
    gen: Policy | None
    if d.enabled:
        policy, learner, gen = build_sharded_learner(spec, d)
    else:
        policy, learner, gen = build_learner(spec)
    replay = SuccessReplay(spec.algorithm.replay.max_per_task, seed=spec.seed)
    metrics, report = TrainerMetrics(), RunReport(out_dir, run.name)
    saver = Saver(ckpt_root, spec, policy, learner, replay, metrics, d)
    first_step = saver.resume()
    if gen is not None:  # the engine's copy starts from the resumed (or initial) weights
        refresh_weights(policy.model, gen, saver.step)
    else:
        gen = policy
        policy.version = saver.step
    if d.serves_metrics:
        metrics.serve(spec.metrics.port, opts.metrics_addr)
    patch = opts.patch_status and d.is_main
    patcher = StatusPatcher(run.name, run.namespace or "default") if patch else None
    source = opts.source or build_source(spec.sandboxes, str(out_dir), run.namespace)
    leases = SandboxLeases()
    engine = build_engine(spec.rollout, gen)
    if opts.on_engine is not None:
        opts.on_engine(engine)
    with RunProgress(spec.steps, opts.console and d.is_main) as progress:
        try:
            progress.say(f"waiting for {spec.sandboxes.min_ready} sandbox(es)...")
            await source.start(leases)
            wait = leases.wait_ready(spec.sandboxes.min_ready, opts.sandbox_wait_seconds)
            ready, _ = await stop.unless_stopped(wait)
            if not d.any(not ready):  # a stop on any rank before the first step stops all
                ro = Rollout(gen, engine, leases, source.token, spec.algorithm, spec.rollout)
                progress.resume_at(first_step - 1)
                loop = Loop(run, ro, tasks, saver, report, patcher, progress, stop, opts, result,
                            d, gen, held_out)  # fmt: skip
                if saver.path is not None and getattr(engine, "loads_from_disk", False):
                    await _sync_engine(loop, saver.step, saver.path)
                await pipeline.before_steps(loop)  # warm-up, then the step-0 evaluation
                await _loop(first_step, loop)
            if stop.requested.is_set() and saver.step < spec.steps:  # finished: not a stop
                result.stopped_at = saver.step
                progress.say(f"stopped; step {saver.step} is checkpointed: {saver.path}")
        finally:
            await source.stop()
            await engine.close()
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
    inflight: dict[int, asyncio.Task[tuple[list[Group], dict[str, float]]]] = {}

    def launch(step: int) -> None:
        if step <= spec.steps and step not in inflight:
            inflight[step] = asyncio.create_task(_rollout(step, lp))

    stats: dict[str, Any] = {}
    try:
        for step in range(first_step, spec.steps + 1):
            stop.finishing = False
            launch(step)  # synchronous: only now, after the previous update
            done, played = await stop.unless_stopped(inflight.pop(step))
            if d.any(not done):  # abandoned mid-rollout (on any rank): the last step stands
                if saver.step < step - 1 and lp.opts.checkpoints:
                    last = saver.save(step - 1)
                    if lp.dist.is_main and stats:
                        _publish_status(step - 1, spec, stats, last, lp.patcher)
                stop.requested.set()  # agreed by the ranks: a stop here too, whoever saw it
                return
            stop.finishing = True  # the rollout is paid for: a stop now waits for the update
            for ahead in range(step + 1, step + spec.rollout.max_staleness + 1):
                launch(ahead)  # plays while this step learns
            stats = await _learn_step(step, played, lp)
            stopping = d.any(stop.requested.is_set())
            saved: str | None = None
            due = step % spec.checkpoint.every_steps == 0 or step == spec.steps or stopping
            if due and lp.opts.checkpoints:
                saved = saver.save(step)
            await _sync_engine(lp, step, saved)
            if d.is_main:
                _publish(step, spec, stats, saved, lp.report, saver.metrics, lp.patcher)
                lp.progress.end_step(stats)
            elif d.serves_metrics:  # the job's gauges on every pod; rank 0 alone counts
                saver.metrics.observe_step(stats, count=False)
                saver.metrics.observe_gpu()
            if lp.opts.on_step is not None:
                lp.opts.on_step(step, stats)
            if not stopping:
                await pipeline.after_step(lp, step)  # the held-out evaluation, when due
            if stopping:
                stop.requested.set()  # agreed by the ranks: a stop here too, whoever saw it
                return
    finally:
        for task in inflight.values():
            task.cancel()
        await asyncio.gather(*inflight.values(), return_exceptions=True)


async def _rollout(step: int, lp: Loop) -> tuple[list[Group], dict[str, float]]:
    """Play this rank's episodes of `step` (no collectives: it may run beside learning)."""
    spec, t0, started = lp.spec, time.monotonic(), time.time()
    step_tasks = tasks_for_step(lp.tasks, step, spec.algorithm.tasks_per_step, spec.seed)
    lp.progress.start_step(step, len(step_tasks) * spec.algorithm.group_size)

    def on_episode(ep: EpisodeResult) -> None:
        if not lp.dist.enabled:  # distributed: rank 0 counts every rank's, once gathered
            lp.saver.metrics.observe_episode(ep)
        lp.progress.episode_done(ep.outcome)

    share = (lp.dist.rank, lp.dist.world)
    algo = spec.algorithm  # the step's own temperature, also when it plays ahead (maxStaleness)
    temperature = scheduled_temperature(algo.temperature, algo.temperature_end, step, spec.steps)
    groups = await rollout_groups(lp.ro, step_tasks, step, on_episode, share, temperature)
    timing = {"rollout_started_at": started, "rollout_ended_at": time.time(),
              "rollout_seconds": time.monotonic() - t0, "temperature": temperature}  # fmt: skip
    return groups, timing


async def _learn_step(
    step: int, played: tuple[list[Group], dict[str, float]], lp: Loop
) -> dict[str, Any]:
    """Gather the step's episodes from every rank, build the batch, learn, refresh the engine's
    weights. Every rank runs it, in step order (it holds all of a step's collectives)."""
    spec, d, metrics = lp.spec, lp.dist, lp.saver.metrics
    mine, timing = played
    t0 = time.monotonic()
    check, held = image_pad_check(lp.saver.policy), None
    if d.enabled:  # the episodes go to every rank, their images only where needed (exchange.py)
        validate_samples(mine, check)  # here, where the pixels are
        held = strip(mine, d.rank, step)
        groups = merge_groups(d.all_gather(mine))
        gather_screens(d, groups, held)
    else:
        groups = mine
        validate_samples(groups, check)
    episodes = episodes_of(groups)
    if d.enabled and d.is_main:
        for ep in episodes:
            metrics.observe_episode(ep)
    batch = assemble_batch(groups, spec.algorithm, lp.saver.replay)
    if held is not None:
        _deliver(d, held, batch, lp.saver.replay)
    staleness = [step - 1 - s.policy_version for e in episodes for s in e.samples]
    lp.progress.learning(step)
    forget = getattr(lp.ro.engine, "forget_cache", None)
    if forget is not None and spec.rollout.max_staleness == 0:
        # Synchronous: no stored turn will be continued, so its KV goes before the learner needs
        # the memory (the embedded engine's worker frees it once idle; up to 10 s wait).
        await asyncio.to_thread(forget, 10.0)
    learn_started = time.time()
    learn = await _learn(lp.saver.learner, batch, step)
    learn_ended = time.time()
    refresh: dict[str, float] = {}
    if lp.gen is not lp.saver.policy:  # the engine's own copy (always, under torchrun)
        seconds = await asyncio.to_thread(refresh_weights, lp.saver.policy.model, lp.gen, step)
        refresh["weight_refresh_seconds"] = seconds
    gen_tokens = sum(e.gen_tokens for e in episodes)
    stats: dict[str, Any] = {
        "step": step,
        **batch.stats(),
        **learn,
        **refresh,
        "episodes": len(episodes),
        "outcomes": Counter(e.outcome for e in episodes),
        "engine_tokens_per_second": gen_tokens / max(timing["rollout_seconds"], 1e-9),
        **timing,
        "learn_started_at": learn_started,
        "learn_ended_at": learn_ended,
        "sandbox_seconds": sum(e.sandbox_seconds for e in episodes),
        "staleness_max": float(max(staleness, default=0)),
        "staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "seconds_total": timing["rollout_seconds"] + time.monotonic() - t0,
    }
    stats["excluded"] = sum(n for k, n in stats["outcomes"].items() if k in EXCLUDED)
    lp.result.outcomes.update(stats.pop("outcomes"))
    if d.is_main:
        for age in staleness:
            metrics.sample_staleness.observe(age)
        metrics.zero_variance_groups.inc(batch.zero_variance_groups)
        metrics.replay_injections.inc(batch.replay_injections)
        metrics.step_seconds.observe(stats["seconds_total"])
        _save_episodes(groups, step, lp.run)
    return stats


def _deliver(d: Dist, held: Held, batch: Batch, replay: SuccessReplay) -> None:
    """Pixel values to the ranks whose passes use them, and this step's new replay entries
    to every rank (the buffer is the same everywhere and rank 0 checkpoints it whole)."""
    trained = trainable(batch.samples)
    new_replay = [s for s in replay.stored() if s.pixel_values is None]
    need = [[trained[i] for i, _ in share] + new_replay for share in passes(trained, d.world)]
    deliver_pixels(d, held, need)


async def _sync_engine(lp: Loop, step: int, saved: str | None) -> None:
    """Engines that load weights from disk (sglang) get this step's weights now, every step."""
    engine = lp.ro.engine
    if not getattr(engine, "loads_from_disk", False):
        return
    path = lp.saver.weights_for_engine(step, saved)  # collective when distributed
    if lp.dist.is_main:
        await engine.update_weights(step, path)
    lp.dist.barrier()  # the servers hold step's weights before any rank says so
    engine.weights_step = step  # type: ignore[attr-defined]


async def _learn(learner: Learner, batch: Batch, step: int) -> dict[str, float]:
    """learner.step, which labels the weights with `step` (Policy.version) under the lock."""
    if not batch.samples:  # every group was skipped: the weights stay, labelled as this step's
        with learner.policy.lock:
            learner.policy.version = step
        return {}
    # A thread keeps the event loop (metrics server, readiness polls, rollouts that play ahead)
    # responsive meanwhile.
    return dict(await asyncio.to_thread(learner.step, batch.samples, step))


def _save_episodes(groups: list[Group], step: int, run: TrainingRun) -> None:
    out_dir, _ = run_dirs(run.spec)
    RunReport(out_dir, run.name).save_episodes(step, episodes_of(groups))


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
    report.render()
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
