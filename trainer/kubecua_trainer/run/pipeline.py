"""A run is a pipeline: supervised warm-up, then GRPO steps, with held-out evaluation before,
during and after. train.py runs the steps; this module holds the stages around them.

- before_steps: with spec.evaluation.beforeWarmup, the evaluation of the untrained model
  (once per run, into untrained/evaluations/step-0000/), then the warm-up (spec.warmup; once
  per run, checkpointed as step 0), then the evaluation of the starting policy
  (spec.evaluation.atStart; step 0).
- after_step: the evaluation every spec.evaluation.everySteps steps and after the last step.
A stage that a kill interrupted runs again on resume: each one is done only once its results
are on disk (warm-up: the step-0 checkpoint; evaluation: evaluations/step-NNNN/summary.json,
the untrained one's under untrained/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubecua_trainer.evaluation.stage import (
    evaluate_if_due,
    evaluate_untrained_if_asked,
    republish_last,
)
from kubecua_trainer.warmup.stage import warm_up_if_needed

if TYPE_CHECKING:
    from kubecua_trainer.run.loop import Loop


async def before_steps(lp: Loop) -> None:
    republish_last(lp)  # a resumed run shows its newest evaluation again
    if not await evaluate_untrained_if_asked(lp):
        return  # stopped: no warm-up is started
    await warm_up_if_needed(lp)
    await evaluate_if_due(lp, lp.saver.step)


async def after_step(lp: Loop, step: int) -> None:
    await evaluate_if_due(lp, step)
