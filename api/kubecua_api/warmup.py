"""spec.warmup.stopWhen: end the supervised warm-up by measurement, on training tasks only.

A warm-up that is too short leaves GRPO a policy that never samples a success (every group has
equal rewards: no signal); one that is too long leaves it nothing to add (every group already
succeeds). The rule measures, after every `everyEpochs` epochs, the greedy success (pass@1) and
pass@k at temperature 1 (the share of tasks with at least one success in k episodes) on `tasks`
training tasks, and stops once pass@1 reaches greedyPassMin and pass@k reaches passAtKMin, or
as soon as pass@1 is above greedyPassMax (measured too late: it stops there rather than go
further). spec.warmup.epochs is then the most it runs, and no measurement follows its last
epochs (they end the warm-up whatever it would say). Held-out tasks are never measured.

spec.warmup.goal: whether the warm-up took, measured after its last epoch in every run that has a
warm-up (the defaults when the spec names none). A warm-up that never learnt to read the screen
would otherwise go on to GRPO silently, and GRPO then has almost nothing to reinforce: one such
run of `make demo` (2026-11-29, issue 41) trained 8 steps at 0-12% training success and ended at
0/30 held out. The measure needs no desktop: on `demonstrations` of the warm-up's own
demonstrations (training instances, drawn with spec.seed), the share of their replies the greedy
policy reproduces exactly given the same screens and earlier turns (every token of the reply is
the policy's most likely one, so greedy decoding would write it). One forward pass per
demonstration, against about 100 s for a check played on real desktops. What to do below the
goal is onBelowGoal's:
- extend (the default): train extendEpochs more epochs once, measure again, and fail the run if
  it is still below. A slow warm-up gets a second chance at a fraction of the run's cost; one
  that does not take fails loudly before GRPO spends its budget on a policy it cannot improve,
  which is what a user running an experiment wants to know first;
- continue: say so (status, console, report, metric) and go on to GRPO anyway;
- fail: fail the run at once.
A failed run keeps its warm-up: the step-0 checkpoint and warmup.json are written first (the
checkpoint can be evaluated), and a restarted attempt fails again at once instead of going on
to GRPO from that checkpoint.
The default goal, 0.7, from offline warm-ups on this machine (bench/learning/warmup_goal.py,
2026-11-29, docs/benchmarks.md): the warm-ups whose GRPO rose read 0.79-0.98 at their end
(`make demo`'s recipe seeds 0 and 19 after 90 epochs 0.92 and 0.79; make bench-learning's on
colourkeys-quits after 45 epochs 0.86), the ones cut short that the benchmark notes call half
read 0.55-0.70 (30 epochs), and a random model 0. No warm-up that never learnt the colours was
measured at its end (the failures issue 41 saw did not recur here: another float order), so how
well 0.7 catches them is not shown.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kubecua_api.common import ApiModel, DateTime


class WarmupStopConfig(ApiModel):
    every_epochs: int = Field(
        default=5, ge=1, le=1000, description="Epochs between two measurements."
    )
    tasks: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Training tasks measured, drawn from spec.tasks with spec.seed (the same"
        " ones at every measurement; all of them when there are fewer).",
    )
    greedy_pass_min: float = Field(
        default=0.2, ge=0, le=1, description="Stop once greedy pass@1 is at least this..."
    )
    greedy_pass_max: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="...and at most this; above it the warm-up stops at once (overshot).",
    )
    k: int = Field(default=8, ge=1, le=64, description="Episodes per task at temperature 1.")
    pass_at_k_min: float = Field(
        default=0.7, ge=0, le=1, description="Stop only once pass@k is at least this."
    )

    @model_validator(mode="after")
    def _window(self) -> WarmupStopConfig:
        if self.greedy_pass_min > self.greedy_pass_max:
            raise ValueError("greedyPassMin must not exceed greedyPassMax")
        return self


class WarmupGoalConfig(ApiModel):
    demonstrations: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Demonstrations measured after the last epoch, drawn from the warm-up's"
        " with spec.seed (all of them when there are fewer).",
    )
    reply_match_min: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="The goal: the share of the measured demonstrations' replies that the"
        " greedy policy reproduces exactly (every token its most likely one).",
    )
    on_below_goal: Literal["continue", "extend", "fail"] = Field(
        default="extend",
        description="Below the goal: continue (go on to GRPO, saying so), extend (train"
        " extendEpochs more epochs once, then fail if still below) or fail (the run fails;"
        " its warm-up's checkpoint is kept).",
    )
    extend_epochs: int = Field(
        default=30, ge=1, le=1000, description="The epochs onBelowGoal extend adds, once."
    )


class WarmupStatus(ApiModel):
    epochs: int | None = Field(
        default=None, description="Epochs the warm-up ran, an extension included."
    )
    extended_epochs: int | None = Field(
        default=None, description="Epochs added by onBelowGoal extend (0: none)."
    )
    reply_match: float | None = Field(
        default=None,
        description="Share of the measured demonstrated replies the greedy policy reproduces.",
    )
    replies: int | None = Field(default=None, description="Demonstrated replies measured.")
    goal: float | None = Field(default=None, description="goal.replyMatchMin.")
    below_goal: bool | None = Field(
        default=None, description="True when the warm-up ended below its goal."
    )
    result: Literal["Met", "MetAfterExtension", "BelowGoalContinued", "BelowGoalFailed"] | None = (
        Field(default=None, description="What the run did with the measurement.")
    )
    time: DateTime | None = Field(default=None, description="When it was measured.")
