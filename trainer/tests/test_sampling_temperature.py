"""algorithm.temperatureEnd: the schedule (a worked example), and that a scheduled episode's
samples record their temperature and the learner recomputes log-probs at it, so they are the
engine's behaviour log-probs token for token (real tiny model, hf engine, loopback sandboxes),
also in a run whose next steps play ahead (rollout.maxStaleness 1)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox, task
from test_rollout import make_rollout
from test_train import local_run

from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.groups import rollout_groups, scheduled_temperature
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource


def test_schedule_is_linear_from_the_first_to_the_last_step() -> None:
    # 0.8 -> 0.5 over 4 steps: a third of the 0.3 drop per step
    steps = [scheduled_temperature(0.8, 0.5, s, 4) for s in (1, 2, 3, 4)]
    assert steps == pytest.approx([0.8, 0.7, 0.6, 0.5])
    assert scheduled_temperature(1.0, 2.0, 2, 3) == pytest.approx(1.5)  # it may rise too


def test_without_an_end_or_with_one_step_the_temperature_stays() -> None:
    assert [scheduled_temperature(0.7, None, s, 5) for s in (1, 3, 5)] == [0.7, 0.7, 0.7]
    assert scheduled_temperature(0.8, 0.5, 1, 1) == 0.8
    assert scheduled_temperature(0.8, 0.5, 9, 4) == pytest.approx(0.5)  # never past the end


@pytest.mark.asyncio
async def test_learner_log_probs_at_the_samples_temperature_are_the_engines(
    policy: Policy,
) -> None:
    with LoopbackSandbox() as a:
        ro, engine = make_rollout(policy, [a.url])  # algorithm.temperature 1.0
        try:
            groups = await rollout_groups(ro, [task("t1")], step=3, temperature=0.6)
        finally:
            await engine.close()
    samples = [s for e in groups[0].episodes for s in e.samples]
    assert len(samples) == 4
    assert all(s.temperature == 0.6 for s in samples)
    for s in samples:
        behaviour = s.behaviour_logprobs[s.loss_mask]
        with torch.no_grad():
            own, _ = token_logprobs(policy, s, 0.6)
            run_default, _ = token_logprobs(policy, s, 1.0)
        assert torch.allclose(own, behaviour, atol=1e-4), (own - behaviour).abs().max()
        # What the old learner used (the run's temperature) is off by far more than numerics.
        # Relative, not an absolute figure: how far it is off depends on how peaked the shared
        # tiny policy's logits are after the tests before this one.
        off = float((run_default - behaviour).abs().mean())
        assert off > 1e-3, off
        assert off > 50 * float((own - behaviour).abs().max()), off
    metrics = Learner(policy, ro.algorithm).step(samples)
    assert metrics["logprob_mismatch"] < 1e-5


@pytest.mark.asyncio
async def test_each_step_plays_at_its_scheduled_temperature_when_it_plays_ahead(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    with LoopbackSandbox() as a, LoopbackSandbox() as b:
        run = local_run(tmp_path, tiny_model_dir, [a.url, b.url], steps=3, port=0)
        run.spec.rollout.max_staleness = 1
        run.spec.algorithm.dynamic_sampling = False  # every step learns
        run.spec.algorithm.temperature, run.spec.algorithm.temperature_end = 0.9, 0.5
        # AdamW moves each weight by about the learning rate: 1e-9 keeps a played-ahead step's
        # behaviour log-probs those of the learner's weights (lagging costs up to ~0.015 nats at
        # 1e-4), so what is left to see is the temperature (a wrong one: ~0.05 nats and more)
        run.spec.algorithm.learning_rate = 1e-9
        result = await train(
            run, RunOptions(console=False, source=StaticSource([a.url, b.url], TOKEN))
        )
    rows = result.history
    assert [r["temperature"] for r in rows] == pytest.approx([0.9, 0.7, 0.5])
    for prev, nxt in itertools.pairwise(rows):  # step k+1 played while step k learned
        assert nxt["rollout_started_at"] < prev["learn_ended_at"], (prev, nxt)
    assert all(r["logprob_mismatch"] < 1e-5 for r in rows), [r["logprob_mismatch"] for r in rows]
