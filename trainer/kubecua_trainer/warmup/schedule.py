"""spec.warmup.schedule: the warm-up's learning rate as a function of its optimizer step.

Both schedules may start with a ramp: a linear rise from 0 over the first rampFraction of the
planned steps (0, the default: none). constant (the default) then keeps warmup.learningRate;
cosine falls along a half cosine to floorFraction x learningRate at the last planned step. Past the
last planned step the rate stays where the schedule ended: the extension spec.warmup.goal may add
trains at the floor, not back at the peak. Planned steps are warmup.epochs (the most a stopWhen
warm-up runs) times the batches of an epoch.
Why: a fixed 1e-3 warm-up of the demo's recipe left some seeds' policies unable to read the
squares' colours (issue 41); a ramp keeps the first, largest updates from settling the policy on
the replies' fixed patterns before it reads the screen (docs/benchmarks.md has the sweeps). The
rate is set on the optimizer's param groups before each step, which works for torch's AdamW and
MasterAdamW alike, and is a function of the step alone, so a warm-up resumed from its state
(DemoFit.load_state_dict: Fit.steps) goes on at the rate it would have had.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Schedule = Literal["constant", "cosine"]


def rate_factor(
    step: int, planned: int, schedule: Schedule, ramp: float = 0.0, floor: float = 0.0
) -> float:
    """The factor on the peak learning rate for optimizer step `step` (0-based) of `planned`.

    >>> rate_factor(5, 100, "constant")
    1.0
    >>> [rate_factor(s, 100, "constant", ramp=0.1) for s in (0, 4, 9, 10, 150)]
    [0.1, 0.5, 1.0, 1.0, 1.0]
    >>> steps = (0, 9, 10, 55, 99, 150)
    >>> [round(rate_factor(s, 100, "cosine", ramp=0.1, floor=0.1), 3) for s in steps]
    [0.1, 1.0, 1.0, 0.542, 0.1, 0.1]
    """
    if planned <= 0:
        return 1.0
    ramp_steps = round(ramp * planned)
    if step < ramp_steps:
        return (step + 1) / ramp_steps
    if schedule == "constant":
        return 1.0
    span = max(1, planned - 1 - ramp_steps)
    done = min(1.0, (step - ramp_steps) / span)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * done))


def set_rate(optimizer: torch.optim.Optimizer, peak: float, factor: float) -> None:
    """Every param group at peak x factor for the next step."""
    for group in optimizer.param_groups:
        group["lr"] = peak * factor
