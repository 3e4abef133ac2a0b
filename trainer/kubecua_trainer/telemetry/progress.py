"""The console view of a run: a rich progress bar for steps and the current step's episodes,
one summary line per step, and the stages' own lines (say(): one per warm-up epoch, with its
loss and the time left; warmup/stage.py). Log records go to the run's log file instead (cli.py)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    def __init__(self, total_steps: int, enabled: bool = True) -> None:
        self.console = Console(stderr=True, quiet=not enabled)
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not enabled,
        )
        self.steps = self.bar.add_task("steps", total=total_steps, info="")
        self.episodes = self.bar.add_task("episodes", total=1, info="", visible=False)

    def __enter__(self) -> RunProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def resume_at(self, done_steps: int) -> None:
        self.bar.update(self.steps, completed=done_steps)

    def start_step(self, step: int, episodes: int) -> None:
        self.bar.update(self.episodes, total=episodes, completed=0, visible=True, info="")
        self.bar.update(self.steps, info=f"step {step}: rollout")
        self._outcomes: dict[str, int] = {}

    def episode_done(self, outcome: str) -> None:
        self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1
        info = " ".join(f"{k}={v}" for k, v in sorted(self._outcomes.items()))
        self.bar.update(self.episodes, advance=1, info=info)

    def learning(self, step: int) -> None:
        self.bar.update(self.steps, info=f"step {step}: learning")

    def end_step(self, stats: dict[str, Any]) -> None:
        self.bar.update(self.steps, advance=1, info="")
        loss = f"loss {stats['loss']:.4f}" if "loss" in stats else "learner skipped (no signal)"
        self.console.print(
            f"step {stats['step']}: reward {stats['reward_mean']:.3f} "
            f"(shaped {stats.get('shaped_reward_mean', stats['reward_mean']):.3f}) "
            f"success {stats['success_rate']:.0%} {loss} "
            f"excluded {stats.get('excluded', 0)} zero-var groups "
            f"{stats['zero_variance_group_fraction']:.0%} {stats.get('seconds_total', 0):.1f}s"
        )

    def say(self, text: str) -> None:
        """One line per event: never cut at the console's width (the terminal wraps it, and a
        piped or logged console keeps one line an event)."""
        self.console.print(text, soft_wrap=True)
