"""Turn a step's groups into the learner's batch: GRPO advantages per group, dynamic sampling,
success replay, and the per-step statistics. The one GRPO group path: the run, the bandit test
and the smoke run all build their batches here, from advantage.py's pure group functions.

Per group, only scored episodes count (infrastructure failures are already out). Advantages
come from the shaped reward (spec.reward, reward.py; the evaluator's score itself by default);
success, success replay and the success rate from the evaluator's score. A group whose shaped
rewards are all equal carries no signal: when replay is on and every episode failed, one stored
success of that task is added as an extra member with the shaped reward it earned when played;
otherwise, with dynamic sampling on, the group is skipped and counted. In perTurn mode turn t of
T gets the episode's advantage times turn_discount^(T-1-t).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from kubecua_api.reward import RewardConfig
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.advantage import credit_turns, grpo_advantages, is_zero_variance
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.learning.reward import group_rewards, terms_of
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult, is_success
from kubecua_trainer.tokens import Sample


@dataclass
class Batch:
    samples: list[Sample] = field(default_factory=list)
    groups: int = 0
    zero_variance_groups: int = 0
    small_groups: int = 0  # fewer than two scored episodes left
    replay_injections: int = 0
    rewards: list[float] = field(default_factory=list)  # evaluator scores, every scored episode
    shaped_rewards: list[float] = field(default_factory=list)  # theirs, trained on
    partial_failures: int = 0  # scored episodes whose partial metric failed (term left out)
    mixed_start_groups: int = 0  # episodes started from different screens (Group.mixed_start)

    def stats(self) -> dict[str, float]:
        n = len(self.rewards)
        advs = [s.advantage for s in self.samples]
        return {
            "reward_mean": sum(self.rewards) / n if n else 0.0,
            "shaped_reward_mean": sum(self.shaped_rewards) / n if n else 0.0,
            "partial_failures": float(self.partial_failures),
            "success_rate": sum(map(is_success, self.rewards)) / n if n else 0.0,
            "zero_variance_group_fraction": self.zero_variance_groups / max(1, self.groups),
            "advantage_std": statistics.pstdev(advs) if len(advs) > 1 else 0.0,
            "samples": float(len(self.samples)),
            "replay_injections": float(self.replay_injections),
            "mixed_start_groups": float(self.mixed_start_groups),
        }


def validate_samples(groups: list[Group], check: Callable[[Sample], None]) -> None:
    """Exclude an episode whose sample fails `check` (the image-pad count check), loudly."""
    for g in groups:
        for ep in g.scored:
            try:
                for s in ep.samples:
                    check(s)
            except ValueError as err:
                ep.fail("invalid_sample", str(err))


def assemble_batch(
    groups: list[Group],
    algo: AlgorithmConfig,
    replay: SuccessReplay | None,
    reward: RewardConfig | None = None,
    exclude_mixed_start: bool = False,
) -> Batch:
    """reward: spec.reward; None trains on the evaluator's score (RewardConfig's defaults).
    exclude_mixed_start: leave out a group whose episodes started from different screens
    (spec.tasks.mixedStartGroups: exclude); such groups are counted either way.
    Sets each scored episode's shaped_reward and its samples' reward (discounted per turn in
    perTurn mode, as the context did with the score)."""
    cfg = reward or RewardConfig()
    batch = Batch(groups=len(groups))
    for g in groups:
        scored = g.scored
        if g.mixed_start:
            batch.mixed_start_groups += 1
            if exclude_mixed_start:
                continue
        terms = [terms_of(e) for e in scored]
        shaped = group_rewards(terms, cfg)
        for e, r in zip(scored, shaped, strict=True):
            e.shaped_reward = r
            turns = credit_turns(r, len(e.samples), algo.mode == "perTurn", algo.turn_discount)
            for s, credited in zip(e.samples, turns, strict=True):
                s.reward = credited
        batch.rewards += [float(e.reward or 0.0) for e in scored]
        batch.shaped_rewards += shaped
        batch.partial_failures += sum(t.partial_failed for t in terms)
        members: list[tuple[float, list[Sample]]] = [
            (r, e.samples) for e, r in zip(scored, shaped, strict=True)
        ]
        if len(members) < 2:
            batch.small_groups += 1
            continue
        if replay is not None and algo.replay.enabled:
            for e in scored:
                if is_success(e.reward or 0.0):
                    replay.add(g.task_id, e.samples)
        if is_zero_variance([r for r, _ in members]):
            all_failed = not any(is_success(e.reward or 0.0) for e in scored)
            stored = _replay_for(g, algo, replay) if all_failed else None
            if stored is not None:
                # the last sample's reward is the episode's own (d^0 in perTurn mode)
                members.append((stored[-1].reward, stored))
                batch.replay_injections += 1
            else:
                batch.zero_variance_groups += 1
                if algo.dynamic_sampling:
                    continue
        advantages = grpo_advantages([r for r, _ in members], normalize_std=algo.normalize_std)
        for (_, samples), adv in zip(members, advantages, strict=True):
            per_turn = credit_turns(adv, len(samples), algo.mode == "perTurn", algo.turn_discount)
            for s, a in zip(samples, per_turn, strict=True):
                s.advantage = a
            batch.samples += samples
    return batch


def _replay_for(
    g: Group, algo: AlgorithmConfig, replay: SuccessReplay | None
) -> list[Sample] | None:
    if replay is None or not algo.replay.enabled:
        return None
    return replay.sample(g.task_id)


def episodes_of(groups: list[Group]) -> list[EpisodeResult]:
    return [e for g in groups for e in g.episodes]
