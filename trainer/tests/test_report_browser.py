"""The run report in a real headless browser (Debian's Chromium driven by Playwright): the index
loads without console errors and shows the curves and the held-out task table with their
numbers; a thumbnail opens its screenshot at 1920x1080 with the click drawn where the model
clicked; a task's cell in the table reaches that task's trajectories.

Playwright cannot download its own browser here, so it drives /usr/bin/chromium
(hack/apt/episode.txt installs it); where that cannot start, the tests skip and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_run import CLICK, SEEN, build_run

playwright = pytest.importorskip("playwright.sync_api", reason="playwright (trainer dev group)")

CHROMIUM = Path("/usr/bin/chromium")
# Root needs --no-sandbox; the rest stop Chromium's calls home, which this network refuses.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    build_run(out)
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
def page(browser: Any) -> Iterator[Any]:
    """A page that records console errors, uncaught exceptions and failed loads."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.problems = []
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(m.text))
    pg.on("pageerror", lambda e: pg.problems.append(str(e)))
    pg.on("requestfailed", lambda r: pg.problems.append(f"{r.url}: {r.failure}"))
    yield pg
    context.close()


def box(locator: Any) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None, locator
    return dict(found)


def centre(locator: Any) -> tuple[float, float]:
    b = box(locator)
    return b["x"] + b["width"] / 2, b["y"] + b["height"] / 2


def test_index_shows_curves_and_the_held_out_task_table(page: Any, run_dir: Path) -> None:
    page.goto((run_dir / "report.html").as_uri())
    curves = page.locator("img#curves")
    page.wait_for_function("document.querySelector('img#curves').complete")
    size = curves.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert size == [1000, 600]  # 2 x 2 panels of 5 x 3 inches at 100 dpi: none on another
    cells = {
        task: page.locator(f"#task-table tr[data-task='{task}'] td a").all_inner_texts()
        for task in ("files-rename", "gedit-greeting")
    }
    assert cells == {"files-rename": ["50% (1/2)", "100% (2/2)"],
                     "gedit-greeting": ["0% (0/2)", "50% (1/2)"]}  # fmt: skip
    assert page.get_by_role("link", name="Step 1", exact=True).count() == 1
    assert page.get_by_role("link", name="evaluation at step 0").count() == 1
    assert page.problems == []


def test_a_thumbnail_opens_the_full_screenshot_with_the_click_drawn(
    page: Any, run_dir: Path
) -> None:
    page.goto((run_dir / "report.html").as_uri())
    page.get_by_role("link", name="Step 2", exact=True).click()
    page.wait_for_url("**/pages/step-0002.html")
    first = page.locator("#s0002-g00-e00 figure.turn").first
    thumb = first.locator("img")
    thumb.scroll_into_view_if_needed()
    page.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle()
    )
    shown = box(thumb)
    assert round(shown["width"]) == 320 + 2  # 320 px and its 1 px border
    # The model clicked (960, 180) in the 1280x720 image it saw: 75% across, 25% down.
    x, y = centre(first.locator("g.mark.click"))
    inner = shown["x"] + 1, shown["y"] + 1, shown["width"] - 2, shown["height"] - 2
    assert abs(x - (inner[0] + inner[2] * CLICK[0] / SEEN[0])) <= 2
    assert abs(y - (inner[1] + inner[3] * CLICK[1] / SEEN[1])) <= 2

    first.locator("a.shot").click()
    dialog = page.locator("dialog#lightbox[open]")
    full = dialog.locator("img")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=full.element_handle())
    assert full.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [1920, 1080]
    b = box(full)
    assert (round(b["width"]), round(b["height"])) == (1922, 1082)  # actual pixels + border
    x, y = centre(dialog.locator("g.mark.click"))
    assert abs(x - (b["x"] + 1 + 1440)) <= 2  # (960, 180) x 1.5 on the 1920x1080 screen
    assert abs(y - (b["y"] + 1 + 270)) <= 2

    # The link itself is the screenshot file, at its full size.
    href = first.locator("a.shot").get_attribute("href")
    assert href == "../episodes/screens/s0002-g00-e00/turn-00.png"
    page.goto((run_dir / "pages" / href).resolve().as_uri())
    assert page.evaluate("[document.images[0].naturalWidth, document.images[0].naturalHeight]") == [
        1920,
        1080,
    ]
    assert page.problems == []


def test_the_drag_typing_and_an_invalid_reply_are_shown(page: Any, run_dir: Path) -> None:
    page.goto((run_dir / "pages" / "step-0001.html").as_uri())
    turns = page.locator("#s0001-g00-e00 figure.turn")
    second = turns.nth(1)
    assert second.locator("line.drag").count() == 1
    assert second.locator("line.drag").get_attribute("marker-end") == "url(#kc-arrow)"
    assert second.locator("text.keys").text_content() == "type 'hello'"
    third = turns.nth(2)
    assert "invalid reply" in third.inner_text()
    assert "I am not sure what to do" in third.inner_text()
    assert "feedback: Your last reply was not a valid action" in third.inner_text()
    assert "excluded from the loss: setup_failed" in page.locator("#s0001-g00-e01").inner_text()
    assert page.problems == []


def test_a_task_cell_reaches_that_tasks_trajectories(page: Any, run_dir: Path) -> None:
    page.goto((run_dir / "report.html").as_uri())
    page.locator("#task-table tr[data-task='gedit-greeting'] td a").nth(1).click()
    page.wait_for_url("**/pages/eval-0002.html#task-gedit-greeting")
    section = page.locator("section#task-gedit-greeting")
    assert section.is_visible()
    assert section.locator("h2").inner_text() == "Task gedit-greeting (gedit)"
    tasks = section.locator(".ep").evaluate_all("eps => eps.map(e => e.dataset.task)")
    assert tasks == ["gedit-greeting", "gedit-greeting"]
    outcomes = section.locator(".ep .outcome").all_inner_texts()
    assert sorted(outcomes) == ["failure", "success"]
    # the browser scrolled down to the task (to the top of the window, where the page is long)
    top, height, scrolled = section.evaluate(
        "s => [s.getBoundingClientRect().top, innerHeight, scrollY]"
    )
    assert scrolled > 0
    assert 0 <= top < height
    assert page.problems == []
