"""The training loop end to end on loopback sandboxes with the real tiny model: steps complete,
failures are excluded and counted, reports/metrics/checkpoints appear, and a second run resumes
from the latest checkpoint instead of starting over."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox, task
from test_metrics import free_port

from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource

pytestmark = pytest.mark.asyncio


def local_run(tmp_path: Path, model_dir: Path, urls: list[str], steps: int, port: int):
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    for tid in ("t1", "t2"):
        (tasks / f"{tid}.json").write_text(json.dumps(task(tid)))
    (tasks / "t1.solutions.json").write_text(json.dumps({"reference": ["DONE"]}))  # not a task
    spec = {
        "model": {"path": str(model_dir), "dtype": "float32"},
        "sandboxes": {"urls": urls, "minReady": 1},
        "tasks": {"path": str(tasks)},
        "algorithm": {
            "groupSize": 4,
            "tasksPerStep": 2,
            "maxTurns": 2,
            "maxNewTokens": 6,
            "learningRate": 1e-4,
            "replay": {"enabled": True},
        },
        "rollout": {"maxPixels": 112 * 84, "episodeTimeoutSeconds": 60},
        "trainer": {"gradientCheckpointing": False},
        "checkpoint": {"everySteps": 2, "keep": 1},
        "metrics": {"port": port},
        "steps": steps,
        "outputDir": str(tmp_path / "out"),
    }
    return parse_training_run(
        {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "t"}, "spec": spec}
    )


async def test_loop_trains_reports_and_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    port = free_port()
    steps_seen: list[int] = []
    with LoopbackSandbox() as a, LoopbackSandbox({"setup"}) as broken:
        urls = [a.url, broken.url]
        run = local_run(tmp_path, tiny_model_dir, urls, steps=2, port=port)
        opts = RunOptions(
            console=False,
            source=StaticSource(urls, TOKEN),
            on_step=lambda step, stats: steps_seen.append(step),
        )
        result = await train(run, opts)
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text

        assert steps_seen == [1, 2]
        assert [row["step"] for row in result.history] == [1, 2]
        assert result.outcomes["setup_failed"] >= 1  # the broken sandbox, then it cools off
        assert sum(result.outcomes.values()) == 16  # 2 steps x 2 tasks x G=4, none retried
        assert result.outcomes["success"] + result.outcomes["failure"] >= 14
        assert any("loss" in row and "grad_norm" in row for row in result.history)
        assert all(row["episodes"] == 8 for row in result.history)
        assert sum(row["excluded"] for row in result.history) == result.outcomes["setup_failed"]
        assert 'kubecua_trainer_episodes_total{outcome="setup_failed"}' in metrics
        assert "kubecua_trainer_step 2.0" in metrics
        lines = (tmp_path / "out/episodes/step-0001.jsonl").read_text().splitlines()
        assert len(lines) == result.history[0]["episodes"]
        html = result.report.read_text()
        assert "Step 2" in html
        assert "episodes/screens/" in html
        assert result.curves.stat().st_size > 0
        assert result.last_checkpoint is not None
        assert Path(result.last_checkpoint).exists()
        # Cost (cost.py): every trajectory counted, the leases are the episodes' own lease time
        # (the ledger's from the lease pool, the steps' from the episodes), no GPU on the CPU.
        ledger = json.loads((tmp_path / "out/cost.json").read_text())
        assert ledger["trajectories"] == 16
        leased = sum(row["sandbox_seconds"] for row in result.history)
        assert ledger["sandbox_seconds"] == pytest.approx(leased, abs=0.01)  # no evaluation
        assert ledger["gpu_seconds"] == 0.0
        for row in result.history:
            per = row["sandbox_seconds"] / row["episodes"]
            assert row["sandbox_seconds_per_trajectory"] == pytest.approx(per)
        assert "kubecua_trainer_run_trajectories 16.0" in metrics
        assert 'id="cost"' in html

        # a second run of the same spec with more steps picks up at step 3
        steps_seen.clear()
        run = local_run(tmp_path, tiny_model_dir, urls, steps=3, port=0)
        opts.source = StaticSource(urls, TOKEN)
        result = await train(run, opts)
    assert steps_seen == [3]
    assert [row["step"] for row in result.history] == [1, 2, 3]
    resumed = json.loads((tmp_path / "out/cost.json").read_text())
    assert resumed["trajectories"] == 24  # the first run's 16 and step 3's 8: added, not reset
    assert resumed["sandbox_seconds"] > ledger["sandbox_seconds"]
    checkpoints = [p for p in (tmp_path / "out/checkpoints").iterdir() if p.is_dir()]
    assert len(checkpoints) == 1  # keep: 1
