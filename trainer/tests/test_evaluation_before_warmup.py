"""spec.evaluation.beforeWarmup in a real run (the real tiny model, loopback episode servers, the
warm-up of test_warmup_stage.py): the starting model is evaluated before the warm-up into
untrained/evaluations/step-0000/, the layout `kubecua_trainer evaluate --output-dir
<out>/untrained` writes, apart from step 0's evaluation after the warm-up. It is done once: a
stop during it ends the run with nothing saved, the next run evaluates it again, and a run killed
during the warm-up after it does not evaluate it again when it resumes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_warmup_stage import supervised_step_dying_at, warm_run, write_demos

from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.model import Policy
from kubecua_trainer.run.train import RunOptions, Stop, train
from kubecua_trainer.sources.static import StaticSource

pytestmark = pytest.mark.asyncio


class StopsAtAStart(LoopbackSandbox):
    """The loopback episode server; while `stop` is set, a start requests it on the run's
    event loop, as the SIGTERM handler would."""

    stop: Stop | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        if method == "POST" and path == "/episodes" and self.stop and self.loop:
            self.loop.call_soon_threadsafe(self.stop.requested.set)
        return super().handle(method, path, body)


def replies(folder: Path) -> list[list[str]]:
    lines = [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]
    return [[t["reply"] for t in x["turns"]] for x in lines]


async def test_before_warmup_evaluates_the_starting_model_once_apart_from_step_0(
    tmp_path: Path,
    tiny_model_dir: Path,
    policy: Policy,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    evaluation = {
        "tasks": {"path": str(tmp_path / "tasks"), "ids": ["held-out"]},
        "episodesPerTask": 2,
        "beforeWarmup": True,
    }
    out = tmp_path / "out"
    untrained = out / "untrained" / "evaluations" / "step-0000"
    real_step = Learner.supervised_step
    dies_at_the_third_step, _ = supervised_step_dying_at(3)

    with StopsAtAStart() as sandbox:
        sandbox.loop = asyncio.get_running_loop()
        source = StaticSource([sandbox.url], TOKEN)
        run = warm_run(tmp_path, tiny_model_dir, sandbox.url, demos, evaluation=evaluation)

        # 1. A stop as the untrained evaluation's first episode starts: the run ends as
        # stopped, before the warm-up, with nothing written.
        sandbox.stop = stop = Stop()
        stopped = await train(run, RunOptions(console=False, source=source, stop=stop))
        sandbox.stop = None
        assert stopped.stopped_at == 0
        assert not (untrained / "summary.json").exists()
        assert not (out / "warmup.json").exists()
        assert not list((out / "checkpoints").glob("step-*"))

        # 2. The next run evaluates it again, then dies in the warm-up (no checkpoint).
        monkeypatch.setattr(Learner, "supervised_step", dies_at_the_third_step)
        capsys.readouterr()
        with pytest.raises(RuntimeError, match="killed"):
            await train(run, RunOptions(console=True, source=source))
        said = capsys.readouterr().err
        assert "evaluation of the untrained model (before the warm-up): success" in said, said
        assert said.index("untrained model") < said.index("warm-up epoch 1/")
        assert not list((out / "checkpoints").glob("step-*"))
        assert not (out / "evaluations").exists()  # step 0 comes after the warm-up
        written = (untrained / "summary.json").read_bytes()
        mtime = (untrained / "summary.json").stat().st_mtime_ns

        # 3. Resumed: the warm-up is redone, the untrained model is not evaluated again.
        monkeypatch.setattr(Learner, "supervised_step", real_step)
        started = sandbox.started
        resumed = await train(run, RunOptions(console=False, source=source))
        # step 0's evaluation, step 1's group and step 1's (the last) evaluation, 2 episodes
        # each: none for the untrained model
        assert sandbox.started - started == 6
    assert [row["step"] for row in resumed.history] == [1]
    assert (untrained / "summary.json").read_bytes() == written
    assert (untrained / "summary.json").stat().st_mtime_ns == mtime

    summary = json.loads(written)
    assert (summary["step"], summary["scored"], summary["excluded"]) == (0, 2, 0)
    assert summary["episodes_per_task"] == 2  # the run's evaluation settings
    assert summary["model"] == tiny_model_dir.name  # the starting model, not a checkpoint
    history = (untrained.parent / "history.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in history] == [0]  # one evaluation, written once
    osworld = untrained / "osworld" / "pyautogui" / "screenshot" / tiny_model_dir.name
    assert (osworld / "tasks" / "held-out" / "traj.jsonl").is_file()  # domain: its folder
    # Step 0's evaluation is the warmed-up model's, apart: the warm-up changed the replies.
    step_0 = out / "evaluations" / "step-0000"
    assert json.loads((step_0 / "summary.json").read_text())["scored"] == 2
    assert replies(untrained) != replies(step_0)
