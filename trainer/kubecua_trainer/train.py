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
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kubecua_trainer.batch import Batch, assemble_batch, episodes_of, validate_samples
from kubecua_trainer.checkpoint import (
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
    on_step: Any = None  # callback(step, stats, groups), e.g. for tests to inject failures


@dataclass
class RunResult:
    out_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    last_checkpoint: str | None = None

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
    return policy, Learner(policy, spec.algorithm, reference=reference)


def image_pad_check(policy: Policy) -> Any:
    return lambda sample: check_image_pads(sample, policy.merge_size, policy.image_pad_id)


async def train(run: TrainingRun, opts: RunOptions | None = None) -> RunResult:
    opts = opts or RunOptions()
    spec = run.spec
    out_dir, ckpt_root = run_dirs(spec)
    result = RunResult(out_dir)
    seed_everything(spec.seed)
    tasks = load_tasks(spec.tasks, run.namespace)
    policy, learner = build_learner(spec)
    replay = SuccessReplay(spec.algorithm.replay.max_per_task, seed=spec.seed)
    first_step = 1
    if (latest := latest_checkpoint(str(ckpt_root))) is not None:
        first_step = int(load_checkpoint(latest, policy, learner, replay)["step"]) + 1
        result.last_checkpoint = latest
    metrics, report = TrainerMetrics(), RunReport(out_dir, run.name)
    metrics.serve(spec.metrics.port, opts.metrics_addr)
    patcher = StatusPatcher(run.name, run.namespace or "default") if opts.patch_status else None
    source = opts.source or build_source(spec.sandboxes, str(out_dir), run.namespace)
    leases = SandboxLeases()
    engine = build_engine(spec.rollout, policy)
    with RunProgress(spec.steps, opts.console) as progress:
        try:
            progress.say(f"waiting for {spec.sandboxes.min_ready} sandbox(es)...")
            await source.start(leases)
            await leases.wait_ready(spec.sandboxes.min_ready, opts.sandbox_wait_seconds)
            ro = Rollout(policy, engine, leases, source.token, spec.algorithm, spec.rollout)
            progress.resume_at(first_step - 1)
            for step in range(first_step, spec.steps + 1):
                stats = await _one_step(step, run, ro, tasks, learner, replay, metrics, progress)
                stats["excluded"] = sum(n for k, n in stats["outcomes"].items() if k in EXCLUDED)
                result.outcomes.update(stats.pop("outcomes"))
                saved = None
                if step % spec.checkpoint.every_steps == 0 or step == spec.steps:
                    saved = _checkpoint(step, ckpt_root, spec, policy, learner, replay)
                    result.last_checkpoint = saved
                await engine.update_weights(step, saved)  # hf: no-op; sglang: reload from disk
                _publish(step, spec, stats, saved, report, metrics, patcher)
                progress.end_step(stats)
                if opts.on_step is not None:
                    opts.on_step(step, stats)
        finally:
            await source.stop()
            await engine.close()
    result.history = report.history()
    return result


async def _one_step(
    step: int,
    run: TrainingRun,
    ro: Rollout,
    tasks: list[dict],
    learner: Learner,
    replay: SuccessReplay,
    metrics: TrainerMetrics,
    progress: RunProgress,
) -> dict[str, Any]:
    spec, t0 = run.spec, time.monotonic()
    step_tasks = tasks_for_step(tasks, step, spec.algorithm.tasks_per_step, spec.seed)
    progress.start_step(step, len(step_tasks) * spec.algorithm.group_size)

    def on_episode(ep: EpisodeResult) -> None:
        metrics.observe_episode(ep)
        progress.episode_done(ep.outcome)

    groups = await rollout_groups(ro, step_tasks, step, on_episode)
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


def _checkpoint(
    step: int,
    root: Path,
    spec: TrainingRunSpec,
    policy: Policy,
    learner: Learner,
    replay: SuccessReplay,
) -> str:
    path = save_checkpoint(str(root), step, policy, learner, replay)
    prune_checkpoints(str(root), keep=spec.checkpoint.keep)
    return path


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
    if patcher is not None:
        patcher.patch(
            build_status(
                step,
                spec.steps,
                stats["reward_mean"],
                stats["success_rate"],
                stats["engine_tokens_per_second"],
                (step, saved) if saved else None,
            )
        )
