"""What a run leaves on disk for people: episodes as JSONL + screenshots, an HTML filmstrip
report, and reward / success-rate curves as PNG.

Layout under the output directory:
    episodes/step-0001.jsonl             one JSON line per episode (records.EpisodeResult.summary)
    episodes/screens/<key>/turn-00.png   what the model saw at each turn, then final.png
    history.jsonl                        one line of statistics per step
    report.html, curves.png              rebuilt after every step
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from PIL import Image

from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.trajectories import write_trajectories

_TEMPLATE = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html><head><meta charset="utf-8"><title>kubecua run {{ name }}</title>
<style>
body{font-family:sans-serif;margin:1em} .ep{border:1px solid #ccc;margin:.6em 0;padding:.4em}
.strip{display:flex;overflow-x:auto;gap:.5em} figure{margin:0;max-width:260px;flex:none}
img{max-width:260px;border:1px solid #999} pre{white-space:pre-wrap;font-size:11px;margin:0}
.success{color:#070} .failure{color:#a00} .excluded{color:#888}
</style></head><body>
<h1>Run {{ name }}</h1>
{% if curves %}<img src="{{ curves }}" style="max-width:700px" alt="reward curve">{% endif %}
{% for step in steps %}<h2>Step {{ step.step }}: reward {{ '%.3f'|format(step.reward_mean) }},
success {{ '%.0f'|format(100 * step.success_rate) }}%</h2>
{% for ep in step.episodes %}<div class="ep">
<b>{{ ep.key }}</b> task {{ ep.task_id }} &middot;
<span class="{{ 'excluded' if ep.reward is none else ep.outcome }}">{{ ep.outcome }}</span>
{% if ep.reward is not none %}reward {{ '%.2f'|format(ep.reward) }}{% endif %}
{% if ep.detail %}<i>{{ ep.detail[:300] }}</i>{% endif %}<br><small>{{ ep.instruction }}</small>
<div class="strip">{% for t in ep.turns %}<figure>
{% if t.image %}<img src="{{ t.image }}" alt="turn {{ loop.index0 }}">{% endif %}
<figcaption><pre>{{ loop.index }}. {{ t.action or '(invalid) ' + (t.reply[:200]) }}</pre>
</figcaption></figure>{% endfor %}
{% if ep.final %}<figure><img src="{{ ep.final }}" alt="final"><figcaption>final</figcaption>
</figure>{% endif %}</div></div>{% endfor %}{% endfor %}
</body></html>""")


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

    def save_episodes(self, step: int, episodes: list[EpisodeResult]) -> Path:
        """Append the step's episodes to episodes/step-NNNN.jsonl (trajectories.py format)."""
        path = self.dir / "episodes" / f"step-{step:04d}.jsonl"
        return write_trajectories(path, episodes, step=step)

    def _save_screens(self, ep: EpisodeResult) -> list[str | None]:
        folder = self.dir / "episodes" / "screens" / ep.key
        names: list[str | None] = []
        shots: list[tuple[str, Image.Image | None]] = [
            (f"turn-{i:02d}.png", t.screenshot) for i, t in enumerate(ep.turns)
        ]
        shots.append(("final.png", ep.final_screenshot))
        for name, img in shots:
            if img is None:
                names.append(None)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            img.save(folder / name, optimize=False, compress_level=1)
            names.append(f"episodes/screens/{ep.key}/{name}")
        return names

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

    def render(self) -> Path:
        """Rebuild curves.png and report.html from what is on disk (so resume keeps history)."""
        history = self.history()
        if history:
            plot_curves(history, self.curves_path)
        steps = []
        for row in reversed(history):  # newest first
            path = self.dir / "episodes" / f"step-{int(row['step']):04d}.jsonl"
            eps = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
            steps.append({**row, "episodes": [_episode_view(e) for e in eps]})
        curves = self.curves_path.name if self.curves_path.exists() else None
        self.html_path.write_text(_TEMPLATE.render(name=self.name, steps=steps, curves=curves))
        return self.html_path


def _episode_view(ep: dict[str, Any]) -> dict[str, Any]:
    screens = ep.get("screens") or []
    turns = [
        {**t, "image": screens[i] if i < len(screens) else None} for i, t in enumerate(ep["turns"])
    ]
    return {**ep, "turns": turns, "final": screens[-1] if screens else None}


def plot_curves(history: list[dict[str, Any]], path: Path) -> None:
    """Reward mean and success rate per step, one PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in history]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    ax.plot(steps, [r["reward_mean"] for r in history], marker="o", label="reward mean")
    ax.plot(steps, [r["success_rate"] for r in history], marker="s", label="success rate")
    ax.set_xlabel("step")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
