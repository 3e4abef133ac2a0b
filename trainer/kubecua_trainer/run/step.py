"""One GRPO step of the loop (train.py): play its episodes, then learn from them."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from kubecua_trainer.learning.batch import Batch, assemble_batch, episodes_of, validate_samples
from kubecua_trainer.learning.learner import Learner, passes, trainable
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.distributed import Dist
from kubecua_trainer.parallel.exchange import Held, deliver_pixels, gather_screens, strip
from kubecua_trainer.parallel.threads import to_thread_on
from kubecua_trainer.report import RunReport
from kubecua_trainer.report.curriculum import save_curriculum
from kubecua_trainer.rollout.curriculum import scored_results
from kubecua_trainer.rollout.groups import (
    Group,
    merge_groups,
    rollout_groups,
    scheduled_temperature,
    tasks_for_step,
)
from kubecua_trainer.rollout.records import EXCLUDED, EpisodeResult
from kubecua_trainer.telemetry.liveview import note_sandboxes
from kubecua_trainer.telemetry.status import build_curriculum_status
from kubecua_trainer.tokens import check_image_pads

if TYPE_CHECKING:
    from kubecua_trainer.placement.disaggregated import Roles
    from kubecua_trainer.run.loop import Loop

Played = tuple[list[Group], dict[str, float]]


async def play(step: int, lp: Loop) -> Played:
    """Play this rank's episodes of `step` (no collectives: it may run beside learning)."""
    spec, t0, started = lp.spec, time.monotonic(), time.time()
    per_step, curriculum = spec.algorithm.tasks_per_step, lp.curriculum
    if curriculum is not None:  # by pass rate (spec.tasks.curriculum)
        step_tasks = curriculum.draw(lp.tasks, step, per_step, spec.seed)
    else:
        step_tasks = tasks_for_step(lp.tasks, step, per_step, spec.seed)
    lp.progress.start_step(step, len(step_tasks) * spec.algorithm.group_size)

    def on_episode(ep: EpisodeResult) -> None:
        if not lp.dist.enabled:  # distributed: rank 0 counts every rank's, once gathered
            lp.metrics.observe_episode(ep)
        lp.progress.episode_done(ep.outcome)

    share = lp.roles.share if lp.roles is not None else (lp.dist.rank, lp.dist.world)
    if share is None:  # a learning process of the disaggregated placement plays nothing
        now = time.time()
        return [], {"rollout_started_at": now, "rollout_ended_at": now, "rollout_seconds": 0.0}
    algo = spec.algorithm  # the step's own temperature, also when it plays ahead (maxStaleness)
    temperature = scheduled_temperature(algo.temperature, algo.temperature_end, step, spec.steps)
    groups = await rollout_groups(lp.ro, step_tasks, step, on_episode, share, temperature)
    timing = {"rollout_started_at": started, "rollout_ended_at": time.time(),
              "rollout_seconds": time.monotonic() - t0, "temperature": temperature}  # fmt: skip
    return groups, timing


def image_pad_check(policy: Policy) -> Any:
    return lambda sample: check_image_pads(sample, policy.merge_size, policy.image_pad_id)


async def learn(step: int, played: Played, lp: Loop) -> dict[str, Any]:
    """Gather the step's episodes from every rank, build the batch, learn, hand the engine the
    weights (lp.sync.updated). Every rank runs it, in step order (it holds all of a step's
    collectives)."""
    spec, d, metrics, roles = lp.spec, lp.dist, lp.metrics, lp.roles
    apart = roles is not None and roles.placement.disaggregated
    mine, timing = played
    t0 = time.monotonic()
    check, held = image_pad_check(lp.policy), None
    if d.enabled and apart:  # the generators' episodes and timings go to every process
        assert roles is not None
        validate_samples(mine, check)
        held = strip(mine, d.rank, step)
        played_by = [p for r, p in enumerate(d.all_gather(played)) if roles.placement.generates(r)]
        groups = merge_groups([g for g, _ in played_by])
        timing = rollout_timing([t for _, t in played_by])
        gather_screens(d, groups, held)
    elif d.enabled:  # the episodes go to every rank, their images only where needed (exchange.py)
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
    exclude = spec.tasks.mixed_start_groups == "exclude"
    batch = assemble_batch(groups, spec.algorithm, lp.replay, spec.reward, exclude)
    curriculum = lp.curriculum
    if curriculum is not None:  # every rank: each draws the next steps itself
        curriculum.observe(step, scored_results(groups))
    if held is not None:
        _deliver(d, held, batch, lp.replay, roles)
    staleness = [step - 1 - s.policy_version for e in episodes for s in e.samples]
    lp.progress.learning(step)
    forget = getattr(lp.ro.engine, "forget_cache", None)
    if forget is not None and spec.rollout.max_staleness == 0:
        # Synchronous: no stored turn will be continued, so its KV goes before the learner needs
        # the memory (the embedded engine's worker frees it once idle; up to 10 s wait).
        await to_thread_on(lp.policy.device, forget, 10.0)
    learn_started = time.time()
    learns = roles is None or roles.learns
    learned = await _learn(lp.learner, batch, step) if learns else {}
    learn_ended = time.time()
    refresh = await lp.sync.updated(step)
    gen_tokens = sum(e.gen_tokens for e in episodes)
    stats: dict[str, Any] = {
        "step": step,
        **batch.stats(),
        **learned,
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
    if lp.cost is not None:  # every rank: the lease sum is a collective
        own = lp.ro.leases.held_seconds
        leased = d.sum([own])[0]
        outcomes = [e.outcome for e in episodes]
        stats |= lp.cost.step(outcomes, stats["sandbox_seconds"], stats["seconds_total"],
                              leased, own)  # fmt: skip
    lp.result.outcomes.update(stats.pop("outcomes"))
    if d.is_main:
        for age in staleness:
            metrics.sample_staleness.observe(age)
        metrics.zero_variance_groups.inc(batch.zero_variance_groups)
        metrics.mixed_start_groups.inc(batch.mixed_start_groups)
        metrics.replay_injections.inc(batch.replay_injections)
        metrics.partial_failures.inc(batch.partial_failures)
        metrics.step_seconds.observe(stats["seconds_total"])
        RunReport(lp.result.out_dir, lp.run.name).save_episodes(step, episodes)
        pool = spec.sandboxes.pool_ref
        where = (lp.run.namespace or "default", pool) if pool else None
        link = note_sandboxes(lp.result.out_dir, lp.ro.leases.names, episodes, where)
        if link is not None and lp.patcher is not None:
            lp.patcher.patch({"liveView": link})
        if curriculum is not None:
            summary = curriculum.summary()
            metrics.observe_curriculum(summary)
            save_curriculum(lp.result.out_dir, step, summary)
            if lp.patcher is not None:
                lp.patcher.patch({"curriculum": build_curriculum_status(step, summary)})
    return stats


def rollout_timing(timings: list[dict[str, float]]) -> dict[str, float]:
    """One step's rollout timing from each generating process's: first start, last end."""
    start = min(t["rollout_started_at"] for t in timings)
    end = max(t["rollout_ended_at"] for t in timings)
    out = {"rollout_started_at": start, "rollout_ended_at": end,
           "rollout_seconds": max(t["rollout_seconds"] for t in timings)}  # fmt: skip
    if "temperature" in timings[0]:
        out["temperature"] = timings[0]["temperature"]
    return out


def _deliver(d: Dist, held: Held, batch: Batch, replay: SuccessReplay, roles: Roles | None) -> None:
    """Pixel values to the ranks whose passes use them, and this step's new replay entries
    to every learning rank (the buffer is the same everywhere and rank 0 checkpoints it whole).
    Disaggregated, the learners are ranks 0..L-1 and the generators train nothing; rank 0's
    batch says who needs what, since a generator's replay buffer (which changes the batch) is
    not restored on resume."""
    learners = d.world
    if roles is not None and roles.placement.disaggregated:
        learners = len(roles.placement.learners)
    trained = trainable(batch.samples)
    new_replay = [s for s in replay.stored() if s.pixel_values is None]
    need = [[trained[i] for i, _ in share] + new_replay for share in passes(trained, learners)]
    need += [[] for _ in range(d.world - learners)]
    keys = None
    if learners < d.world:
        mine = [[s.pixels_key for s in share] for share in need] if d.is_main else None
        keys = d.broadcast(mine)
    deliver_pixels(d, held, need, keys)


async def _learn(learner: Learner, batch: Batch, step: int) -> dict[str, float]:
    """learner.step, which labels the weights with `step` (Policy.version) under the lock."""
    if not batch.samples:  # every group was skipped: the weights stay, labelled as this step's
        with learner.policy.lock:
            learner.policy.version = step
        return {}
    # A thread keeps the event loop (metrics server, readiness polls, rollouts that play ahead)
    # responsive meanwhile.
    return dict(await to_thread_on(learner.policy.device, learner.step, batch.samples, step))
