"""The training loop of one TrainingRun: rollout -> advantages -> learner step -> checkpoint.

Each step plays algorithm.groupSize episodes for each of algorithm.tasksPerStep tasks on the
sandboxes, builds the batch (batch.py: GRPO advantages, dynamic sampling, success replay),
takes one optimizer step, saves a checkpoint every checkpoint.everySteps steps and at the end,
and publishes metrics, the report and (in a cluster) the TrainingRun status. A run resumes
from the latest checkpoint under its checkpoint directory on its own.

Left out here: multi-node learning (trainer.nodes > 1) and the sglang engine's deployment.
Run: `python -m kubecua_trainer run examples/trainingrun-local.yaml`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kubecua_trainer.batch import Batch, assemble_batch, episodes_of, validate_samples
from kubecua_trainer.checkpoint import (
    checkpoint_time,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from kubecua_trainer.config import TrainingRun, TrainingRunSpec
from kubecua_trainer.engines import build_engine
from kubecua_trainer.learner import Learner
from kubecua_trainer.metrics import TrainerMetrics
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.perf.fast_paths import compile_layers
from kubecua_trainer.perf.optimizer import MasterAdamW
from kubecua_trainer.progress import RunProgress
from kubecua_trainer.replay import SuccessReplay
from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.episode import Rollout
from kubecua_trainer.rollout.groups import Group, rollout_groups, tasks_for_step
from kubecua_trainer.rollout.records import EXCLUDED, EpisodeResult
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.sources import SandboxLeases, SandboxSource, build_source
from kubecua_trainer.status import StatusPatcher, build_status
from kubecua_trainer.tokens import check_image_pads


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
    stop: Stop | None = None  # tests hand one in to stop the run from outside


@dataclass
class RunResult:
    out_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    last_checkpoint: str | None = None
    stopped_at: int | None = None  # a stop ended the run; its last completed step (0: none)

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


def build_learner(spec: TrainingRunSpec) -> tuple[Policy, Learner]:
    grad_ckpt = spec.trainer.gradient_checkpointing
    policy = load_policy(spec.model.path, spec.model.dtype, gradient_checkpointing=grad_ckpt)
    reference = None
    if spec.algorithm.kl_coef > 0:  # k3 KL needs a frozen copy of the initial policy
        reference = load_policy(spec.model.path, spec.model.dtype, device=str(policy.device))
    return policy, Learner(policy, spec.algorithm, reference, optimizer=speed_up(policy, spec))


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
    stop = opts.stop or Stop()
    if opts.handle_signals:
        stop.listen(signal.SIGTERM)
    try:
        return await _train(run, opts, stop)
    finally:
        stop.close()


@dataclass
class Saver:
    """Writes checkpoints of one run and remembers the newest: step, path."""

    root: Path
    spec: TrainingRunSpec
    policy: Policy
    learner: Learner
    replay: SuccessReplay
    metrics: TrainerMetrics
    step: int = 0
    path: str | None = None

    def resume(self) -> int:
        """Load the newest checkpoint under root if any; returns the first step to run."""
        if (latest := latest_checkpoint(str(self.root))) is not None:
            state = load_checkpoint(latest, self.policy, self.learner, self.replay)
            self.step, self.path = int(state["step"]), latest
            self.metrics.checkpoint_written(checkpoint_time(latest))
        return self.step + 1

    def save(self, step: int) -> str:
        path = save_checkpoint(str(self.root), step, self.policy, self.learner, self.replay)
        self.metrics.checkpoint_written(checkpoint_time(path))
        prune_checkpoints(str(self.root), keep=self.spec.checkpoint.keep)
        self.step, self.path = step, path
        return path


async def _train(run: TrainingRun, opts: RunOptions, stop: Stop) -> RunResult:
    spec = run.spec
    out_dir, ckpt_root = run_dirs(spec)
    result = RunResult(out_dir)
    seed_everything(spec.seed)
    tasks = load_tasks(spec.tasks, run.namespace)
    policy, learner = build_learner(spec)
    replay = SuccessReplay(spec.algorithm.replay.max_per_task, seed=spec.seed)
    metrics, report = TrainerMetrics(), RunReport(out_dir, run.name)
    saver = Saver(ckpt_root, spec, policy, learner, replay, metrics)
    first_step = saver.resume()
    metrics.serve(spec.metrics.port, opts.metrics_addr)
    patcher = StatusPatcher(run.name, run.namespace or "default") if opts.patch_status else None
    source = opts.source or build_source(spec.sandboxes, str(out_dir), run.namespace)
    leases = SandboxLeases()
    engine = build_engine(spec.rollout, policy)
    with RunProgress(spec.steps, opts.console) as progress:
        try:
            progress.say(f"waiting for {spec.sandboxes.min_ready} sandbox(es)...")
            await source.start(leases)
            wait = leases.wait_ready(spec.sandboxes.min_ready, opts.sandbox_wait_seconds)
            if (await stop.unless_stopped(wait))[0]:
                ro = Rollout(policy, engine, leases, source.token, spec.algorithm, spec.rollout)
                progress.resume_at(first_step - 1)
                await _loop(first_step, run, ro, tasks, saver, report, patcher, progress, stop,
                            opts, result)  # fmt: skip
            if stop.requested.is_set():
                result.stopped_at = saver.step
                progress.say(f"stopped; step {saver.step} is checkpointed: {saver.path}")
        finally:
            await source.stop()
            await engine.close()
    result.last_checkpoint = saver.path
    result.history = report.history()
    return result


async def _loop(
    first_step: int,
    run: TrainingRun,
    ro: Rollout,
    tasks: list[dict],
    saver: Saver,
    report: RunReport,
    patcher: StatusPatcher | None,
    progress: RunProgress,
    stop: Stop,
    opts: RunOptions,
    result: RunResult,
) -> None:
    """Steps first_step..spec.steps; on a stop, checkpoint the last completed step and return."""
    spec, learner, metrics = run.spec, saver.learner, saver.metrics
    stats: dict[str, Any] = {}
    for step in range(first_step, spec.steps + 1):
        stop.finishing = False
        one = _one_step(step, run, ro, tasks, learner, saver.replay, metrics, progress, stop)
        done, new_stats = await stop.unless_stopped(one)
        if not done:  # abandoned mid-rollout: the previous step is the last completed one
            if stats and saver.step < step - 1:
                _publish_status(step - 1, spec, stats, saver.save(step - 1), patcher)
            return
        stats = new_stats
        stats["excluded"] = sum(n for k, n in stats["outcomes"].items() if k in EXCLUDED)
        result.outcomes.update(stats.pop("outcomes"))
        saved: str | None = None
        if step % spec.checkpoint.every_steps == 0 or step == spec.steps or stop.requested.is_set():
            saved = saver.save(step)
        await ro.engine.update_weights(step, saved)  # hf: no-op; sglang: reload from disk
        _publish(step, spec, stats, saved, report, metrics, patcher)
        progress.end_step(stats)
        if opts.on_step is not None:
            opts.on_step(step, stats)
        if stop.requested.is_set():
            return


async def _one_step(
    step: int,
    run: TrainingRun,
    ro: Rollout,
    tasks: list[dict],
    learner: Learner,
    replay: SuccessReplay,
    metrics: TrainerMetrics,
    progress: RunProgress,
    stop: Stop,
) -> dict[str, Any]:
    spec, t0 = run.spec, time.monotonic()
    step_tasks = tasks_for_step(tasks, step, spec.algorithm.tasks_per_step, spec.seed)
    progress.start_step(step, len(step_tasks) * spec.algorithm.group_size)

    def on_episode(ep: EpisodeResult) -> None:
        metrics.observe_episode(ep)
        progress.episode_done(ep.outcome)

    groups = await rollout_groups(ro, step_tasks, step, on_episode)
    stop.finishing = True  # the rollout is paid for: a stop from here on waits for the update
    rollout_seconds = time.monotonic() - t0
    validate_samples(groups, image_pad_check(ro.policy))
    batch = assemble_batch(groups, spec.algorithm, replay)
    progress.learning(step)
    learn = await _learn(learner, batch)
    episodes = episodes_of(groups)
    gen_tokens = sum(e.gen_tokens for e in episodes)
    stats: dict[str, Any] = {
        "step": step,
        **batch.stats(),
        **learn,
        "episodes": len(episodes),
        "outcomes": Counter(e.outcome for e in episodes),
        "engine_tokens_per_second": gen_tokens / max(rollout_seconds, 1e-9),
        "rollout_seconds": rollout_seconds,
        "seconds_total": time.monotonic() - t0,
    }
    metrics.zero_variance_groups.inc(batch.zero_variance_groups)
    metrics.replay_injections.inc(batch.replay_injections)
    metrics.step_seconds.observe(stats["seconds_total"])
    _save_episodes(groups, step, run)
    return stats


async def _learn(learner: Learner, batch: Batch) -> dict[str, float]:
    if not batch.samples:  # every group was skipped: nothing to learn from this step
        return {}
    # A thread keeps the event loop (metrics server, readiness polls) responsive meanwhile.
    return dict(await asyncio.to_thread(learner.step, batch.samples))


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
