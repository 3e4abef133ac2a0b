"""The report a user reads after a run, in a real headless browser (Debian's Chromium driven by
Playwright, as test_report_browser.py). A short real run (the tiny model, real HTTP episode
servers on loopback, shaped rewards on: a turn penalty of 0.1) is evaluated at step 0 and at its
last step, with the untrained model evaluated beforehand into <out>/untrained as make demo does.
Then report.html names the last evaluation (it named step 0 while step 4 existed, issue 30), the
held-out chart joins step 0 and the last step with one line and marks the untrained evaluation
apart, each held-out task is shown before and after, and the shaped reward stands beside the
evaluator's score. Where Chromium cannot start, the test skips and says why."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback_sandbox import TOKEN
from test_evaluation_run import HELD_OUT, ScoredSandbox, as_run, run_spec, write_tasks
from test_metrics import free_port
from test_report_browser import ARGS, CHROMIUM

from kubecua_trainer import cli
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource

playwright = pytest.importorskip("playwright.sync_api", reason="playwright (trainer dev group)")
pytestmark = pytest.mark.timeout(600)
STEPS = 2
TURN_PENALTY = 0.1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("report-run")
    train_dir, held_dir = write_tasks(root / "tasks")
    out = root / "out"
    token = root / "token"
    token.write_text(TOKEN)
    with ScoredSandbox() as sb:
        code = cli.main([
            "evaluate", str(tiny_model_dir), "--tasks", str(held_dir), "--urls", sb.url,
            "--token-file", str(token), "--episodes-per-task", "1", "--max-turns", "1",
            "--max-new-tokens", "6", "--max-pixels", str(112 * 84),
            "--output-dir", str(out / "untrained"), "--no-progress",
        ])  # fmt: skip
        assert code == 0
        spec = run_spec(tiny_model_dir, [sb.url], train_dir, held_dir, out, free_port())
        spec["evaluation"] |= {"everySteps": 0, "episodesPerTask": 1}  # step 0 and the last
        spec["algorithm"] |= {"groupSize": 2, "tasksPerStep": 1}
        spec["reward"] = {"penalties": {"turn": TURN_PENALTY}}
        spec["steps"] = STEPS
        opts = RunOptions(console=False, source=StaticSource([sb.url], TOKEN))
        asyncio.run(train(as_run(spec), opts))
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with playwright.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        except playwright.Error as err:
            pytest.skip(f"Chromium did not start: {err.message.splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, run_dir: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: m.type == "error" and problems.append(m.text))
    pg.on("pageerror", lambda e: problems.append(str(e)))
    pg.on("requestfailed", lambda r: problems.append(f"{r.url}: {r.failure}"))
    pg.goto((run_dir / "report.html").as_uri())
    pg.wait_for_load_state("load")
    yield pg
    pg.screenshot(path=str(run_dir / "report-screenshot.png"), full_page=True)
    assert problems == []
    context.close()


def _summary(run_dir: Path, step: int) -> dict[str, Any]:
    return dict(
        json.loads((run_dir / "evaluations" / f"step-{step:04d}" / "summary.json").read_text())
    )


def _vertices(d: str) -> list[tuple[float, float]]:
    """The points of an SVG path made of M and L commands (matplotlib writes lines so)."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def test_the_report_names_the_last_evaluation(page: Any, run_dir: Path) -> None:
    last = _summary(run_dir, STEPS)
    intro = page.locator("p").first.inner_text()
    assert f"Last evaluation (step {STEPS})" in intro
    assert f"of {last['scored']} scored episodes" in intro
    rows = page.locator("#held-out + p").inner_text()
    assert "Step 0 (untrained)" in rows
    assert f"Step {STEPS}:" in rows
    assert "Untrained model:" in rows


def test_the_held_out_line_joins_step_0_and_the_last_step(page: Any) -> None:
    chart = page.locator("#held-out-chart svg")
    line = chart.locator("g#held-out-line path").first
    points = _vertices(str(line.get_attribute("d")))
    assert len(points) == 2  # step 0 -> step N: one segment
    (x0, _), (x1, _) = points
    assert x1 - x0 > 100  # spread across the axis, not one point on an axis of its own
    # its markers sit at the ends of the line
    marks = chart.locator("g#held-out-line use").evaluate_all(
        "us => us.map(u => [parseFloat(u.getAttribute('x')), parseFloat(u.getAttribute('y'))])"
    )
    assert [round(x) for x, _ in marks] == [round(x0), round(x1)]
    # the untrained evaluation: its own marker just left of step 0, not a point of the line
    untrained = chart.locator("g#untrained use")
    assert untrained.count() == 1
    assert x0 - 40 < float(untrained.get_attribute("x")) < x0 - 5
    assert chart.locator("g#held-out-line g#untrained").count() == 0
    assert chart.locator("g#eval-step-0").count() == 1
    assert chart.locator(f"g#eval-step-{STEPS}").count() == 1
    drawn = line.bounding_box()  # on the page (a flat line has height 0, so not "visible")
    assert drawn is not None
    assert drawn["width"] > 100


def test_each_held_out_task_is_shown_before_and_after(page: Any, run_dir: Path) -> None:
    before = json.loads((run_dir / "untrained/evaluations/step-0000/summary.json").read_text())
    after = _summary(run_dir, STEPS)
    header = page.locator("#before-after-table th").all_inner_texts()
    assert header == ["task", "before: untrained", f"after: step {STEPS}", "change"]
    for tid in HELD_OUT:
        row = page.locator(f"#before-after-table tr[data-task='{tid}']")
        rates = row.locator("span.rate").all_inner_texts()
        want = [
            next(f"{t['success_rate']:.0%} ({t['successes']}/{t['scored']})"
                 for t in s["tasks"] if t["task_id"] == tid)
            for s in (before, after)
        ]  # fmt: skip
        assert rates == want
        images = row.locator("img")
        assert images.count() == 2
        for i in range(2):
            img = images.nth(i)
            img.scroll_into_view_if_needed()
            page.wait_for_function(
                "i => i.complete && i.naturalWidth > 0", arg=img.element_handle()
            )


def test_the_shaped_reward_stands_beside_the_evaluators_score(page: Any, run_dir: Path) -> None:
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == list(range(1, STEPS + 1))
    for h in history:  # one turn per episode: shaped = score - 0.1, exactly
        assert h["shaped_reward_mean"] == pytest.approx(h["reward_mean"] - TURN_PENALTY)
    header = page.locator("#steps-table th").all_inner_texts()
    assert header[1:3] == ["reward mean", "shaped reward mean"]
    row = page.locator("#steps-table tr").nth(1).locator("td").all_inner_texts()
    newest = history[-1]
    assert row[:3] == [str(STEPS), f"{newest['reward_mean']:.3f}",
                       f"{newest['shaped_reward_mean']:.3f}"]  # fmt: skip
