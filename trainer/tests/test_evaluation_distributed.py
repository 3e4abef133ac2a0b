"""The held-out evaluation in a job of two processes (`torchrun --nproc-per-node 2`, gloo on the
CPU) against HTTP episode servers on loopback: each rank plays its share of the evaluation
episodes, rank 0 gathers them all and alone writes the results; every evaluation (with
evaluation.beforeWarmup the untrained model's before the warm-up, then step 0 and the last step)
has the figures a single process gets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import yaml
from loopback_sandbox import TOKEN
from test_distributed_learner import TRAINER_DIR, torchrun
from test_evaluation_run import ScoredSandbox, run_spec, write_tasks
from test_warmup_stage import write_demos

from kubecua_trainer.config import API_VERSION, KIND
from kubecua_trainer.model import Policy


def test_two_ranks_share_the_evaluation_and_rank_0_writes_it(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    out = tmp_path / "out"
    demos = asyncio.run(write_demos(policy, tmp_path / "demos.jsonl"))  # of t1, t2: trained on
    with ScoredSandbox() as a, ScoredSandbox() as b:
        spec = run_spec(tiny_model_dir, [a.url, b.url], train_dir, held_dir, out, 0)
        spec["steps"], spec["evaluation"]["everySteps"] = 1, 0
        spec["evaluation"]["beforeWarmup"] = True
        # one epoch leaves the warm-up below its goal: both ranks measure it and go on
        spec["warmup"] = {"demonstrations": str(demos), "epochs": 1, "batchSize": 2,
                          "goal": {"onBelowGoal": "continue"}}  # fmt: skip
        spec["trainer"]["nodes"] = 2  # two processes of one GPU-less node each
        obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "d"}, "spec": spec}
        manifest = tmp_path / "run.yaml"
        manifest.write_text(yaml.safe_dump(obj))
        env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": TOKEN}
        cmd = torchrun("-m", "kubecua_trainer", "run", str(manifest), "--no-progress")
        proc = subprocess.run(cmd, cwd=TRAINER_DIR, env=env, capture_output=True, text=True,
                              timeout=500)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert a.started > 0
        assert b.started > 0
    untrained = out / "untrained" / "evaluations"
    folders = [(0, untrained / "step-0000")]  # before the warm-up, then step 0 after it
    folders += [(step, out / "evaluations" / f"step-{step:04d}") for step in (0, 1)]
    for step, folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["scored"] == 6  # 3 tasks x 2 episodes, 3 played on each rank
        assert summary["success_rate"] == 1 / 3
        assert summary["mean_score"] == 0.5
        lines = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]
        keys = [f"eval-s{step:04d}-t{t:03d}-e{e:02d}" for t in range(3) for e in range(2)]
        assert [x["key"] for x in lines] == keys  # every rank's, written once, in order
    history = (out / "evaluations" / "history.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in history] == [0, 1]
    history = (untrained / "history.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in history] == [0]
