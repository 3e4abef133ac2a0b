"""A short learning check on REAL local desktops: GRPO raises the probability of the successful
reply on its training instance.

Set-up (bench/learning): the benchmark model (built from a config) warmed up (spec.warmup) on two
recorded typeword demonstrations, `red apple` and `red banana` (120 optimizer steps): it then types
one or the other, about half the time each, whatever the instruction says. GRPO then trains on
the one instance `Type 'red apple' in the box.` with groups of 8 episodes scored by the real
evaluator, so nearly every group has mixed rewards. Assertion: the probability of the reference
reply under the last checkpoint exceeds the one under the warm-up's checkpoint (step 0), both
computed exactly (no sampling) on the same real screenshot, by more than MIN_RISE. Why that is
defensible: with mixed groups, the successes get positive advantages and a policy-gradient step
raises their log-probability to first order; the figure is a deterministic function of the
weights, so a loaded machine makes it slower, not noisier. What it leaves out: held-out
generalisation (`make bench-learning` measures that, in 30+ minutes).
Needs `make sandbox-env`; records the demonstrations once (cached). About 3 minutes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import torch
import yaml  # type: ignore[import-untyped]
from PIL import Image

from bench.learning import run as bench
from bench.learning.family import TASKS, load
from bench.learning.offline import Offline
from kubecua_trainer.checkpoint import list_checkpoints
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.sources.local import launcher_path
from kubecua_trainer.trajectories import read_trajectories

CACHE = Path(os.environ.get("KUBECUA_CACHE", Path.home() / ".cache" / "kubecua"))
TYPEWORD = load(TASKS / "typeword")
TARGET, OTHER = "typeword-red-apple", "typeword-red-banana"
ROLLOUT = {
    **{k: v for k, v in bench.RECIPE["rollout"].items() if k != "systemPrompt"},
    "maxPixels": TYPEWORD.max_pixels,
}
MIN_RISE = 0.05  # absolute, in probability; the measured rise is in docs/benchmarks.md

pytestmark = pytest.mark.skipif(
    not launcher_path().exists(), reason=f"{launcher_path()} missing: run `make sandbox-env`"
)


def two_demonstrations(src: Path, dst: Path) -> Path:
    """The recorded demonstrations of TARGET and OTHER only, beside links to their screens."""
    dst.mkdir(parents=True)
    (dst / "screens").symlink_to(src.parent / "screens")
    lines = [x for x in src.read_text().splitlines() if json.loads(x)["task_id"] in (TARGET, OTHER)]
    assert len(lines) == 2, "the recorded demonstrations lack red apple or red banana"
    out = dst / "demonstrations.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def manifest(model: Path, demos: Path, out: Path) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "learning-check"},
        "spec": {
            "model": {"path": str(model), "dtype": "float32"},
            "sandboxes": {"local": {"replicas": 2}, "minReady": 2},
            "tasks": {"path": str(TYPEWORD.folder / "train"), "ids": [TARGET]},
            "warmup": {
                "demonstrations": str(demos),
                "epochs": 60,
                "batchSize": 1,
                "learningRate": 3e-3,
            },
            "algorithm": {
                "groupSize": 8,
                "tasksPerStep": 1,
                "maxTurns": 1,
                "learningRate": 5e-4,
                "maxNewTokens": 16,
                "temperature": 1.0,
            },
            # The agent's whole prompt, not the benchmark's one line: with it the two-pair
            # warm-up leaves the reply's probability near 0.5, so there is room to rise.
            "rollout": {**ROLLOUT, "maxInFlightEpisodes": 4},
            "trainer": {"gradientCheckpointing": False},
            "checkpoint": {"everySteps": 1, "keep": 10},
            "steps": 3,
            "seed": 0,
            "metrics": {"port": 0},
            "outputDir": str(out),
        },
    }


def reply_probability(checkpoint: Path, screenshot: Image.Image) -> float:
    """P(reference reply | TARGET's prompt) under a checkpoint, exactly (teacher forcing)."""
    algo = AlgorithmConfig.model_validate({"maxTurns": 1, "maxNewTokens": 16})
    off = Offline(str(checkpoint), TYPEWORD, algo, screenshot, system=None)
    task = next(t for t in TYPEWORD.split("train") if t["id"] == TARGET)
    sample = off.demo_samples(task, done=False)[0]
    from kubecua_trainer.warmup.sft import reply_logprob

    try:
        return float(torch.tensor(reply_logprob(off.policy, sample)).exp())
    finally:
        asyncio.run(off.engine.close())


def test_grpo_raises_the_probability_of_the_successful_reply(tmp_path: Path) -> None:
    asyncio.run(bench.prepare(CACHE, TYPEWORD))
    demos = two_demonstrations(
        CACHE / "demonstrations/typeword/demonstrations.jsonl", tmp_path / "d"
    )
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(manifest(CACHE / "models/bench-typeword", demos, tmp_path / "o"))
    )
    asyncio.run(bench._python(["run", str(path), "--no-progress"], tmp_path / "run.log"))

    steps = [json.loads(x) for x in (tmp_path / "o/history.jsonl").read_text().splitlines()]
    assert len(steps) == 3
    checkpoints = dict(list_checkpoints(tmp_path / "o/checkpoints"))
    episode = next(iter(read_trajectories(tmp_path / "o/episodes/step-0001.jsonl")))
    screenshot = episode.image(0)
    assert screenshot is not None
    before = reply_probability(checkpoints[0], screenshot)
    after = reply_probability(checkpoints[3], screenshot)
    rewards = [s["success_rate"] for s in steps]
    assert after - before > MIN_RISE, (before, after, rewards)
