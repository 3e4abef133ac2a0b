"""The learning benchmark's curves PNG: training success per GRPO step (one line per seed and
per seed's control) and held-out success before and after (one pair of points per run; the
continued-SFT arm's one evaluation drawn at the GRPO arm's last step, a little apart per seed so
that equal figures stay visible)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def curves(doc: dict[str, Any], path: Path) -> None:
    """Each seed in its own colour: its GRPO arm solid, its control dashed."""
    runs = []
    for i, arm in enumerate(doc["arms"]):
        seed = arm["grpo"]["seed"]
        runs.append((f"seed {seed}", arm["grpo"], "-", f"C{i}"))
        if arm.get("control"):
            runs.append((f"seed {seed} control (lr 1e-30)", arm["control"], "--", f"C{i}"))
    fig, (train, held) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run, style, colour in runs:
        ys = run["train_success_per_step"]
        train.plot(range(1, len(ys) + 1), ys, style, color=colour, marker=".", label=label)
        a, b = run["heldout_start"], run["heldout_end"]
        held.plot(
            [a["step"], b["step"]],
            [a["success"], b["success"]],
            style,
            color=colour,
            marker="o",
            label=f"{label}: {a['success']:.2f} -> {b['success']:.2f} "
            f"({a['episodes']} episodes each)",
        )
    for i, arm in enumerate(doc["arms"]):  # continued SFT: one evaluation, at GRPO's end
        if "sft" not in arm:
            continue  # its arm failed twice (run.py names it in the verdict's "failed")
        sft, end = arm["sft"]["heldout_end"], arm["grpo"]["heldout_end"]
        label = f"seed {arm['grpo']['seed']} continued SFT: {sft['success']:.2f}"
        held.plot([end["step"] + 0.15 * i], [sft["success"]], "s", color=f"C{i}", label=label)
    train.set(
        title="training instances: success per GRPO step",
        xlabel="step",
        ylabel="success rate",
        ylim=(-0.02, 1.02),
    )
    held.set(title="held-out instances: greedy success", xlabel="step", ylim=(-0.02, 1.02))
    for ax in (train, held):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
