"""spec.warmup.goal: the measure counts exactly the demonstrated replies greedy decoding writes,
and a warm-up made to fail (learning rate ~0) says so everywhere a person looks and does what
onBelowGoal says: extend once then fail the run (its checkpoint kept, a restart failing again
at once), or go on to GRPO. Real runs: the tiny model, loopback sandboxes (test_warmup_stage.py's
demonstrations), metrics scraped over HTTP. The status's path through the real API server is
in test_status_and_pool_source.py, the operator's condition in operator/tests/test_status.py."""

from __future__ import annotations

import dataclasses
import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_warmup_stage import MAX_PIXELS, WARMUP, warm_run, write_demos

from kubecua_trainer.config import AlgorithmConfig, RolloutConfig
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import model_inputs
from kubecua_trainer.model import Policy
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.telemetry.status import build_warmup_status
from kubecua_trainer.tokens import Sample
from kubecua_trainer.trajectories import read_trajectories
from kubecua_trainer.warmup.demos import demo_samples
from kubecua_trainer.warmup.goal import WarmupBelowGoal, replies_reproduced

pytestmark = pytest.mark.asyncio

# "Learning rate 0": the config requires > 0, and an AdamW step of 1e-30 moves no float32 weight
# above 1e-22 (bench/learning/run.py's control arm), so the warm-up leaves the random model as is.
LR_ZERO = 1e-30


@torch.no_grad()
def greedy_replies(policy: Policy, sample: Sample) -> Sample:
    """The sample with each reply token replaced, in order, by the model's most likely token
    after everything before it (the full HF forward, not the measure's path): the replies
    greedy decoding writes on the demonstration's screens."""
    ids = sample.input_ids.clone()
    for p in sample.loss_mask.nonzero()[:, 0].tolist():
        logits = policy.model(**model_inputs(policy, dataclasses.replace(sample, input_ids=ids)))
        row = logits.logits[0, p - 1].float()
        row[policy.banned_ids] = float("-inf")
        ids[p] = int(row.argmax())
    return dataclasses.replace(sample, input_ids=ids)


async def test_the_measure_counts_the_replies_greedy_decoding_writes(
    tmp_path: Path, policy: Policy
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    algorithm = AlgorithmConfig(max_turns=2, max_new_tokens=64)
    rollout = RolloutConfig(max_pixels=MAX_PIXELS)
    demo = next(d for d in read_trajectories(demos) if d.task_id == "t1")
    (sample,) = demo_samples(policy, demo, algorithm, rollout)
    assert replies_reproduced(policy, sample) == (0, 2)  # a random model writes neither reply
    # Replies of two tokens (each reply's first two, the rest left as context) keep the greedy
    # construction to four forward passes.
    starts = [int(p) for p in sample.loss_mask.nonzero()[:, 0] if not bool(sample.loss_mask[p - 1])]
    mask = torch.zeros_like(sample.loss_mask)
    for p in starts:
        mask[p : p + 2] = True
    short = dataclasses.replace(sample, loss_mask=mask)
    assert replies_reproduced(policy, short) == (0, 2)
    greedy = greedy_replies(policy, short)
    assert replies_reproduced(policy, greedy) == (2, 2)
    # The second reply's second token changed: that reply is no longer what greedy writes, and
    # the first, which comes before it (a causal model), still is.
    ids = greedy.input_ids.clone()
    vocab = policy.model.lm_head.weight.shape[0]  # type: ignore[union-attr]
    ids[starts[1] + 1] = (ids[starts[1] + 1] + 1) % vocab
    assert replies_reproduced(policy, dataclasses.replace(greedy, input_ids=ids)) == (1, 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """The kubecua_trainer_warmup_* samples of a run's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("kubecua_trainer_warmup_")
    }


def failing_warmup(demos: Path, **goal: Any) -> dict[str, Any]:
    return {**WARMUP, "demonstrations": str(demos), "epochs": 2, "learningRate": LR_ZERO,
            "goal": goal}  # fmt: skip


async def test_a_warm_up_that_did_not_take_is_extended_once_then_fails_the_run(
    tmp_path: Path,
    tiny_model_dir: Path,
    policy: Policy,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    port = free_port()
    with LoopbackSandbox() as sandbox:
        warmup = failing_warmup(demos, extendEpochs=2)
        run = warm_run(
            tmp_path, tiny_model_dir, sandbox.url, demos, warmup=warmup, metrics={"port": port}
        )
        source = StaticSource([sandbox.url], TOKEN)
        with pytest.raises(WarmupBelowGoal, match="after its extension by 2 epochs") as failed:
            await train(run, RunOptions(console=True, source=source))
        console = capsys.readouterr().err
        metrics = scrape(port)

        out = tmp_path / "out"
        assert "0 of 4 demonstrated replies (0%, goal spec.warmup.goal.replyMatchMin 70%)" in str(
            failed.value
        )
        summary = json.loads((out / "warmup.json").read_text())
        assert summary["seed"] == 0
        assert summary["epochs"] == 4  # 2 + the extension
        assert len(summary["epoch_losses"]) == 4
        goal = summary["goal"]
        assert (goal["matched"], goal["replies"], goal["demonstrations"]) == (0, 4, 2)
        assert (goal["below_goal"], goal["result"], goal["extended_epochs"]) == (
            True, "BelowGoalFailed", 2,
        )  # fmt: skip
        assert (out / "checkpoints/step-00000000").is_dir()  # the warm-up's work is kept
        assert not (out / "history.jsonl").exists()  # and GRPO never started

        # The console: one line per epoch (the extension's counting to 4), the measurements,
        # the extension and the verdict.
        lines = [x.strip() for x in console.splitlines() if x.strip()]
        epochs = [x for x in lines if x.startswith("warm-up epoch ")]
        assert [x.split(":")[0] for x in epochs] == [
            "warm-up epoch 1/2", "warm-up epoch 2/2", "warm-up epoch 3/4", "warm-up epoch 4/4",
        ]  # fmt: skip
        assert "s left)" in epochs[0]  # the time left
        goal_lines = [x for x in lines if x.startswith("warm-up goal after")]
        assert [x.split(":")[0] for x in goal_lines] == [
            "warm-up goal after 2 epochs", "warm-up goal after 4 epochs",
        ]  # fmt: skip
        assert all("reproduces 0 of 4 demonstrated replies" in x for x in goal_lines)
        assert all("below its goal" in x for x in goal_lines)
        assert "extending the warm-up by 2 epochs (goal.onBelowGoal extend)" in lines
        assert any(x.startswith("the warm-up ended below its goal: the run fails") for x in lines)

        assert metrics == {
            "kubecua_trainer_warmup_reply_match_ratio": 0.0,
            "kubecua_trainer_warmup_goal_ratio": 0.7,
            "kubecua_trainer_warmup_below_goal": 1.0,
            "kubecua_trainer_warmup_epochs": 4.0,
        }
        report = (out / "report.html").read_text()
        assert 'id="warmup-below-goal"' in report
        assert "reproduces 0% of the demonstrated replies measured, against a goal of 70%" in report
        assert 'id="seed">Seed 0' in report

        # A restart (a Job's next pod) fails again at once, from what the first attempt kept:
        # no epoch trained, no GRPO step.
        calls: list[int] = []
        real_step = Learner.supervised_step

        def counted(self: Learner, samples: list, optimizer: Any) -> Any:
            calls.append(1)
            return real_step(self, samples, optimizer)

        monkeypatch.setattr(Learner, "supervised_step", counted)
        run.spec.metrics.port = 0
        with pytest.raises(WarmupBelowGoal, match="after its extension by 2 epochs"):
            await train(run, RunOptions(console=False, source=source))
    assert calls == []
    assert not (out / "history.jsonl").exists()


async def test_a_warm_up_below_its_goal_goes_on_to_grpo_when_the_spec_says_continue(
    tmp_path: Path,
    tiny_model_dir: Path,
    policy: Policy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    with LoopbackSandbox() as sandbox:
        run = warm_run(tmp_path, tiny_model_dir, sandbox.url, demos,
                       warmup=failing_warmup(demos, onBelowGoal="continue"), seed=7)  # fmt: skip
        source = StaticSource([sandbox.url], TOKEN)
        result = await train(run, RunOptions(console=True, source=source))
    assert [row["step"] for row in result.history] == [1]  # GRPO went on
    summary = json.loads((tmp_path / "out/warmup.json").read_text())
    goal = summary["goal"]
    assert (summary["seed"], summary["epochs"], goal["extended_epochs"]) == (7, 2, 0)
    assert (goal["below_goal"], goal["result"], goal["reply_match"]) == (
        True, "BelowGoalContinued", 0.0,
    )  # fmt: skip
    console = capsys.readouterr().err
    assert "WARNING: the warm-up ended below its goal; GRPO starts anyway" in console
    status = build_warmup_status(goal)
    assert {k: v for k, v in status.items() if k != "time"} == {
        "epochs": 2, "extendedEpochs": 0, "replyMatch": 0.0, "replies": 4, "goal": 0.7,
        "belowGoal": True, "result": "BelowGoalContinued",
    }  # fmt: skip
    report = (tmp_path / "out/report.html").read_text()
    assert "GRPO went on anyway (onBelowGoal continue)" in report
    assert 'id="seed">Seed 7' in report
