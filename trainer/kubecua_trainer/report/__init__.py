"""What a run leaves on disk for people: episodes as JSONL + screenshots, an HTML report with a
page per training step and per evaluation, and the curves as PNG.

Layout under the output directory:
    episodes/step-0001.jsonl          one line per episode (trajectories.py format)
    episodes/screens/<key>/turn-00.png  each turn's screenshot at the desktop's size, final.png
    history.jsonl                     one line of statistics per step
    evaluations/step-NNNN/...         written by the evaluation (summary.json, episodes.jsonl)
    untrained/evaluations/step-0000/  optional: the untrained model evaluated before the warm-up
                                      (spec.evaluation.beforeWarmup, as make demo does, or
                                      kubecua_trainer evaluate --output-dir <out>/untrained),
                                      shown as its own point and "before"
    warmup.json                       the warm-up's record: the run's step 0 is the warm-up's;
                                      its seed and goal (the report's Warm-up section)
    report.html, curves.png           the index and its curves, rebuilt by every render()
    pages/step-NNNN.html              a step's filmstrips, written once (again if its episodes
    pages/eval-NNNN.html              or summary change): a long run does not redraw old steps
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from kubecua_trainer.report import views
from kubecua_trainer.report.cost import cost_view
from kubecua_trainer.report.curriculum import curriculum_view
from kubecua_trainer.report.curves import held_out_svg, plot_curves
from kubecua_trainer.report.liveview import live_view
from kubecua_trainer.report.tasks import tasks_view
from kubecua_trainer.report.warmup import run_seed, warmup_view
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.trajectories import write_trajectories

log = logging.getLogger(__name__)


def _pct(value: Any, digits: int = 0, missing: str = "n/a") -> str:
    """A rate as a percentage; figures can be null (an evaluation whose episodes all failed)."""
    if not isinstance(value, int | float):
        return missing
    return f"{100 * value:.{digits}f}%"


def _fixed(value: Any, digits: int = 3, missing: str = "n/a") -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else missing


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("kubecua_trainer.report", "templates"),
    autoescape=True,
    keep_trailing_newline=True,
)
_ENV.globals["thumb_width"] = views.THUMB_WIDTH
_ENV.filters.update(pct=_pct, fixed=_fixed)
PAGES = "pages"


class RunReport:
    def __init__(self, out_dir: str | Path, name: str) -> None:
        self.dir = Path(out_dir)
        self.name = name
        (self.dir / "episodes" / "screens").mkdir(parents=True, exist_ok=True)

    @property
    def html_path(self) -> Path:
        return self.dir / "report.html"

    @property
    def curves_path(self) -> Path:
        return self.dir / "curves.png"

    @property
    def pages_dir(self) -> Path:
        return self.dir / PAGES

    def save_episodes(self, step: int, episodes: list[EpisodeResult]) -> Path:
        """Append the step's episodes to episodes/step-NNNN.jsonl (trajectories.py format)."""
        path = self.dir / "episodes" / f"step-{step:04d}.jsonl"
        return write_trajectories(path, episodes, step=step)

    def append_history(self, stats: dict[str, Any]) -> None:
        with (self.dir / "history.jsonl").open("a") as f:
            f.write(json.dumps(stats) + "\n")

    def history(self) -> list[dict[str, Any]]:
        path = self.dir / "history.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        by_step = {int(r["step"]): r for r in rows}  # a resumed run may repeat a step: keep last
        return [by_step[s] for s in sorted(by_step)]

    def try_render(self) -> Path | None:
        """render() for a running run: the report is a view of the run's files, never their
        record, so a page or plot that fails to render is logged with its traceback and the run
        goes on (None); the next render tries again. A run once died here, after its last
        evaluation, on a plot's error bar."""
        try:
            return self.render()
        except Exception:
            log.exception("the report was not rendered (the run's files are unaffected)")
            return None

    def render(self) -> Path:
        """Rebuild report.html and curves.png from what is on disk (so a resumed run keeps its
        history), writing the page of each step or evaluation that is new or has changed."""
        history = self.history()
        evaluations = views.load_evaluations(self.dir)
        self.pages_dir.mkdir(parents=True, exist_ok=True)
        step_files = {int(p.stem.split("-")[1]): p for p in self._step_files()}
        stats = {int(r["step"]): r for r in history}
        previous: dict[str, str] | None = None
        for step in sorted(step_files):
            here = {"href": views.step_page_name(step), "title": f"Step {step}"}
            self._write_step_page(step, step_files[step], stats.get(step), previous)
            previous = here
        previous = None
        for summary in evaluations:
            self._write_eval_page(summary, previous)
            previous = {"href": views.eval_page_name(summary["step"]),
                        "title": f"Evaluation at step {summary['step']}"}  # fmt: skip
        untrained = views.load_untrained(self.dir)
        warmed_up = (self.dir / "warmup.json").exists()
        if history or evaluations:
            plot_curves(history, evaluations, self.curves_path, untrained, warmed_up)
        held_out: dict[str, Any] | None = None
        if evaluations:
            last = max([int(r["step"]) for r in history] + [int(e["step"]) for e in evaluations])
            held_out = {
                "svg": held_out_svg(evaluations, last, untrained, warmed_up),
                "untrained": untrained,
                "warmed_up": warmed_up,
            }
            first = untrained or evaluations[0]
            if first is not evaluations[-1]:
                held_out["before"], held_out["after"] = first, evaluations[-1]
                held_out["tasks"] = views.before_after(first, evaluations[-1], self.dir)
        tmp = self.html_path.with_suffix(".tmp")  # a reader never sees half a report
        tmp.write_text(self._index(history, evaluations, step_files, held_out))
        tmp.replace(self.html_path)
        return self.html_path

    def _step_files(self) -> list[Path]:
        return sorted((self.dir / "episodes").glob("step-*.jsonl"))

    def _index(
        self, history: list[dict[str, Any]], evaluations: list[dict[str, Any]],
        step_files: dict[int, Path], held_out: dict[str, Any] | None = None,
    ) -> str:  # fmt: skip
        steps = sorted(set(step_files) | {int(r["step"]) for r in history}, reverse=True)
        stats = {int(r["step"]): r for r in history}
        rows = [
            {**stats.get(s, {}), "step": s,
             "href": f"{PAGES}/{views.step_page_name(s)}" if s in step_files else None}
            for s in steps
        ]  # fmt: skip
        latest = None
        if step_files:
            last = max(step_files)
            episodes, problem = views.episode_views(step_files[last], self.dir)
            latest = {
                "step": last,
                "href": f"{PAGES}/{views.step_page_name(last)}",
                "episodes": episodes,
                "problem": problem,
            }
        evals = [{**e, "href": f"{PAGES}/{views.eval_page_name(e['step'])}"} for e in evaluations]
        return _ENV.get_template("index.html.j2").render(
            name=self.name,
            steps=rows,
            evaluations=evals,
            table=views.task_table(evaluations, PAGES),
            latest=latest,
            curves=self.curves_path.name if self.curves_path.exists() else None,
            held_out=held_out,
            cost=cost_view(self.dir, history),
            live=live_view(self.dir, step_files[max(step_files)] if step_files else None),
            curriculum=curriculum_view(self.dir),
            tasks=tasks_view(self.dir, history),
            warmup=warmup_view(self.dir),
            seed=run_seed(self.dir, evaluations),
        )

    def _write_step_page(
        self, step: int, jsonl: Path, stats: dict[str, Any] | None, previous: dict[str, str] | None
    ) -> None:
        page = self.pages_dir / views.step_page_name(step)

        def render() -> str:
            episodes, problem = views.episode_views(jsonl, self.pages_dir)
            return _ENV.get_template("page.html.j2").render(
                name=self.name, title=f"Step {step}", stats=stats, previous=previous,
                episodes=episodes, problem=problem,
            )  # fmt: skip

        # A page written before its step's statistics arrived is written again next time.
        _write_if_stale(page, [jsonl], render=render, stale=stats is None)

    def _write_eval_page(self, summary: dict[str, Any], previous: dict[str, str] | None) -> None:
        folder: Path = summary["dir"]
        page = self.pages_dir / views.eval_page_name(int(summary["step"]))
        sources = [folder / "summary.json", folder / "episodes.jsonl"]

        def render() -> str:
            episodes, problem = views.episode_views(folder / "episodes.jsonl", self.pages_dir)
            return _ENV.get_template("page.html.j2").render(
                name=self.name, title=f"Evaluation at step {summary['step']}", problem=problem,
                summary=summary, previous=previous, tasks=views.eval_tasks(summary, episodes),
            )  # fmt: skip

        _write_if_stale(page, sources, render=render)


def _write_if_stale(
    page: Path, sources: list[Path], render: Callable[[], str], stale: bool = False
) -> None:
    """Write `page` unless it is newer than every source that exists (written once per step
    on a long run; again if a resumed run appended to the step's episodes)."""
    if page.exists() and not stale:
        written = page.stat().st_mtime_ns
        if all(not s.exists() or s.stat().st_mtime_ns < written for s in sources):
            return
    tmp = page.with_suffix(".tmp")
    tmp.write_text(render())
    tmp.replace(page)  # a reader never sees half a page
