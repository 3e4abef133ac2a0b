"""export-successes: a run's successful training episodes (not its failures, not its excluded
episodes, not its evaluations) become a trajectory file with copies of their screenshots, which
the warm-up reads as demonstrations."""

from __future__ import annotations

import json
from pathlib import Path

from bench.testing.images import screenshot
from kubecua_trainer.cli import main
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.trajectories import read_trajectories, write_trajectories


def episode(key: str, reward: float | None, seed: int) -> EpisodeResult:
    ep = EpisodeResult(task_id=f"task-{key}", group_id="g", key=key, instruction="do it")
    ep.turns = [
        Turn(screenshot(seed), "```python\npyautogui.click(3, 4)\n```", "pyautogui.click(6, 8)"),
        Turn(screenshot(seed + 1), "DONE", "DONE"),
    ]
    ep.final_screenshot, ep.screen_size = screenshot(seed + 2), (320, 200)
    if reward is None:
        ep.fail("timeout", "over 60s")
    else:
        ep.score(reward)
    return ep


def fake_run(out: Path) -> None:
    """A run's output folder as train.py leaves it (the report writes episodes/step-NNNN.jsonl
    this way): two steps of episodes and an evaluation."""
    steps = {
        1: [episode("s0001-e0", 1.0, 1), episode("s0001-e1", 0.0, 5)],
        2: [episode("s0002-e0", None, 9), episode("s0002-e1", 1.0, 13)],
    }
    for step, eps in steps.items():
        write_trajectories(out / "episodes" / f"step-{step:04d}.jsonl", eps, step=step)
    evaluation = out / "evaluations" / "step-0002" / "episodes.jsonl"
    write_trajectories(evaluation, [episode("eval-s0002-t000-e00", 1.0, 17)], step=2)


def test_export_keeps_only_successes_and_their_screenshots(tmp_path: Path, capsys) -> None:
    fake_run(tmp_path / "run")
    to = tmp_path / "demos" / "run1.jsonl"
    assert main(["export-successes", str(tmp_path / "run"), "--to", str(to)]) == 0
    assert "2 of 4 episodes" in capsys.readouterr().out
    demos = list(read_trajectories(to))
    assert [d.record["key"] for d in demos] == ["s0001-e0", "s0002-e1"]
    assert all(d.succeeded and d.reward == 1.0 for d in demos)
    originals = {t.record["key"]: t for t in read_trajectories(tmp_path / "run" / "episodes")}
    for demo in demos:
        key = demo.record["key"]
        source = originals[key]
        assert demo.record["step"] == source.record["step"]
        assert [t.reply for t in demo.turns] == [t.reply for t in source.turns]
        for mine, theirs in zip(demo.turns, source.turns, strict=True):
            assert mine.screenshot is not None
            assert theirs.screenshot is not None
            assert mine.screenshot.parent == to.parent / "screens" / key  # copied beside it
            assert mine.screenshot.read_bytes() == theirs.screenshot.read_bytes()
        final = to.parent / demo.record["final_screenshot"]
        original = tmp_path / "run" / "episodes" / source.record["final_screenshot"]
        assert final.read_bytes() == original.read_bytes()
    copied = sorted(p.name for p in (to.parent / "screens").iterdir())
    assert copied == ["s0001-e0", "s0002-e1"]  # nothing of failures, exclusions, evaluations


def test_export_with_a_lower_bar_and_refusals(tmp_path: Path, capsys) -> None:
    fake_run(tmp_path / "run")
    to = tmp_path / "all.jsonl"
    assert (
        main(["export-successes", str(tmp_path / "run"), "--to", str(to), "--min-reward", "0"]) == 0
    )
    assert [json.loads(x)["key"] for x in to.read_text().splitlines()] == [
        "s0001-e0", "s0001-e1", "s0002-e1"]  # fmt: skip
    assert main(["export-successes", str(tmp_path / "run"), "--to", str(to)]) == 2
    assert "exists; export into a new file" in capsys.readouterr().err
    assert main(["export-successes", str(tmp_path / "nothing"), "--to", str(tmp_path / "x")]) == 2
    assert "no episodes/step-*.jsonl" in capsys.readouterr().err


def test_exported_lines_keep_every_field_but_the_screenshot_paths(tmp_path: Path) -> None:
    fake_run(tmp_path / "run")
    to = tmp_path / "d.jsonl"
    assert main(["export-successes", str(tmp_path / "run"), "--to", str(to)]) == 0
    line = json.loads(to.read_text().splitlines()[0])
    source = json.loads((tmp_path / "run/episodes/step-0001.jsonl").read_text().splitlines()[0])
    paths = {"turns", "final_screenshot"}
    assert {k: v for k, v in line.items() if k not in paths} == {
        k: v for k, v in source.items() if k not in paths
    }
    assert line["turns"][0]["screenshot"] == "screens/s0001-e0/turn-00.png"
