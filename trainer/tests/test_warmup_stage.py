"""The warm-up stage in real runs (loopback sandboxes, the real tiny model): it raises the
probability of every demonstrated reply, checkpoints step 0 so a resume skips it, redoes itself
from the start after a kill, and refuses bad demonstrations naming spec.warmup.demonstrations."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox, task
from safetensors.torch import load_file
from test_warmup_demos import ScriptedEngine

from kubecua_trainer.config import (
    API_VERSION,
    KIND,
    AlgorithmConfig,
    ConfigError,
    RolloutConfig,
    TrainingRun,
    WarmupConfig,
    parse_training_run,
)
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout.episode import Rollout, play_episode
from kubecua_trainer.run.train import RunOptions, Stop, train
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.trajectories import read_trajectories, write_trajectories
from kubecua_trainer.warmup.demos import demo_samples
from kubecua_trainer.warmup.sft import DemoFit, reply_logprob

pytestmark = pytest.mark.asyncio

MAX_PIXELS = 112 * 84
DEMOS = {  # task id -> the demonstrated replies (each episode succeeds on the loopback sandbox)
    "t1": ["Click it.\n```python\npyautogui.click(30, 40)\n```", "DONE"],
    "t2": ["```python\npyautogui.press('enter')\n```", "All done. DONE"],
}
# These tests are about the fit; 8 epochs leave the tiny model short of spec.warmup.goal's
# default, so below it they go on (test_warmup_goal.py tests the goal).
WARMUP = {"epochs": 8, "batchSize": 2, "learningRate": 1e-2, "goal": {"onBelowGoal": "continue"}}


async def write_demos(policy: Policy, path: Path) -> Path:
    """Episodes played on a loopback sandbox with the scripted replies, written as the trainer
    writes its own (trajectories.py)."""
    with LoopbackSandbox() as sandbox:
        leases = SandboxLeases()
        leases.set_ready([sandbox.url])
        for i, (tid, replies) in enumerate(DEMOS.items()):
            algorithm = AlgorithmConfig(max_turns=len(replies), max_new_tokens=64)
            rollout = RolloutConfig(max_pixels=MAX_PIXELS, episode_timeout_seconds=60)
            engine = ScriptedEngine(policy, replies)
            ro = Rollout(policy, engine, leases, TOKEN, algorithm, rollout)
            ep = await play_episode(ro, task(tid, "clicked", 1), f"g{i}", f"demo-{tid}")
            assert ep.outcome == "success", (tid, ep.detail)
            write_trajectories(path, [ep])
    return path


def warm_run(tmp: Path, model: Path, url: str, demos: Path, **spec: Any) -> TrainingRun:
    tasks = tmp / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    for tid in ("t1", "t2", "held-out"):
        (tasks / f"{tid}.json").write_text(json.dumps(task(tid)))
    body = {
        "model": {"path": str(model), "dtype": "float32"},
        "sandboxes": {"urls": [url]},
        "tasks": {"path": str(tasks), "ids": ["t1", "t2"]},
        "algorithm": {"groupSize": 2, "tasksPerStep": 1, "maxTurns": 1, "maxNewTokens": 4},
        "rollout": {"maxPixels": MAX_PIXELS, "episodeTimeoutSeconds": 60},
        "trainer": {"gradientCheckpointing": False},
        "checkpoint": {"everySteps": 1, "keep": 5},
        "metrics": {"port": 0},
        "warmup": {"demonstrations": str(demos), **WARMUP},
        "steps": 1,
        "outputDir": str(tmp / "out"),
        **spec,
    }
    return parse_training_run(
        {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "w"}, "spec": body}
    )


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(checkpoint.glob("*.safetensors"))))


async def test_warm_up_raises_every_demonstrated_replys_probability(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    demos = await write_demos(policy, tmp_path / "demos" / "demos.jsonl")
    with LoopbackSandbox() as sandbox:
        run = warm_run(tmp_path, tiny_model_dir, sandbox.url, demos)
        result = await train(
            run, RunOptions(console=False, source=StaticSource([sandbox.url], TOKEN))
        )
    assert [row["step"] for row in result.history] == [1]  # then GRPO went on
    summary = json.loads((tmp_path / "out/warmup.json").read_text())
    assert summary["demonstrations"] == 2
    assert summary["optimizer_steps"] == WARMUP["epochs"]  # 2 demos, batches of 2
    losses = summary["epoch_losses"]
    assert len(losses) == WARMUP["epochs"]
    print("warm-up losses", losses)
    assert losses[-1] < 0.6 * losses[0], losses  # per reply token: 6.14 -> 3.32 measured
    warmed = load_policy(summary["checkpoint"], device="cpu")
    assert Path(summary["checkpoint"]).name == "step-00000000"
    algorithm, rollout = run.spec.algorithm, run.spec.rollout
    for demo in read_trajectories(demos):
        (sample,) = demo_samples(policy, demo, algorithm, rollout)
        before = reply_logprob(policy, sample)
        after = reply_logprob(warmed, sample)
        print(f"{demo.task_id}: log P(replies) {before:.2f} -> {after:.2f}")
        assert before < -20.0  # a random tiny model: far less likely than 1 in e^20
        assert after > before + 10.0, (demo.task_id, before, after)


def supervised_step_dying_at(n: int) -> tuple[Any, list[int]]:
    """A stand-in for Learner.supervised_step that raises at its n-th call (the process is
    killed there: nothing after it runs) and otherwise does the real step; and its calls."""
    real_step = Learner.supervised_step
    calls: list[int] = []

    def step(self: Learner, samples: list, optimizer: Any) -> Any:
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError("killed")
        return real_step(self, samples, optimizer)

    return step, calls


async def test_a_run_killed_during_warm_up_redoes_it_from_the_start(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    real_step = Learner.supervised_step
    dies_at_the_third_step, calls = supervised_step_dying_at(3)

    with LoopbackSandbox() as sandbox:
        source = StaticSource([sandbox.url], TOKEN)
        run = warm_run(tmp_path / "a", tiny_model_dir, sandbox.url, demos)
        monkeypatch.setattr(Learner, "supervised_step", dies_at_the_third_step)
        with pytest.raises(RuntimeError, match="killed"):
            await train(run, RunOptions(console=False, source=source))
        assert not list((tmp_path / "a/out/checkpoints").glob("step-*"))  # nothing saved
        monkeypatch.setattr(Learner, "supervised_step", real_step)
        calls.clear()
        resumed = await train(run, RunOptions(console=False, source=source))
        # The same run, never interrupted, for comparison.
        fresh = warm_run(tmp_path / "b", tiny_model_dir, sandbox.url, demos)
        await train(fresh, RunOptions(console=False, source=source))
    assert [row["step"] for row in resumed.history] == [1]
    summary = json.loads((tmp_path / "a/out/warmup.json").read_text())
    assert len(summary["epoch_losses"]) == WARMUP["epochs"]  # every epoch, from the first
    again = json.loads((tmp_path / "b/out/warmup.json").read_text())
    assert summary["epoch_losses"] == again["epoch_losses"]
    a = weights(tmp_path / "a/out/checkpoints/step-00000000")
    b = weights(tmp_path / "b/out/checkpoints/step-00000000")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the warm-up redone whole, not half

    # A third start of the finished run resumes at its last checkpoint: no warm-up again.
    monkeypatch.setattr(Learner, "supervised_step", dies_at_the_third_step)
    calls.clear()
    with LoopbackSandbox() as sandbox:
        more = warm_run(tmp_path / "a", tiny_model_dir, sandbox.url, demos, steps=2)
        await train(more, RunOptions(console=False, source=StaticSource([sandbox.url], TOKEN)))
    assert calls == []


async def test_bad_demonstrations_are_refused_naming_the_field(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    (tmp_path / "tasks").mkdir()
    failures = tmp_path / "failures.jsonl"
    lines = [json.loads(x) for x in demos.read_text().splitlines()]
    failures.write_text("".join(json.dumps({**x, "outcome": "failure"}) + "\n" for x in lines))
    tasks = str(tmp_path / "tasks")
    held_out = {  # t2 is demonstrated, but held out
        "tasks": {"path": tasks, "ids": ["t1"]},
        "evaluation": {"tasks": {"path": tasks, "ids": ["t2"]}},
    }
    cases = [
        (tmp_path / "missing.jsonl", {}, "no such trajectory file"),
        (failures, {}, "no successful demonstrations"),
        (demos, held_out, r"held-out tasks \['t2'\]"),
    ]
    with LoopbackSandbox() as sandbox:
        for path, extra, message in cases:
            run = warm_run(tmp_path, tiny_model_dir, sandbox.url, path, **extra)
            source = StaticSource([sandbox.url], TOKEN)
            with pytest.raises(ConfigError, match=f"spec.warmup.demonstrations: .*{message}"):
                await train(run, RunOptions(console=False, source=source))
    assert not list((tmp_path / "out/checkpoints").glob("step-*"))


async def test_a_stop_during_warm_up_saves_nothing_and_ends_the_run(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (a Stop) during the warm-up: it ends before its next optimizer step, no step-0
    checkpoint is written (a half warm-up is never resumed from) and the run reports a stop."""
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    stop, loop = Stop(), asyncio.get_running_loop()
    real_step = Learner.supervised_step
    calls: list[int] = []

    def stops_after_two_steps(self: Learner, samples: list, optimizer: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            loop.call_soon_threadsafe(stop.requested.set)  # as the SIGTERM handler would
        return real_step(self, samples, optimizer)

    monkeypatch.setattr(Learner, "supervised_step", stops_after_two_steps)
    with LoopbackSandbox() as sandbox:
        run = warm_run(tmp_path, tiny_model_dir, sandbox.url, demos)
        opts = RunOptions(console=False, source=StaticSource([sandbox.url], TOKEN), stop=stop)
        result = await train(run, opts)
    assert result.stopped_at == 0
    assert len(calls) < WARMUP["epochs"]
    assert result.history == []
    assert not list((tmp_path / "out/checkpoints").glob("step-*"))
    assert not (tmp_path / "out/warmup.json").exists()


async def test_stop_when_measures_training_tasks_and_ends_the_warm_up_when_the_rule_holds(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    """spec.warmup.stopWhen: every everyEpochs epochs, greedy and k sampled episodes of each
    measured training task (never the held-out one); a rule that holds at once (both floors 0)
    stops after the first check, one that never holds (floors 1) runs every epoch, measured
    after each chunk but the last."""
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    with LoopbackSandbox() as sandbox:
        source = StaticSource([sandbox.url], TOKEN)
        summaries = {}
        for name, floor in (("holds", 0.0), ("never", 1.0)):
            rule = {"everyEpochs": 3, "tasks": 2, "k": 2, "greedyPassMin": floor,
                    "greedyPassMax": 1.0, "passAtKMin": floor}  # fmt: skip
            warmup = {"demonstrations": str(demos), **WARMUP, "stopWhen": rule}
            run = warm_run(tmp_path / name, tiny_model_dir, sandbox.url, demos, warmup=warmup)
            await train(run, RunOptions(console=False, source=source))
            summaries[name] = json.loads((tmp_path / name / "out/warmup.json").read_text())
    holds, never = summaries["holds"], summaries["never"]
    assert (holds["epochs"], holds["stopped_by"]) == (3, "stop")
    assert len(holds["checks"]) == 1
    assert holds["optimizer_steps"] == 3  # 2 demonstrations, batches of 2, 3 epochs
    check = holds["checks"][0]
    # 2 tasks x (1 greedy + 2 sampled) episodes, every one scored on the loopback sandbox.
    assert (check["epochs"], check["scored"], check["excluded"]) == (3, 6, 0)
    assert never["epochs"] == WARMUP["epochs"]
    # Checks after 3 and 6 epochs; none after the last (shorter) chunk: the warm-up ends there.
    assert [c["epochs"] for c in never["checks"]] == [3, 6]
    assert never["stopped_by"] == "epochs (the rule never held)"
    assert all(c["verdict"] == "go on" for c in never["checks"])


async def test_a_warm_up_continued_from_its_state_equals_the_same_warm_up_run_at_once(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    """DemoFit.state_dict (warmup-state.pt, what bench/learning/continued_sft.py continues
    from): 2 epochs, the state and the weights carried to a fresh learner, 2 more epochs give
    bitwise the weights of 4 epochs run at once (the optimizer's moments and the shuffle go on;
    kept samples train as rebuilt ones)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a run on the CPU (speedups/cpu_threads.py): 16 s, not 54 s
    try:
        await continue_and_compare(tmp_path, tiny_model_dir, policy)
    finally:
        torch.set_num_threads(threads)


async def continue_and_compare(tmp_path: Path, tiny_model_dir: Path, policy: Policy) -> None:
    demos = list(read_trajectories(await write_demos(policy, tmp_path / "demos.jsonl")))
    cfg = WarmupConfig.model_validate({"demonstrations": "unused", **WARMUP})
    algorithm = AlgorithmConfig(max_turns=2, max_new_tokens=64)
    rollout = RolloutConfig(max_pixels=MAX_PIXELS)

    def fitter(p: Policy) -> DemoFit:
        def build(demo: Any) -> list:
            return demo_samples(p, demo, algorithm, rollout)

        return DemoFit(Learner(p, algorithm), demos, build, cfg, seed=3)

    at_once = load_policy(str(tiny_model_dir), device="cpu")
    fitter(at_once).run(4)
    first, second = (load_policy(str(tiny_model_dir), device="cpu") for _ in range(2))
    half = fitter(first)
    half.run(2)
    state = half.state_dict()
    second.model.load_state_dict(first.model.state_dict())
    rest = fitter(second)
    rest.load_state_dict(state)
    rest.run(2)
    assert (rest.epochs, rest.fit.steps) == (4, 4)  # 2 demonstrations, batches of 2
    trained, resumed = at_once.model.state_dict(), second.model.state_dict()
    assert not all(torch.equal(trained[k], v) for k, v in policy.model.state_dict().items())
    for name, value in trained.items():
        assert torch.equal(value, resumed[name]), name
