"""spec.trainer.placement disaggregated (issue 31 item 4): which processes generate and which
learn, the default split, the refusals; and a real run of it as two processes under torchrun
(gloo on the CPU, one generating and one learning, loopback desktops over real HTTP) in which
the generator's weights after each step equal the learner's bit for bit, carry that step's
version, and no rollout is older than rollout.maxStaleness."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_distributed_learner import TRAINER_DIR, torchrun
from test_train import local_run

from kubecua_trainer.config import (
    API_VERSION,
    KIND,
    ConfigError,
    TrainingRunSpec,
    parse_training_run,
)
from kubecua_trainer.placement.placement import Placement, default_generating, placement_of


def spec_with(trainer: dict, rollout: dict | None = None) -> TrainingRunSpec:
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "p"},
        "spec": {
            "model": {"path": "/m"},
            "sandboxes": {"urls": ["http://127.0.0.1:1"]},
            "tasks": {"path": "/t"},
            "algorithm": {"groupSize": 2, "tasksPerStep": 2},
            "rollout": rollout or {},
            "trainer": trainer,
            "steps": 1,
        },
    }
    return parse_training_run(obj).spec


def test_colocated_every_process_plays_its_share_and_learns() -> None:
    p = placement_of(spec_with({"nodes": 2}), 2)
    assert p == Placement(2, 0)
    assert not p.disaggregated
    assert [p.role(r) for r in range(2)] == ["both", "both"]
    assert [p.share(r) for r in range(2)] == [(0, 2), (1, 2)]


def test_disaggregated_the_last_processes_generate_and_rank_zero_learns() -> None:
    p = placement_of(spec_with({"gpusPerNode": 4, "placement": "disaggregated"}), 4)
    assert (p.learners, p.generators) == ([0, 1], [2, 3])
    assert [p.role(r) for r in range(4)] == ["learner", "learner", "generator", "generator"]
    assert [p.share(r) for r in range(4)] == [None, None, (0, 2), (1, 2)]
    assert p.learns(0)
    assert not p.generates(0)
    three = {"gpusPerNode": 4, "placement": "disaggregated", "generatingProcesses": 3}
    p3 = placement_of(spec_with(three), 4)
    assert (p3.learners, p3.generators) == ([0], [1, 2, 3])


def test_default_split_follows_the_measured_phase_shares() -> None:
    # generating 28% and learning 44% of one GPU's loop time: g minimises max(28/g, 44/(w-g))
    assert [default_generating(w) for w in (2, 3, 4, 8)] == [1, 1, 2, 3]
    with pytest.raises(ValueError, match="2 or more"):
        default_generating(1)


SGLANG = {"engine": "sglang", "sglangUrls": ["http://s:1"], "maxStaleness": 0}


@pytest.mark.parametrize(
    ("trainer", "world", "rollout", "says"),
    [
        ({"nodes": 2, "placement": "disaggregated"}, 1, None, "launched as 1"),
        ({"nodes": 2, "placement": "disaggregated"}, 2, SGLANG, "rollout.engine hf"),
        (
            {"nodes": 8, "placement": "disaggregated", "generatingProcesses": 7},
            8,
            None,
            "only 4 episodes",
        ),
    ],
)
def test_a_placement_the_trainer_cannot_run_is_refused_naming_the_field(
    trainer: dict, world: int, rollout: dict | None, says: str
) -> None:
    with pytest.raises(ConfigError, match=r"^spec\.trainer\.") as err:
        placement_of(spec_with(trainer, rollout), world)
    assert says in str(err.value)


def rows(out: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (out / f"rank-{rank}.jsonl").read_text().splitlines()]


def launched(cmd: list[str], env: dict[str, str], seconds: float) -> subprocess.CompletedProcess:
    """The torchrun job, failed with what its processes printed when it outlasts `seconds` (kept
    under the suite's pytest timeout, whose report would show only this process's threads)."""
    try:
        return subprocess.run(cmd, cwd=TRAINER_DIR, env=env, capture_output=True, text=True,
                              timeout=seconds)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in
                    (e.stdout, e.stderr))  # fmt: skip
        pytest.fail(f"torchrun ran past {seconds:.0f} s; its output:\n{out[-3000:]}\n{err[-6000:]}")


def test_one_generating_and_one_learning_process_keep_the_weights_versioned_bit_for_bit(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Two steps, then the same run with steps 3 resumes from the learner's checkpoint of step 2
    (its process group loads the shards; the generator starts from the broadcast of step 2)."""
    out = tmp_path / "ranks"
    with LoopbackSandbox() as a, LoopbackSandbox() as b:
        run = local_run(tmp_path, tiny_model_dir, [a.url, b.url], steps=2, port=0)
        spec = run.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
        spec["algorithm"]["groupSize"] = 2  # 4 episodes a step, all played by the generator
        spec["algorithm"]["dynamicSampling"] = False  # every step learns
        spec["rollout"]["maxStaleness"] = 1
        spec["trainer"] = {"nodes": 2, "placement": "disaggregated", "gradientCheckpointing": False}
        spec["checkpoint"] = {"everySteps": 1, "keep": 2}
        env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": TOKEN}
        for steps in (2, 3):
            spec["steps"] = steps
            manifest = tmp_path / f"run-{steps}.yaml"
            obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "d"},
                   "spec": spec}  # fmt: skip
            manifest.write_text(yaml.safe_dump(obj))
            cmd = torchrun("-m", "bench.testing.disaggregated_check", str(manifest), str(out))
            proc = launched(cmd, env, seconds=250)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    learner, generator = rows(out, 0), rows(out, 1)
    assert [r["engine"] for r in learner + generator] == ["NoEngine"] * 3 + ["HFEngine"] * 3
    assert [r["step"] for r in learner] == [r["step"] for r in generator] == [1, 2, 3]
    # after step k both hold step k's weights, labelled k, bit for bit (step 3: after the resume)
    for mine, theirs in zip(learner, generator, strict=True):
        assert mine["version"] == theirs["version"] == mine["step"], (mine, theirs)
        assert mine["digest"] == theirs["digest"], (mine, theirs)
        assert theirs["broadcast_seconds"] > 0
    assert len({r["digest"] for r in learner}) == 3  # every step changed the weights
    # the whole step was gathered on the learner (the generator played all 4 episodes), and no
    # rollout came from weights more than maxStaleness updates old
    assert all(r["episodes"] == 4 for r in learner), learner
    assert all(r["loss"] is not None for r in learner), learner
    assert all(0 <= r["staleness_max"] <= 1 for r in learner), learner
    assert learner[0]["staleness_max"] == learner[2]["staleness_max"] == 0  # fresh starts
    history = [json.loads(x) for x in (tmp_path / "out/history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2, 3]
    assert history[1]["rollout_started_at"] < history[0]["learn_ended_at"]  # played meanwhile
    ckpts = sorted(p.name for p in (tmp_path / "out/checkpoints").iterdir() if p.is_dir())
    assert ckpts[-1] == "step-00000003", ckpts  # the learner checkpointed
