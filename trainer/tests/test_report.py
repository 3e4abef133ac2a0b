"""Episodes on disk (JSONL + screenshots), the HTML filmstrip report and the PNG curves."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.records import EpisodeResult, Turn


def episode(key: str, reward: float | None, outcome: str | None = None) -> EpisodeResult:
    shot = Image.new("RGB", (56, 28), (200, 10, 10))
    ep = EpisodeResult(task_id="t1", group_id="s0001-g00", key=key, instruction="Open <b>it</b>")
    ep.turns = [
        Turn(shot, "```python\npyautogui.click(1, 2)\n```", "pyautogui.click(2, 4)", gen_tokens=9),
        Turn(None, "gibberish", None, feedback="Your last reply was not a valid action"),
    ]
    ep.final_screenshot = shot
    if outcome:
        ep.fail(outcome, "HTTP 502 SetupFailed")
    else:
        ep.score(reward or 0.0)
    return ep


def test_episodes_are_saved_as_jsonl_with_screenshots(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    path = report.save_episodes(1, [episode("e0", 1.0), episode("e1", None, "sandbox_lost")])
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["outcome"] for x in lines] == ["success", "sandbox_lost"]
    assert lines[0]["reward"] == 1.0
    assert lines[1]["reward"] is None
    assert lines[0]["turns"][0]["action"] == "pyautogui.click(2, 4)"
    assert lines[0]["gen_tokens"] == 9
    screens = lines[0]["screens"]
    assert screens[1] is None  # the feedback turn showed no screenshot
    assert Image.open(tmp_path / screens[0]).size == (56, 28)
    assert (tmp_path / screens[-1]).name == "final.png"


def test_report_has_filmstrip_actions_rewards_and_curves(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "demo")
    for step, reward in ((1, 0.0), (2, 0.5)):
        report.save_episodes(step, [episode(f"s{step}-e0", reward)])
        report.append_history({"step": step, "reward_mean": reward, "success_rate": reward / 2})
    html = report.render().read_text()
    assert "Step 2: reward 0.500" in html
    assert "Step 1: reward 0.000" in html
    assert html.index("Step 2") < html.index("Step 1")  # newest first
    assert 'src="episodes/screens/s2-e0/turn-00.png"' in html
    assert "pyautogui.click(2, 4)" in html
    assert "(invalid) gibberish" in html
    assert "Open &lt;b&gt;it&lt;/b&gt;" in html  # escaped
    curves = Image.open(report.curves_path)
    assert curves.format == "PNG"
    assert curves.size == (700, 350)


def test_history_keeps_the_last_row_of_a_repeated_step(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    report.append_history({"step": 1, "reward_mean": 0.1, "success_rate": 0.0})
    report.append_history({"step": 2, "reward_mean": 0.2, "success_rate": 0.0})
    report.append_history({"step": 2, "reward_mean": 0.3, "success_rate": 0.0})  # after resume
    assert [(r["step"], r["reward_mean"]) for r in report.history()] == [(1, 0.1), (2, 0.3)]
