"""Held-out evaluation inside a real run (the real tiny model, real HTTP episode servers on
loopback): it runs at step 0 and the last step and writes its results in the contract's shapes
(summary.json, episodes.jsonl, the OSWorld-style folder, history.jsonl, metrics); a resumed run
does not evaluate a step again; the standalone `evaluate` command on the step's checkpoint gives
the same figures and the same replies as the in-run evaluation of that step.

The held-out tasks score what their JSON says (ScoredSandbox): the figures then have successes,
failures and a fractional score, and the model's replies (saved with every episode) show that
both evaluations ran the same weights the same way."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox, task
from test_metrics import free_port

from kubecua_trainer import cli
from kubecua_trainer.config import API_VERSION, KIND, TrainingRun, parse_training_run
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource

# held-out task -> (domain folder, score its evaluator gives)
HELD_OUT = {"h-open": ("files", 1.0), "h-save": ("files", 0.0), "h-find": ("web", 0.5)}


class ScoredSandbox(LoopbackSandbox):
    """The loopback episode server, plus evaluator {"func": "fixed", "score": s}."""

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        ep = self.episode
        if ep is not None and path == f"/episodes/{ep['id']}/evaluate":
            evaluator = ep["task"]["evaluator"]
            if evaluator["func"] == "fixed":
                return 200, {"score": float(evaluator["score"]), "details": {}}
        return super().handle(method, path, body)


def write_tasks(root: Path) -> tuple[Path, Path]:
    train_dir, held_dir = root / "train", root / "heldout"
    train_dir.mkdir(parents=True)
    for tid in ("t1", "t2"):
        (train_dir / f"{tid}.json").write_text(json.dumps(task(tid)))
    for tid, (domain, score) in HELD_OUT.items():
        (held_dir / domain).mkdir(parents=True, exist_ok=True)
        held = {**task(tid), "evaluator": {"func": "fixed", "score": score}}
        (held_dir / domain / f"{tid}.json").write_text(json.dumps(held))
    return train_dir, held_dir


def run_spec(model: Path, urls: list[str], tasks: Path, held: Path, out: Path, port: int) -> dict:
    return {
        "model": {"path": str(model), "dtype": "float32"},
        "sandboxes": {"urls": urls, "minReady": 1},
        "tasks": {"path": str(tasks)},
        "evaluation": {
            "tasks": {"path": str(held)},
            "episodesPerTask": 2,
            "maxTurns": 1,
            "everySteps": 1,
        },
        "algorithm": {
            **{"groupSize": 2, "tasksPerStep": 2, "maxTurns": 1, "maxNewTokens": 6},
            "learningRate": 1e-3,  # the step-2 weights are not the initial ones
        },
        "rollout": {"maxPixels": 112 * 84, "episodeTimeoutSeconds": 60},
        "trainer": {"gradientCheckpointing": False},
        "checkpoint": {"everySteps": 10, "keep": 5},  # step 1: saved to be evaluated
        "metrics": {"port": port},
        "steps": 2,
        "outputDir": str(out),
    }


def as_run(spec: dict) -> TrainingRun:
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "e"}, "spec": spec}
    return parse_training_run(obj)


def figures(summary: dict) -> dict:
    """What must agree between two evaluations of the same weights (keys name the step)."""
    keep = ("success_rate", "mean_score", "scored", "excluded", "pass_at_k")
    rows = [{k: v for k, v in r.items() if k != "episodes"} for r in summary["tasks"]]
    return {**{k: summary[k] for k in keep}, "tasks": rows}


def replies(folder: Path) -> dict[tuple[str, str], list[str]]:
    lines = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]
    return {(x["task_id"], x["key"][-3:]): [t["reply"] for t in x["turns"]] for x in lines}


def test_run_evaluates_on_schedule_and_standalone_agrees_with_it(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --token-file goes to the environment, as the CLI's process would keep it: undone after
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN_FILE", "")  # recorded, so removed after the test
    monkeypatch.delenv("KUBECUA_SANDBOX_TOKEN_FILE")
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    out, port = tmp_path / "out", free_port()
    with ScoredSandbox() as sb:
        run = as_run(run_spec(tiny_model_dir, [sb.url], train_dir, held_dir, out, port))
        opts = RunOptions(console=False, source=StaticSource([sb.url], TOKEN))
        result = asyncio.run(train(run, opts))
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text

        evals = out / "evaluations"
        assert [row["step"] for row in result.history] == [1, 2]
        assert sorted(p.name for p in evals.glob("step-*")) == [f"step-000{i}" for i in range(3)]
        summary = json.loads((evals / "step-0002" / "summary.json").read_text())
        # 3 tasks x 2 episodes, scores 1, 0, 0.5: one task in three solved
        assert summary["scored"] == 6
        assert summary["excluded"] == 0
        assert summary["success_rate"] == pytest.approx(2 / 6)
        assert summary["mean_score"] == pytest.approx(0.5)
        assert summary["pass_at_k"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(1 / 3)}
        by_id = {r["task_id"]: r for r in summary["tasks"]}
        assert by_id["h-find"]["domain"] == "web"
        assert by_id["h-open"]["domain"] == "files"
        assert by_id["h-open"]["episodes"] == ["eval-s0002-t000-e00", "eval-s0002-t000-e01"]
        history = [json.loads(x) for x in (evals / "history.jsonl").read_text().splitlines()]
        assert [h["step"] for h in history] == [0, 1, 2]
        assert "tasks" not in history[0]
        assert "kubecua_trainer_eval_step 2.0" in metrics
        assert "kubecua_trainer_eval_success_ratio 0.333" in metrics
        # 3 evaluations x 2 successes
        assert 'kubecua_trainer_eval_episodes_total{outcome="success"} 6.0' in metrics
        assert 'kubecua_trainer_eval_task_success_ratio{task="h-open"} 1.0' in metrics
        # the evaluation episodes never reached the trainer's episodes
        trained = (out / "episodes" / "step-0001.jsonl").read_text()
        assert "eval-" not in trained
        assert "h-open" not in trained

        # A second run of the same spec finds the figures on disk and evaluates nothing again;
        # its fresh metrics endpoint shows the newest evaluation (it counts no episode of it).
        started, port = sb.started, free_port()
        again = as_run(run_spec(tiny_model_dir, [sb.url], train_dir, held_dir, out, port))
        asyncio.run(train(again, RunOptions(console=False, source=StaticSource([sb.url], TOKEN))))
        assert sb.started == started
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "kubecua_trainer_eval_step 2.0" in metrics
        assert 'kubecua_trainer_eval_task_success_ratio{task="h-find"} 0.0' in metrics
        assert "kubecua_trainer_eval_episodes_total{" not in metrics

        # The standalone evaluation of the step-1 checkpoint (the CLI, in this main thread: it
        # listens for SIGTERM): the figures and replies of the in-run evaluation of step 1.
        token = tmp_path / "token"
        token.write_text(TOKEN)
        ckpt = out / "checkpoints" / "step-00000001"
        in_run = json.loads((evals / "step-0001" / "summary.json").read_text())
        code = cli.main([
            "evaluate", str(ckpt), "--tasks", str(held_dir), "--urls", sb.url,
            "--token-file", str(token), "--episodes-per-task", "2", "--max-turns", "1",
            "--max-new-tokens", "6", "--max-pixels", str(112 * 84),
            "--output-dir", str(tmp_path / "alone"), "--no-progress",
        ])  # fmt: skip
    assert code == 0
    alone = tmp_path / "alone" / "evaluations" / "step-0000"
    standalone = json.loads((alone / "summary.json").read_text())
    assert standalone["model"] == "step-00000001"
    assert figures(standalone) == figures(in_run)
    assert replies(alone) == replies(evals / "step-0001")
    assert replies(alone) != replies(evals / "step-0000")  # training changed the greedy replies
