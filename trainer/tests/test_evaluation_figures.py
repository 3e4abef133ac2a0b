"""The evaluation's figures and files without a run: pass@k against hand-computed values, pooled
success rates that leave infrastructure failures out, the schedule, the status block, the
Prometheus values on a registry, the OSWorld-style task folder, and the sampling seed that
leaves the training run's random stream where it was."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from prometheus_client import generate_latest

from kubecua_trainer.config import EvaluationConfig, TasksConfig
from kubecua_trainer.evaluation.results import write_osworld_task
from kubecua_trainer.evaluation.runner import sampling_seed, seeded_sampling
from kubecua_trainer.evaluation.scoring import TaskFigures, pass_at_k, summarize
from kubecua_trainer.evaluation.stage import console_line, is_due
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.telemetry.metrics import TrainerMetrics
from kubecua_trainer.telemetry.status import build_evaluation_status


def episode(key: str, task_id: str, score: float | None, reason: str = "") -> EpisodeResult:
    ep = EpisodeResult(task_id=task_id, group_id=key.rsplit("-", 1)[0], key=key)
    if score is None:
        ep.fail(reason or "setup_failed", "502 on start")
    else:
        ep.score(score)
    return ep


def test_pass_at_k_matches_the_hand_computed_estimator() -> None:
    # n = 5 episodes, c = 2 successes:
    # pass@1 = 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4
    # pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    # pass@3 = 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
    # pass@4 = 1 - C(3,4)/C(5,4) = 1 - 0/5 = 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 4) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(3, 1, 4) is None  # fewer scored episodes than k: no estimate


def test_summary_pools_scored_episodes_and_counts_exclusions_by_reason() -> None:
    # task a: 1, 0, 0, 0; task b: 1, 1, 0, excluded (timeout); task c: every desktop failed
    a = TaskFigures("a", "files", [episode(f"eval-s0001-t000-e0{i}", "a", s)
                                   for i, s in enumerate([1.0, 0.0, 0.0, 0.0])])  # fmt: skip
    b = TaskFigures("b", "web", [episode("eval-s0001-t001-e00", "b", 1.0),
                                 episode("eval-s0001-t001-e01", "b", 1.0),
                                 episode("eval-s0001-t001-e02", "b", 0.5),
                                 episode("eval-s0001-t001-e03", "b", None, "timeout")])  # fmt: skip
    c = TaskFigures("c", "web", [episode(f"eval-s0001-t002-e0{i}", "c", None) for i in range(4)])
    got = summarize([a, b, c], episodes_per_task=4)
    # success 3 of 7 scored; mean score (1 + 0 + 0 + 0 + 1 + 1 + 0.5) / 7 = 0.5
    assert got["scored"] == 7
    assert got["excluded"] == 5
    assert got["success_rate"] == pytest.approx(3 / 7)
    assert got["mean_score"] == pytest.approx(0.5)
    assert got["excluded_by_reason"] == {"setup_failed": 4, "timeout": 1}
    # pass@1: a 1/4, b 2/3 (n = 3, c = 2), c has none: (0.25 + 2/3) / 2 = 0.458333
    # pass@4: a 1.0; b has 3 scored < 4; c none: 1.0
    assert got["pass_at_k"] == {"1": pytest.approx(0.4583333), "4": 1.0}
    rows = {r["task_id"]: r for r in got["tasks"]}
    assert rows["b"]["scored"] == 3
    assert rows["b"]["excluded"] == 1
    assert rows["b"]["pass_at_k"] == {"1": pytest.approx(2 / 3), "4": None}
    assert rows["c"]["success_rate"] is None
    assert rows["c"]["mean_score"] is None
    assert rows["a"]["episodes"][0] == "eval-s0001-t000-e00"


@pytest.mark.parametrize(
    ("every", "at_start", "steps", "due"),
    [
        (2, True, 5, [0, 2, 4, 5]),
        (0, True, 5, [0, 5]),
        (0, False, 5, [5]),
        (3, False, 6, [3, 6]),
        (0, False, 0, [0]),  # an evaluate-only run evaluates at step 0 whatever atStart says
    ],
)
def test_evaluation_schedule(every: int, at_start: bool, steps: int, due: list[int]) -> None:
    cfg = EvaluationConfig(tasks=TasksConfig(path="x"), every_steps=every, at_start=at_start)
    assert [s for s in range(steps + 1) if is_due(cfg, s, steps)] == due


def summary_of(tasks: list[TaskFigures], step: int = 3) -> dict:
    return {"step": step, "model": "m", "seed": 0, "temperature": 0.0, "episodes_per_task": 2,
            "max_turns": 3, **summarize(tasks, 2), "seconds": 4.5}  # fmt: skip


def two_tasks() -> list[TaskFigures]:
    return [
        TaskFigures("zeta", "files", [episode("eval-s0003-t000-e00", "zeta", 1.0),
                                      episode("eval-s0003-t000-e01", "zeta", 0.0)]),
        TaskFigures("alpha", "web", [episode("eval-s0003-t001-e00", "alpha", 0.0),
                                     episode("eval-s0003-t001-e01", "alpha", None)]),
    ]  # fmt: skip


def test_status_block_has_the_contract_fields() -> None:
    status = build_evaluation_status(summary_of(two_tasks()))
    assert status["step"] == 3
    assert status["successRate"] == pytest.approx(1 / 3)
    assert status["episodes"] == 3
    assert status["excluded"] == 1
    # pass@2: zeta 1 - C(1,2)/C(2,2) = 1; alpha has 1 scored < 2: zeta alone
    assert status["passAtK"] == {"k": 2, "value": 1.0}
    assert [t["id"] for t in status["tasks"]] == ["alpha", "zeta"]  # sorted by id
    assert status["tasks"][0] == {"id": "alpha", "episodes": 1, "successRate": 0.0}
    assert status["tasksTruncated"] is False
    assert status["time"].endswith("Z")
    many = [TaskFigures(f"t{i:03d}", "d", [episode(f"k{i}", f"t{i:03d}", 1.0)]) for i in range(120)]
    big = build_evaluation_status(summary_of(many))
    assert len(big["tasks"]) == 100
    assert big["tasksTruncated"] is True


def test_metrics_carry_the_last_evaluation() -> None:
    metrics = TrainerMetrics()
    tasks = two_tasks()
    outcomes = {"success": 1, "failure": 2, "setup_failed": 1}
    metrics.observe_evaluation(summary_of(tasks), outcomes)
    metrics.observe_evaluation(summary_of(tasks, step=6), outcomes)
    text = generate_latest(metrics.registry).decode()
    assert "kubecua_trainer_eval_step 6.0" in text
    assert "kubecua_trainer_eval_success_ratio 0.3333333333333333" in text
    assert 'kubecua_trainer_eval_pass_at_k_ratio{k="1"} 0.25' in text
    assert 'kubecua_trainer_eval_pass_at_k_ratio{k="2"} 1.0' in text
    assert 'kubecua_trainer_eval_task_success_ratio{task="zeta"} 0.5' in text
    assert 'kubecua_trainer_eval_episodes_total{outcome="setup_failed"} 2.0' in text  # counts
    assert 'kubecua_trainer_eval_episodes_total{outcome="failure"} 4.0' in text
    assert "kubecua_trainer_eval_duration_seconds 4.5" in text


def test_console_line_names_rate_scored_episodes_and_exclusions() -> None:
    line = console_line(summary_of(two_tasks()))
    assert line == (
        "evaluation at step 3: success 33% of 3 scored episodes (1 excluded: setup_failed 1), "
        "pass@2 100%, 4.5s"
    )


def test_osworld_task_folder_holds_score_steps_and_screens(tmp_path: Path) -> None:
    ep = episode("eval-s0003-t000-e00", "zeta", 1.0)
    click = "Click it.\n```python\npyautogui.click(5, 6)\n```"
    ep.turns = [Turn(None, click, "pyautogui.click(10, 12)"),
                Turn(None, "oops", None, feedback="no action found."),
                Turn(None, "DONE", "DONE")]  # fmt: skip
    ep.turns[0].screen, ep.turns[1].screen = b"\x89PNG first", b"\x89PNG second"
    ep.final_screen = b"\xff\xd8\xff final"
    row = summary_of([TaskFigures("zeta", "files", [ep])])["tasks"][0]
    folder = tmp_path / "zeta"
    write_osworld_task(folder, row, [ep])
    assert (folder / "result.txt").read_text() == "1.0\n"
    lines = [json.loads(x) for x in (folder / "traj.jsonl").read_text().splitlines()]
    assert [x["step_num"] for x in lines] == [1, 2, 3]
    assert lines[0]["action"] == "pyautogui.click(10, 12)"
    assert lines[0]["response"].startswith("Click it.")
    assert [x["done"] for x in lines] == [False, False, True]
    # the screen after step 1 is the one shown at turn 2; no new screen after the invalid
    # reply (turn 3 had none), so steps 2 and 3 are followed by the final screen
    assert (folder / lines[0]["screenshot_file"]).read_bytes() == b"\x89PNG second"
    assert lines[1]["screenshot_file"] == "step_2_eval-s0003-t000-e00.jpg"
    assert (folder / lines[2]["screenshot_file"]).read_bytes() == b"\xff\xd8\xff final"
    assert lines[2]["info"]["outcome"] == "success"
    assert lines[2]["info"]["score"] == 1.0
    assert lines[1]["info"]["feedback"] == "no action found."


def test_task_without_scored_episodes_has_no_result_file(tmp_path: Path) -> None:
    ep = episode("eval-s0003-t000-e00", "zeta", None)
    row = summary_of([TaskFigures("zeta", "files", [ep])])["tasks"][0]
    write_osworld_task(tmp_path / "zeta", row, [ep])
    assert not (tmp_path / "zeta" / "result.txt").exists()  # OSWorld's "not finished"


def test_seeded_sampling_repeats_and_leaves_the_run_stream_alone() -> None:
    torch.manual_seed(11)
    random.seed(11)
    expected = (torch.rand(4), random.random())
    torch.manual_seed(11)
    random.seed(11)
    draws = []
    for _ in range(2):
        with seeded_sampling(sampling_seed(7, 3)):
            draws.append((torch.rand(8), random.random()))
    assert torch.equal(draws[0][0], draws[1][0])
    assert draws[0][1] == draws[1][1]
    after = (torch.rand(4), random.random())
    assert torch.equal(after[0], expected[0])
    assert after[1] == expected[1]
    assert sampling_seed(7, 3) == sampling_seed(7, 3)
    assert len({sampling_seed(7, 3), sampling_seed(7, 4), sampling_seed(8, 3)}) == 3
