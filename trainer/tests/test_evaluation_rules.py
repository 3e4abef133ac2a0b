"""The evaluation's rules in real runs (tiny model, HTTP episode servers on loopback): an
infrastructure failure is excluded and counted, never scored 0; a held-out task that is also
trained on is refused; a stop during an evaluation keeps the trained step and the next run
evaluates it; sampling at temperature > 0 repeats with the seed; the `evaluate` command says
which flag to fix."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_evaluation_run import ScoredSandbox, as_run, run_spec, write_tasks
from test_metrics import free_port

from kubecua_trainer import cli
from kubecua_trainer.config import ConfigError
from kubecua_trainer.run.train import RunOptions, Stop, train
from kubecua_trainer.sources.static import StaticSource


def evaluate_only(spec: dict, **evaluation: Any) -> dict:
    spec["steps"] = 0
    spec["evaluation"].update(evaluation)
    return spec


def opts(*sandboxes: LoopbackSandbox, stop: Stop | None = None) -> RunOptions:
    source = StaticSource([sb.url for sb in sandboxes], TOKEN)
    return RunOptions(console=False, source=source, stop=stop)


def summary_at(out: Path, step: int) -> dict:
    return json.loads((out / "evaluations" / f"step-{step:04d}" / "summary.json").read_text())


@pytest.mark.asyncio
async def test_setup_failures_are_excluded_and_counted_not_scored(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    out, port = tmp_path / "out", free_port()
    # every held-out task scores 1.0 when it runs: a failure scored 0 would lower the rate
    with LoopbackSandbox({"setup"}) as broken, ScoredSandbox() as good:
        for f in held_dir.rglob("*.json"):
            held = json.loads(f.read_text())
            held["evaluator"]["score"] = 1.0
            f.write_text(json.dumps(held))
        spec = run_spec(tiny_model_dir, [broken.url, good.url], train_dir, held_dir, out, port)
        result = await train(as_run(evaluate_only(spec)), opts(broken, good))
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    summary = summary_at(out, 0)
    assert result.history == []  # steps 0: nothing trained
    assert summary["excluded"] >= 1  # the broken sandbox gets the second concurrent episode
    assert summary["scored"] + summary["excluded"] == 6
    assert summary["excluded_by_reason"] == {"setup_failed": summary["excluded"]}
    assert summary["success_rate"] == 1.0
    assert summary["mean_score"] == 1.0
    assert f'eval_episodes_total{{outcome="setup_failed"}} {summary["excluded"]}.0' in metrics
    assert "kubecua_trainer_eval_success_ratio 1.0" in metrics
    lines = (out / "evaluations/step-0000/episodes.jsonl").read_text().splitlines()
    outcomes = [json.loads(x)["outcome"] for x in lines]
    assert outcomes.count("setup_failed") == summary["excluded"]


@pytest.mark.asyncio
async def test_held_out_task_also_trained_on_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    (held_dir / "files" / "t2.json").write_text((train_dir / "t2.json").read_text())
    with ScoredSandbox() as sb:
        spec = run_spec(tiny_model_dir, [sb.url], train_dir, held_dir, tmp_path / "out", 0)
        with pytest.raises(ConfigError, match=r"spec\.evaluation\.tasks: .*\['t2'\]"):
            await train(as_run(spec), opts(sb))
        assert sb.started == 0  # refused before any episode, training or evaluation


class GatedSandbox(ScoredSandbox):
    """Holds every held-out evaluation until `gate` is set; `evaluating` says one is held."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluating = threading.Event()
        self.gate = threading.Event()

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        ep = self.episode
        held = ep is not None and ep["task"]["evaluator"]["func"] == "fixed"
        if held and path.endswith("/evaluate"):
            self.evaluating.set()
            self.gate.wait(60)
        return super().handle(method, path, body)


@pytest.mark.asyncio
async def test_stop_during_final_evaluation_keeps_the_step_and_the_next_run_evaluates_it(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    out = tmp_path / "out"
    spec = run_spec(tiny_model_dir, [], train_dir, held_dir, out, 0)
    spec["steps"], spec["evaluation"]["atStart"] = 1, False
    with GatedSandbox() as sb:
        spec["sandboxes"]["urls"] = [sb.url]
        stop = Stop()
        running = asyncio.create_task(train(as_run(spec), opts(sb, stop=stop)))
        assert await asyncio.to_thread(sb.evaluating.wait, 120)
        stop.requested.set()
        result = await running
        sb.gate.set()
        assert result.stopped_at == 1  # the run is not finished: the CLI exits 143
        assert (out / "checkpoints" / "step-00000001").is_dir()  # the trained step is kept
        assert not (out / "evaluations" / "step-0001" / "summary.json").exists()
        assert sb.released == sb.started  # the abandoned episode gave its sandbox back
        again = await train(as_run(spec), opts(sb))
    assert again.stopped_at is None
    assert summary_at(out, 1)["scored"] == 6
    assert [row["step"] for row in again.history] == [1]  # step 1 was not trained again


@pytest.mark.asyncio
async def test_sampling_above_zero_repeats_with_the_seed(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    replies: dict[str, list[str]] = {}
    with ScoredSandbox() as sb:
        for name, seed in (("a", 3), ("b", 3), ("c", 4)):
            spec = run_spec(tiny_model_dir, [sb.url], train_dir, held_dir, tmp_path / name, 0)
            spec["seed"] = seed
            await train(as_run(evaluate_only(spec, temperature=1.0)), opts(sb))
            lines = (tmp_path / name / "evaluations/step-0000/episodes.jsonl").read_text()
            replies[name] = [json.loads(x)["turns"][0]["reply"] for x in lines.splitlines()]
    assert replies["a"] == replies["b"]
    assert replies["a"] != replies["c"]
    assert len(set(replies["a"])) > 1  # sampled, not greedy: the 6 replies differ


def test_evaluate_command_names_what_to_fix(
    tmp_path: Path,
    tiny_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN_FILE", "")  # recorded, so removed after the test
    monkeypatch.delenv("KUBECUA_SANDBOX_TOKEN_FILE")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    runs = tmp_path / "run"
    (runs / "checkpoints" / "step-00000004").mkdir(parents=True)
    (runs / "checkpoints" / "step-00000004" / "config.json").write_text("{}")
    base = ["--tasks", str(tasks), "--output-dir", str(tmp_path / "o")]
    cases = [
        ([str(tmp_path / "nope"), "--local", "1"], "MODEL: .* is not a model directory"),
        ([str(runs / "checkpoints"), "--local", "1"], "checkpoint root; give one of .*step-0+4"),
        ([str(tiny_model_dir), "--pool", "p"], "--pool: give the SandboxPool's --namespace"),
        ([str(tiny_model_dir), "--local", "1", "--episodes-per-task", "0"],
         "--episodes-per-task: Input should be greater than or equal to 1"),
        ([str(tiny_model_dir), "--urls", "ftp://x"], "--urls.*http"),
        ([str(tiny_model_dir), "--local", "1", "--system-prompt", "Screen {size}"],
         "--system-prompt: Value error, only {width} and {height} may be substituted"),
        ([str(tiny_model_dir), "--urls", "http://x", "--token-file", str(tmp_path / "none")],
         "--token-file: .* is not a file"),
    ]  # fmt: skip
    for args, message in cases:
        assert cli.main(["evaluate", *args, *base]) == 2
        assert re.search(message, capsys.readouterr().err), message
    occupied = ["--output-dir", str(runs), "--tasks", str(tasks), "--local", "1"]
    assert cli.main(["evaluate", str(tiny_model_dir), *occupied]) == 2
    assert "holds a training run's checkpoints" in capsys.readouterr().err


def test_evaluate_with_spec_evaluates_as_that_run_does(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubecua_trainer.evaluation.standalone import evaluation_run

    monkeypatch.setenv("KUBECUA_CACHE", str(tmp_path))
    example = Path(__file__).resolve().parents[2] / "examples" / "trainingrun-local.yaml"
    common = ["evaluate", str(tiny_model_dir), "--spec", str(example), "--local", "1"]
    args = cli.parser().parse_args([*common, "--output-dir", str(tmp_path / "a")])
    spec = evaluation_run(args).spec
    assert spec.evaluation is not None
    assert str(spec.evaluation.tasks.path).endswith("sandbox-image/tasks/colourkeys-demo/heldout")
    assert (spec.evaluation.temperature, spec.evaluation.max_turns) == (0.0, 3)
    assert (spec.rollout.max_pixels, spec.algorithm.max_new_tokens) == (5600, 16)
    assert spec.rollout.system_prompt is not None
    assert spec.rollout.system_prompt.startswith("You control a Linux desktop")
    assert (spec.steps, spec.warmup) == (0, None)  # evaluates MODEL; trains nothing
    assert spec.evaluation.before_warmup is False  # the manifest's run schedule, not taken
    # A flag given as well wins over the manifest.
    flags = ["--temperature", "0.7", "--episodes-per-task", "3", "--output-dir", str(tmp_path)]
    spec = evaluation_run(cli.parser().parse_args([*common, *flags])).spec
    assert spec.evaluation is not None
    assert (spec.evaluation.temperature, spec.evaluation.episodes_per_task) == (0.7, 3)


def test_evaluate_needs_tasks_or_a_spec_with_evaluation(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--output-dir", str(tmp_path / "o"), "--local", "1"]
    assert cli.main(["evaluate", str(tiny_model_dir), *out]) == 2
    assert "--tasks: give the held-out tasks (or --spec" in capsys.readouterr().err
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        "apiVersion: kubecua.dev/v1alpha1\nkind: TrainingRun\nmetadata: {name: p}\n"
        "spec: {model: {path: /m}, sandboxes: {urls: ['http://a']}, tasks: {path: /t}, steps: 1}\n"
    )
    assert cli.main(["evaluate", str(tiny_model_dir), "--spec", str(plain), *out]) == 2
    assert "has no spec.evaluation to evaluate as; give --tasks" in capsys.readouterr().err
