"""bench-learning's continued-SFT arm: a run's warm-up fit, continued from its step-0 checkpoint.

What it does: loads a finished warm-up (a `kubecua_trainer run` output folder: the step-0
checkpoint, and warmup-state.pt, which the warm-up writes with KUBECUA_WARMUP_STATE=1) into the
trainer's own learner (learner_setup.build_learner, the run's manifest), restores the warm-up's
optimizer and shuffle (warmup/sft.py DemoFit), and runs more epochs on the same demonstrations
until --seconds-file says how long (or SIGTERM), finishing the epoch it is in; then writes the
weights as a checkpoint (an HF model folder that `kubecua_trainer evaluate` reads) and a JSON
line of what it did. So
the arm is the warm-up run longer, exactly as the same fit would have gone on, without redoing
the warm-up's epochs. bench/learning/run.py starts it beside the GRPO arm's steps and stops it
when they end: both arms get the same wall time on the same machine.
What it leaves out: desktops (supervised training plays no episodes); the arm's evaluation is
run.py's (`kubecua_trainer evaluate` on the desktops).
How to run (from trainer/): .venv/bin/python -m bench.learning.continued_sft RUN_OUT MANIFEST OUT
[--seconds-file F]
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

import torch

from kubecua_trainer.config import load_manifest
from kubecua_trainer.learning.checkpoint import load_checkpoint, save_checkpoint
from kubecua_trainer.learning.learner_setup import build_learner
from kubecua_trainer.speedups.cpu_threads import limit_cpu_threads
from kubecua_trainer.trajectories import Trajectory
from kubecua_trainer.warmup.demos import demo_samples, load_demonstrations
from kubecua_trainer.warmup.sft import DemoFit
from kubecua_trainer.warmup.stage import WARMUP_STATE


def budget(path: str | None) -> float:
    """The seconds to fit for: what the file says once it is written, until then no end."""
    if path is None or not Path(path).exists():
        return float("inf")
    text = Path(path).read_text().strip()
    return float(text) if text else float("inf")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_out", help="the warmed run's output folder")
    p.add_argument("manifest", help="that run's TrainingRun manifest")
    p.add_argument("out", help="where the checkpoint and continued.json go")
    p.add_argument(
        "--seconds-file",
        help="a file that, once written, holds the seconds to fit for (checked between epochs)",
    )
    args = p.parse_args(argv)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _frame: stop.append(sig))
    limit_cpu_threads()
    spec = load_manifest(args.manifest).spec
    assert spec.warmup is not None, "the manifest has no spec.warmup"
    run_out, out = Path(args.run_out), Path(args.out)
    policy, learner, _ = build_learner(spec)
    load_checkpoint(run_out / "checkpoints" / "step-00000000", policy, learner, None)
    demos = load_demonstrations(spec, set())

    def build(demo: Trajectory) -> list:
        return demo_samples(policy, demo, spec.algorithm, spec.rollout)

    fitter = DemoFit(learner, demos, build, spec.warmup, spec.seed)
    fitter.load_state_dict(torch.load(run_out / WARMUP_STATE, weights_only=False))
    start_epochs, t0 = fitter.epochs, time.monotonic()
    while not stop and time.monotonic() - t0 < budget(args.seconds_file):
        fitter.run(1)
    seconds = time.monotonic() - t0
    path = save_checkpoint(out / "checkpoints", 0, policy, learner, None)
    doc = {
        "checkpoint": path,
        "warmup_epochs": start_epochs,
        "more_epochs": fitter.epochs - start_epochs,
        "seconds": round(seconds, 1),
        "epoch_losses": [round(x, 6) for x in fitter.fit.epoch_losses[start_epochs:]],
    }
    (out / "continued.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
