"""The learning benchmark's curves PNG: training success per GRPO step (one line per seed and
the control) and held-out success before and after (one pair of points per run; the
continued-SFT arm's one evaluation drawn at the GRPO arm's last step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def curves(doc: dict[str, Any], path: Path) -> None:
    runs = [(f"seed {s['seed']}", s) for s in doc["seeds"]]
    if doc.get("control"):
        runs.append(("control (lr 1e-30)", doc["control"]))
    fig, (train, held) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs:
        style = "--" if label.startswith("control") else "-"
        ys = run["train_success_per_step"]
        train.plot(range(1, len(ys) + 1), ys, style, marker=".", label=label)
        a, b = run["heldout_start"], run["heldout_end"]
        held.plot(
            [a["step"], b["step"]],
            [a["success"], b["success"]],
            style,
            marker="o",
            label=f"{label}: {a['success']:.2f} -> {b['success']:.2f} "
            f"({a['episodes']} episodes each)",
        )
    for arm in doc.get("arms", []):  # the continued-SFT arm: its one evaluation, at GRPO's end
        sft, end = arm["sft"]["heldout_end"], arm["grpo"]["heldout_end"]
        label = f"seed {arm['grpo']['seed']} continued SFT: {sft['success']:.2f}"
        held.plot([end["step"]], [sft["success"]], "s", label=label)
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
