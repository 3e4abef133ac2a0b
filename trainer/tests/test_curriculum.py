"""The curriculum by pass rate (spec.tasks.curriculum, rollout/curriculum.py): in-band tasks are
drawn more often, none starves, the pass rates resume exactly, and a real run (loopback
sandboxes, the tiny model, with a LoRA adapter) checkpoints them and shows their distribution in
metrics, the report and curriculum.json."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import httpx
import pytest
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_metrics import free_port
from test_train import local_run

from kubecua_api.curriculum import CurriculumConfig
from kubecua_api.lora import LoraConfig
from kubecua_trainer.rollout.curriculum import Curriculum
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.telemetry.status import build_curriculum_status

CFG = CurriculumConfig.model_validate({"band": {"low": 0.2, "high": 0.8}, "floor": 0.1})
TASKS = [{"id": f"t{i}"} for i in range(10)]
# t0-t2 always solved, t3-t5 never, t6-t8 half the time; t9 never played
RATE = {f"t{i}": 1.0 if i < 3 else 0.0 if i < 6 else 0.5 for i in range(9)}


def results(step: int, ids: list[str]) -> dict[str, list[bool]]:
    """A group of 4 per task, solved at the task's RATE (half: the first two episodes)."""
    return {t: [e < 4 * RATE[t] for e in range(4)] for t in ids if t in RATE}


def test_tasks_in_the_band_are_drawn_floor_times_more_often_and_none_starves() -> None:
    cur = Curriculum(CFG, [t["id"] for t in TASKS])
    cur.observe(1, results(1, list(RATE)))
    drawn = Counter(t["id"] for s in range(2, 2002) for t in cur.draw(TASKS, s, 2, seed=3))
    in_band = [drawn[t] for t in ("t6", "t7", "t8", "t9")]  # t9: unplayed, drawn as in band
    out = [drawn[f"t{i}"] for i in range(6)]
    # weights 1 (x4) and 0.1 (x6), two distinct tasks per step: an in-band task is in ~42% of
    # the steps, an out-of-band one in ~6%; the ratio is below 10 only because of no repeats
    assert min(in_band) > 5 * max(out), drawn
    assert min(out) > 50, drawn  # the floor: an always or never solved task is still drawn
    assert all(len({t["id"] for t in cur.draw(TASKS, s, 2, 3)}) == 2 for s in range(2, 50))
    assert cur.summary()["classes"] == {
        "unplayed": 1, "never": 3, "below_band": 0, "in_band": 3, "above_band": 0, "always": 3,
    }  # fmt: skip
    assert cur.summary()["histogram"] == [3, 0, 0, 0, 0, 3, 0, 0, 0, 3]
    status = build_curriculum_status(1, cur.summary())
    assert (status["inBand"], status["never"], status["meanPassRate"]) == (3, 3, 0.5)


def test_a_step_with_more_tasks_than_the_set_repeats_the_draw() -> None:
    cur = Curriculum(CFG, ["a", "b"])
    picked = [t["id"] for t in cur.draw([{"id": "a"}, {"id": "b"}], 1, 5, seed=0)]
    assert len(picked) == 5
    assert set(picked[:2]) == {"a", "b"}


def test_the_window_forgets_old_episodes_and_failures_do_not_count() -> None:
    cfg = CurriculumConfig(window=4)
    cur = Curriculum(cfg, ["a"])
    cur.observe(1, {"a": [True] * 4})
    cur.observe(2, {"a": [False, False]})
    cur.draw([{"id": "a"}], 3, 1, 0)  # applies steps 1 and 2
    assert cur.pass_rate("a") == 0.5  # the last 4 scored: T, T, F, F
    assert cur.weight("a") == 1.0
    cur.observe(3, {"a": []})  # every episode excluded (infrastructure failures)
    cur.draw([{"id": "a"}], 4, 1, 0)
    assert cur.pass_rate("a") == 0.5


@pytest.mark.parametrize("lag", [0, 1])
def test_a_resumed_curriculum_draws_what_the_uninterrupted_one_drew(lag: int) -> None:
    """Steps 1-8 straight, against steps 1-4, the state through JSON (a checkpoint's
    trainer_state.json), then 5-8 in a fresh object. With lag 1 (rollout.maxStaleness 1) step
    s+1 is drawn before step s is observed, as the loop plays ahead."""
    outcomes = random.Random(7)
    table = {(s, t["id"]): [outcomes.random() < 0.4 for _ in range(4)]
             for s in range(1, 9) for t in TASKS}  # fmt: skip

    def run(cur: Curriculum, steps: range) -> list[list[str]]:
        drawn = []
        for s in steps:
            ids = [t["id"] for t in cur.draw(TASKS, s, 3, seed=11)]
            if lag:  # the next step is drawn before this one learns
                cur.draw(TASKS, s + 1, 3, seed=11)
            cur.observe(s, {t: table[(s, t)] for t in ids})
            drawn.append(ids)
        return drawn

    straight = run(Curriculum(CFG, [t["id"] for t in TASKS], lag), range(1, 9))
    first = Curriculum(CFG, [t["id"] for t in TASKS], lag)
    head = run(first, range(1, 5))
    state = json.loads(json.dumps(first.state_dict()))
    resumed = Curriculum(CFG, [t["id"] for t in TASKS], lag)
    resumed.load_state_dict(state)
    assert head + run(resumed, range(5, 9)) == straight
    assert len({tuple(d) for d in straight}) > 1  # the draws depend on the step


@pytest.mark.asyncio
async def test_a_lora_run_with_a_curriculum_checkpoints_and_shows_the_pass_rates(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    port = free_port()
    with LoopbackSandbox() as sandbox:
        urls = [sandbox.url]

        def spec_run(steps: int, metrics_port: int):  # type: ignore[no-untyped-def]
            run = local_run(tmp_path, tiny_model_dir, urls, steps=steps, port=metrics_port)
            run.spec.tasks.curriculum = CurriculumConfig(window=8)
            run.spec.model.lora = LoraConfig(rank=2)
            run.spec.algorithm.tasks_per_step = 1
            return run

        opts = RunOptions(console=False, source=StaticSource(urls, TOKEN))
        result = await train(spec_run(2, port), opts)
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
        ckpt = Path(str(result.last_checkpoint))
        state = json.loads((ckpt / "trainer_state.json").read_text())["extra"]["curriculum"]
        scored = sum(row["episodes"] - row["excluded"] for row in result.history)
        applied = sum(len(v) for v in state["outcomes"].values())  # window 8 >= 4 per step
        pending = sum(len(v) for r in state["pending"].values() for v in r.values())
        assert (applied, state["applied"], list(state["pending"])) == (4, 1, ["2"])
        assert applied + pending == scored  # step 2's, applied once step 3 is drawn
        assert (ckpt / "adapter_model.safetensors").is_file()  # LoRA: the adapter alone
        assert not (ckpt / "model.safetensors").exists()
        shown = json.loads((tmp_path / "out/curriculum.json").read_text())
        assert (shown["step"], shown["tasks"]) == (2, 2)
        assert sum(shown["classes"].values()) == 2
        assert 'kubecua_trainer_curriculum_tasks{pass_rate="unplayed"}' in metrics
        assert 'id="curriculum"' in result.report.read_text()

        result = await train(spec_run(3, 0), opts)  # resumes at step 3 with the saved rates
    assert [row["step"] for row in result.history] == [1, 2, 3]
    assert json.loads((tmp_path / "out/curriculum.json").read_text())["step"] == 3
