"""The run report: episodes on disk (trajectory format), the index and its per-step and
per-evaluation pages, the curves' panels, and the geometry that draws actions on screenshots.
test_report_browser.py loads the same pages in a real browser."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image
from report_run import write_evaluation

from kubecua_trainer.report import RunReport
from kubecua_trainer.report.curves import _held_out, _pyplot, wilson_interval
from kubecua_trainer.report.overlays import (
    Mark,
    action_marks,
    describe,
    marks_from_code,
    percent,
    shapes,
)
from kubecua_trainer.report.views import anchor, load_evaluations, task_table
from kubecua_trainer.rollout.records import EpisodeResult, Turn

SCREEN, SEEN = (64, 36), (32, 18)  # small, so that these tests stay fast


def png(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def episode(key: str, reward: float | None, outcome: str | None = None) -> EpisodeResult:
    seen = Image.new("RGB", SEEN, (200, 10, 10))
    ep = EpisodeResult(task_id="t1", group_id="s0001-g00", key=key, instruction="Open <b>it</b>")
    ep.turns = [
        Turn(seen, "```python\npyautogui.click(8, 9)\n```", "pyautogui.click(16, 18)",
             gen_tokens=9, screen=png(SCREEN, (200, 10, 10))),
        Turn(seen, "gibberish", None, feedback="Your last reply was not a valid action",
             screen=png(SCREEN, (10, 200, 10))),
        Turn(None, "DONE", "DONE"),
    ]  # fmt: skip
    ep.final_screen, ep.final_screenshot, ep.screen_size = png(SCREEN, (0, 0, 0)), seen, SCREEN
    if outcome:
        ep.fail(outcome, "HTTP 502 SetupFailed")
    else:
        ep.score(reward or 0.0)
    return ep


def test_episodes_are_saved_as_trajectory_lines_with_full_size_screenshots(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    path = report.save_episodes(1, [episode("e0", 1.0), episode("e1", None, "sandbox_lost")])
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["outcome"] for x in lines] == ["success", "sandbox_lost"]
    assert [x["reward"] for x in lines] == [1.0, None]
    assert lines[0]["turns"][0]["action"] == "pyautogui.click(16, 18)"
    assert lines[0]["gen_tokens"] == 9
    assert (lines[0]["screen_size"], lines[0]["image_size"]) == ([64, 36], [32, 18])
    shots = [t["screenshot"] for t in lines[0]["turns"]]
    assert shots[2] is None  # the model was answered in text: no screenshot
    assert Image.open(path.parent / shots[0]).size == SCREEN  # the desktop's size, not SEEN
    assert lines[0]["final_screenshot"] == "screens/e0/final.png"


def test_index_links_every_step_and_evaluation_and_tabulates_tasks(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "demo")
    for step, reward in ((1, 0.0), (2, 0.5)):
        report.save_episodes(step, [episode(f"s{step}-e0", reward)])
        report.append_history({"step": step, "reward_mean": reward, "success_rate": reward / 2})
    write_evaluation(tmp_path, 0, {("files-rename", "files"): 1, ("gedit-greeting", "gedit"): 0})
    html = report.render().read_text()
    for href in ("pages/step-0001.html", "pages/step-0002.html", "pages/eval-0000.html"):
        assert f'href="{href}"' in html
        assert (tmp_path / href).exists()
    assert 'href="pages/eval-0000.html#task-gedit-greeting">0% (0/2)</a>' in html
    assert 'href="pages/eval-0000.html#task-files-rename">50% (1/2)</a>' in html
    assert "held-out success 25% of 4 scored episodes" in html
    # the latest step's final screens are on the index, at their own paths
    assert 'src="episodes/screens/s2-e0/final.png"' in html

    page = (tmp_path / "pages/step-0002.html").read_text()
    assert "Reward mean 0.500, success rate 25%" in page
    assert 'href="../episodes/screens/s2-e0/turn-00.png"' in page
    assert "Open &lt;b&gt;it&lt;/b&gt;" in page  # escaped
    assert "click (8, 9)" in page
    assert 'cx="25.0%" cy="50.0%"' in page  # (8, 9) of the 32x18 image the model saw
    assert "invalid reply</span>: no action found." in page
    assert "feedback: Your last reply was not a valid action" in page
    assert "no screenshot: the model was answered in text" in page
    evaluation = (tmp_path / "pages/eval-0000.html").read_text()
    assert '<section id="task-gedit-greeting"' in evaluation
    assert 'src="../evaluations/step-0000/screens/eval-s0000-t001-e00/turn-00.png"' in evaluation


def test_pages_are_written_once_and_again_when_their_episodes_grow(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    report.save_episodes(1, [episode("s1-e0", 1.0)])
    report.append_history({"step": 1, "reward_mean": 1.0, "success_rate": 1.0})
    report.render()
    page = tmp_path / "pages/step-0001.html"
    written = page.stat().st_mtime_ns
    report.save_episodes(2, [episode("s2-e0", 0.0)])
    report.append_history({"step": 2, "reward_mean": 0.0, "success_rate": 0.0})
    report.render()
    assert page.stat().st_mtime_ns == written  # a long run does not redraw old steps
    report.save_episodes(1, [episode("s1-e1", 0.0)])  # a resumed run appends to step 1
    report.render()
    assert "s1-e1" in page.read_text()


def test_an_unreadable_episode_file_is_reported_on_its_page_not_raised(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    report.save_episodes(1, [episode("s1-e0", 1.0)])
    with (tmp_path / "episodes/step-0001.jsonl").open("a") as f:
        f.write('{"format": "kubecua.trajectory/v1", "key": "s1-e1", "tur')  # cut by a crash
    report.append_history({"step": 1, "reward_mean": 1.0, "success_rate": 1.0})
    html = report.render().read_text()
    assert "step-0001.jsonl could not be read" in html
    assert "step-0001.jsonl could not be read" in (tmp_path / "pages/step-0001.html").read_text()


def test_curves_are_separate_panels_and_grow_with_evaluations(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    report.append_history({"step": 1, "reward_mean": 0.2, "success_rate": 0.0})
    report.render()
    assert Image.open(report.curves_path).size == (1000, 300)  # reward | success rate
    write_evaluation(tmp_path, 0, {("a", "d"): 2})
    report.render()
    assert Image.open(report.curves_path).size == (1000, 600)  # + held-out success | pass@k


def test_a_lone_step_0_evaluation_sits_on_the_whole_runs_axis(tmp_path: Path) -> None:
    """Issue 30: one evaluation was one point on an axis from -0.045 to 0.045. The axis spans
    the run: 4 steps give (-0.1 x 4 - 0.3, 4 + 0.05 x 4 + 0.3) = (-0.7, 4.5); an untrained
    evaluation sits apart at -0.06 x 4 - 0.1 = -0.34."""
    plt = _pyplot()
    step0 = {"step": 0, "success_rate": 0.5, "scored": 4, "pass_at_k": {}}
    untrained = {"step": 0, "success_rate": 0.25, "scored": 4}
    fig, ax = plt.subplots()
    _held_out(ax, [step0], 4, untrained, warmed_up=True)
    assert ax.get_xlim() == pytest.approx((-0.7, 4.5))
    marked = {line.get_gid(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert marked["untrained"][0] == pytest.approx([-0.34, 0.25])
    assert marked["held-out-line"] == [[0.0, 0.5]]
    assert [t.get_text() for t in ax.texts] == ["n=4, after warm-up", "untrained, n=4"]
    plt.close(fig)


def test_the_report_shows_each_task_before_and_after_and_the_shaped_reward(
    tmp_path: Path,
) -> None:
    report = RunReport(tmp_path, "r")
    report.append_history({"step": 2, "reward_mean": 0.5, "shaped_reward_mean": 0.4,
                           "success_rate": 0.5})  # fmt: skip
    write_evaluation(tmp_path, 0, {("a", "d"): 0, ("b", "d"): 1})
    write_evaluation(tmp_path, 2, {("a", "d"): 2, ("b", "d"): 1})
    html = report.render().read_text()
    assert "training reward mean 0.500 (shaped, trained on: 0.400)" in html
    assert "<td>0.500</td><td>0.400</td>" in html  # the steps table, side by side
    table = html[html.index('id="before-after-table"') :]
    assert "<th>before: step 0</th><th>after: step 2</th>" in table
    row_a = table[table.index('data-task="a"') : table.index('data-task="b"')]
    assert "0% (0/2)" in row_a
    assert "100% (2/2)" in row_a
    assert "+100 pts" in row_a


def test_an_evaluation_with_every_episode_excluded_renders_as_not_available(
    tmp_path: Path,
) -> None:
    write_evaluation(tmp_path, 0, {("a", "d"): 0})
    path = tmp_path / "evaluations/step-0000/summary.json"
    summary = json.loads(path.read_text())
    summary.update(
        success_rate=None,
        mean_score=None,
        scored=0,
        excluded=2,
        excluded_by_reason={"setup_failed": 2},
        pass_at_k={"1": None, "2": None},
    )
    summary["tasks"][0].update(success_rate=None, scored=0, excluded=2,
                               pass_at_k={"1": None, "2": None})  # fmt: skip
    path.write_text(json.dumps(summary))
    html = RunReport(tmp_path, "r").render().read_text()
    assert "held-out success n/a of 0 scored episodes (2 excluded)" in html
    assert '>n/a (0/0)</a> <span class="excluded">+2 excl.</span>' in html
    assert "setup_failed: 2" in (tmp_path / "pages/eval-0000.html").read_text()


def test_history_keeps_the_last_row_of_a_repeated_step(tmp_path: Path) -> None:
    report = RunReport(tmp_path, "r")
    report.append_history({"step": 1, "reward_mean": 0.1, "success_rate": 0.0})
    report.append_history({"step": 2, "reward_mean": 0.2, "success_rate": 0.0})
    report.append_history({"step": 2, "reward_mean": 0.3, "success_rate": 0.0})  # after resume
    assert [(r["step"], r["reward_mean"]) for r in report.history()] == [(1, 0.1), (2, 0.3)]


def test_task_table_has_a_cell_per_evaluated_step_with_counts(tmp_path: Path) -> None:
    write_evaluation(tmp_path, 0, {("a", "files"): 0, ("b", "files"): 1})
    write_evaluation(tmp_path, 4, {("a", "files"): 2})
    (tmp_path / "evaluations/step-0008").mkdir()
    (tmp_path / "evaluations/step-0008/summary.json").write_text('{"step": 8, "succ')  # writing
    table = task_table(load_evaluations(tmp_path), "pages")
    assert table["steps"] == [0, 4]
    a, b = table["rows"]
    assert [(c["successes"], c["scored"], c["rate"]) for c in a["cells"]] == [
        (0, 2, 0.0),
        (2, 2, 1.0),
    ]
    assert a["cells"][1]["href"] == "pages/eval-0004.html#task-a"
    assert b["cells"][1] is None  # b was not evaluated at step 4
    assert anchor("a b") == "task-a_b-" + anchor("a b").rsplit("-", 1)[1]  # safe in a URL


# Overlay geometry: the model saw a 1280x720 image; positions are percentages of it.
SEEN_BIG = (1280, 720)


def test_a_click_lands_at_its_share_of_the_image() -> None:
    marks, error = action_marks("Click OK.\n```python\npyautogui.click(960, 180)\n```")
    assert error is None
    assert marks == [Mark("click", ((960, 180),))]
    (ring,) = shapes(marks, SEEN_BIG)
    # 960/1280 = 75% across, 180/720 = 25% down: pixel (240, 45) of a 320x180 thumbnail,
    # (1440, 270) of the 1920x1080 screenshot
    assert (ring.kind, ring.x, ring.y, ring.rings) == ("ring", 75.0, 25.0, 1)


def test_double_and_right_clicks_keep_their_kind() -> None:
    marks = marks_from_code(
        "pyautogui.doubleClick(x=10, y=20)\npyautogui.rightClick((30, 40))\n"
        "pyautogui.click(5, 6, clicks=3, button='middle')"
    )
    assert [(m.points, m.button, m.clicks) for m in marks] == [
        (((10, 20),), "left", 2), (((30, 40),), "right", 1), (((5, 6),), "middle", 3)
    ]  # fmt: skip
    assert [describe(m) for m in marks] == [
        "double-click (10, 20)", "right-click (30, 40)", "triple-middle-click (5, 6)"
    ]  # fmt: skip
    assert [s.css for s in shapes(marks, SEEN_BIG)] == ["click left", "click right", "click middle"]


def test_the_cursor_is_followed_through_moves() -> None:
    marks = marks_from_code(
        "pyautogui.moveTo(100, 200)\npyautogui.click()\n"
        "pyautogui.moveRel(-20, 5)\npyautogui.click()"
    )
    assert [m.points for m in marks] == [((100, 200),), ((100, 200),), ((80, 205),), ((80, 205),)]
    assert describe(marks_from_code("pyautogui.click()")[0]) == "click at the cursor"


def test_drags_draw_their_whole_path_with_an_arrow_at_the_end() -> None:
    drag_to = marks_from_code("pyautogui.moveTo(128, 72)\npyautogui.dragTo(640, 72)")
    assert drag_to[1] == Mark("drag", ((128, 72), (640, 72)))
    held = marks_from_code(
        "pyautogui.mouseDown(128, 72)\npyautogui.moveTo(640, 72)\n"
        "pyautogui.moveTo(640, 360)\npyautogui.mouseUp()"
    )
    assert held == [Mark("drag", ((128, 72), (640, 72), (640, 360)))]
    lines = shapes(held, SEEN_BIG)
    assert [(s.x, s.y, s.x2, s.y2) for s in lines] == [
        (10.0, 10.0, 50.0, 10.0),
        (50.0, 10.0, 50.0, 50.0),
    ]
    assert [s.arrow for s in lines] == [False, True]
    assert describe(held[0]) == "drag (128, 72) → (640, 72) → (640, 360)"
    released = marks_from_code("pyautogui.mouseDown(5, 5)\npyautogui.mouseUp(50, 5)")
    assert released == [Mark("drag", ((5, 5), (50, 5)))]
    pressed = marks_from_code("pyautogui.mouseDown(5, 5)\npyautogui.mouseUp()")
    assert pressed == [Mark("click", ((5, 5),))]  # down and up in place is a click


def test_typing_keys_and_scrolls_become_labels() -> None:
    marks = marks_from_code(
        "pyautogui.click(640, 360)\npyautogui.write('hello')\npyautogui.press('enter')\n"
        "pyautogui.hotkey('ctrl', 's')\npyautogui.typewrite(['a', 'b'])\n"
        "pyautogui.scroll(-3, x=10, y=20)\ntime.sleep(0.5)"
    )
    assert [m.text for m in marks[1:]] == [
        "type 'hello'", "press enter", "hotkey ctrl+s", "press a b", "scroll -3", "wait 0.5 s"
    ]  # fmt: skip
    labels = [s for s in shapes(marks, SEEN_BIG) if s.kind == "label"]
    # typed text sits where the cursor was (the click); the scroll at its own point;
    # the wait, which has no place, in the corner
    assert (labels[0].x, labels[0].y, labels[0].corner) == (50.0, 50.0, False)
    assert (labels[4].text, labels[4].x, labels[4].y) == ("scroll -3", 0.781, 2.778)
    assert (labels[5].text, labels[5].corner, labels[5].line) == ("wait 0.5 s", True, 0)


def test_invalid_replies_signals_and_unknown_arguments() -> None:
    assert action_marks("I am not sure") == ([], "no action found.")
    assert action_marks("All done. DONE") == ([Mark("signal", text="DONE")], None)
    (corner,) = shapes([Mark("signal", text="DONE")], SEEN_BIG)
    assert (corner.kind, corner.corner, corner.text) == ("label", True, "DONE")
    marks = marks_from_code("pyautogui.click(x, 20)")  # a variable: nothing to place
    assert marks == [Mark("click", ())]
    assert shapes(marks, SEEN_BIG) == []


def test_points_outside_the_image_are_clamped_to_its_edge() -> None:
    assert percent((1400, -10), SEEN_BIG) == (100.0, 0.0)
    assert percent((320, 540), SEEN_BIG) == (25.0, 75.0)


def test_wilson_interval_of_two_in_four() -> None:
    lo, hi = wilson_interval(2, 4)
    assert lo == pytest.approx(0.1500, abs=1e-4)
    assert hi == pytest.approx(0.8500, abs=1e-4)
    assert wilson_interval(4, 4)[1] == 1.0


def test_wilson_interval_is_exactly_0_or_1_at_none_or_all() -> None:
    """In floating point the formula's upper bound for 60 of 60 is 0.9999999999999999; the
    held-out error bar above the rate was then -1e-16, and matplotlib's refusal of it ended a
    benchmark's run after its last evaluation (2026-11-28)."""
    for n in range(1, 201):
        assert wilson_interval(n, n)[1] == 1.0, n
        assert wilson_interval(0, n)[0] == 0.0, n


def test_a_perfect_evaluation_draws_its_error_bar() -> None:
    plt = _pyplot()
    evals = [{"step": 0, "success_rate": 0.25, "scored": 60, "pass_at_k": {}},
             {"step": 12, "success_rate": 1.0, "scored": 60, "pass_at_k": {}}]  # fmt: skip
    fig, ax = plt.subplots()
    _held_out(ax, evals, 12, {"step": 0, "success_rate": 0.0, "scored": 60}, warmed_up=True)
    marked = {line.get_gid(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert marked["held-out-line"] == [[0.0, 0.25], [12.0, 1.0]]
    plt.close(fig)


def test_a_report_that_fails_to_render_is_logged_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RunReport.try_render (what a run calls): the report is a view of the run's files, so
    an error while drawing it is logged and returns None; the files stay as they were."""
    import kubecua_trainer.report as report_module

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("'yerr' must not contain negative values")

    monkeypatch.setattr(report_module, "plot_curves", broken)
    report = RunReport(tmp_path, "r")
    report.append_history({"step": 1, "reward_mean": 0.5, "success_rate": 0.5})
    with caplog.at_level("ERROR"):
        assert report.try_render() is None
    assert "the report was not rendered" in caplog.text
    assert "yerr" in caplog.text  # the traceback is in the log
    assert [r["step"] for r in report.history()] == [1]
    with pytest.raises(ValueError, match="yerr"):
        report.render()  # called directly (tests, the report command), it still raises
