"""Warm-start the tiny demo model so `make demo` has something to learn from. A DEMO CRUTCH.

Why: a tiny model with random weights never writes a valid action, so every episode scores 0,
every GRPO group has zero variance and the learner never steps. A real run starts from a
pretrained model whose prior sometimes succeeds; this stands in for that prior.
What it does: a short supervised pass (cross-entropy on the reply tokens only) on the offline
suite's solutions for a few tasks, rendered in the exact agent format (demonstrations.py). Each
task's `reference` solution (succeeds) and near-miss `wrong` solution (fails the evaluator) are
weighted referenceFraction : 1 - referenceFraction, so at temperature 1 the policy plays the
reference about that often and GRPO has real, mixed rewards to learn from on the real desktops.
It writes the model to CACHE/<base name>-warm-<key>, where key hashes every input (base weights,
task and solution JSON, settings, this code), so a second `make demo` reuses it in ~1 s, and
prints each task's exact P(reference) and P(wrong) under the result.
Leaves out: real screenshots (synthetic ones; the model learns to ignore them) and anything that
generalises: the model knows only these tasks. It proves the loop learns, not that agents work.
Run (what `make demo` does; tasks.ids and rollout.maxPixels come from the manifest, and its
model.path becomes a symlink to the result):
    python -m kubecua_trainer.testing.warm_start ~/.cache/kubecua/models/tiny-qwen2_5_vl \
        examples/trainingrun-local.yaml --cache ~/.cache/kubecua/models
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from kubecua_trainer.config import load_manifest
from kubecua_trainer.logprobs import token_logprobs
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout import agent
from kubecua_trainer.testing import demonstrations
from kubecua_trainer.testing.demonstrations import Demo, load_demos, render_demo
from kubecua_trainer.tokens import Sample

log = logging.getLogger(__name__)
MARKER = "warm_start.json"  # written last: a directory without it is incomplete


@dataclass(frozen=True)
class WarmStartConfig:
    steps: int = 80  # optimizer steps; each sees every task's reference and wrong solution
    learning_rate: float = 1e-2
    reference_fraction: float = 0.5  # target P(reference) per task at temperature 1
    screens_per_demo: int = 12  # synthetic screenshot variants per solution
    screen_size: tuple[int, int] = (1920, 1080)  # the local desktops' screen
    max_pixels: int = 50176  # the demo manifest's rollout.maxPixels
    seed: int = 0


def cache_key(base: Path, tasks_dir: Path, ids: list[str], cfg: WarmStartConfig) -> str:
    """sha256 over the base model's files, the tasks' JSON, the settings and the code used."""
    h = hashlib.sha256()
    for f in sorted(p for p in base.iterdir() if p.is_file()):
        h.update(f.name.encode() + f.read_bytes())
    for tid in ids:
        for f in sorted(tasks_dir.rglob(f"{tid}*.json")):
            h.update(f.name.encode() + f.read_bytes())
    h.update(json.dumps({"ids": ids, **asdict(cfg)}, sort_keys=True).encode())
    for module in (agent, demonstrations):
        h.update(Path(str(module.__file__)).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def reply_logprob(policy: Policy, sample: Sample) -> torch.Tensor:
    """Sum of log p(token) over the sample's trained (mask 1) tokens: log P(this whole reply).

    The learner's own log-probs (same mRoPE inputs and banned ids as the hf engine's sampling):
    a forward without the image-token types puts positions elsewhere, and a model fitted that
    way writes other replies under generate()."""
    return token_logprobs(policy, sample)[0].sum()


def supervised_pass(policy: Policy, demos: list[Demo], cfg: WarmStartConfig) -> list[float]:
    """AdamW on f * NLL(reference) + (1 - f) * NLL(wrong) per task; returns the loss per step.

    The minimum puts P(reference) = f and P(wrong) = 1 - f where the two first differ, e.g. f=0.5
    gives 'FAIL' vs 'DONE' with 0.5 each for an infeasible task."""
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    pool = _render_pool(policy, demos, cfg, rng)
    weights = {"reference": cfg.reference_fraction, "wrong": 1.0 - cfg.reference_fraction}
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    # Linear decay to 0: the large early steps fit the format, the small late ones the mix.
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 - i / cfg.steps)
    policy.model.train()
    losses = []
    for _ in range(cfg.steps):
        opt.zero_grad()
        total = 0.0
        for demo in demos:
            for kind, weight in weights.items():
                sample = rng.choice(pool[(demo.task_id, kind)])
                loss = -weight * reply_logprob(policy, sample) / len(demos)
                loss.backward()
                total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        opt.step()
        decay.step()
        losses.append(total)
        if len(losses) % 10 == 0:
            log.info("warm start step %d/%d: loss %.4f", len(losses), cfg.steps, total)
    policy.model.eval()
    return losses


def _render_pool(
    policy: Policy, demos: list[Demo], cfg: WarmStartConfig, rng: random.Random
) -> dict[tuple[str, str], list[Sample]]:
    pool = {}
    for demo in demos:
        for kind in ("reference", "wrong"):
            replies = getattr(demo, kind)
            pool[(demo.task_id, kind)] = [
                render_demo(policy, demo.instruction, replies, rng, cfg.screen_size, cfg.max_pixels)
                for _ in range(cfg.screens_per_demo)
            ]
    return pool


@torch.no_grad()
def solution_probabilities(
    policy: Policy, demos: list[Demo], cfg: WarmStartConfig, seed: int = 1
) -> dict[str, dict[str, float]]:
    """Exact P(reference) and P(wrong) per task at temperature 1, on fresh synthetic screens."""
    rng = random.Random(seed)
    probs: dict[str, dict[str, float]] = {}
    for demo in demos:
        probs[demo.task_id] = {}
        for kind in ("reference", "wrong"):
            s = render_demo(
                policy, demo.instruction, getattr(demo, kind), rng, cfg.screen_size, cfg.max_pixels
            )
            probs[demo.task_id][kind] = round(float(reply_logprob(policy, s).exp()), 4)
    return probs


def warm_start(
    base: Path, tasks_dir: Path, ids: list[str], cache: Path, cfg: WarmStartConfig
) -> tuple[Path, bool]:
    """(model directory, whether it was built now); a cached one is returned as it is."""
    out = cache / f"{base.name}-warm-{cache_key(base, tasks_dir, ids, cfg)}"
    if (out / MARKER).exists():
        return out, False
    demos = load_demos(tasks_dir, ids)
    policy = load_policy(str(base), "float32", device="cpu")
    losses = supervised_pass(policy, demos, cfg)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp)  # tokenizer, processor, chat template
    model: Any = policy.model
    model.save_pretrained(tmp)
    info = {
        "what": "demo warm start (behaviour cloning on the offline suite's solutions)",
        "base": str(base),
        "tasks": ids,
        "config": asdict(cfg),
        "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)],
        "solution_probabilities": solution_probabilities(policy, demos, cfg),
    }
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out, True


def link(target: Path, link_path: Path) -> None:
    """Point link_path at target atomically (a symlink replaced with rename); never replaces
    a real file or directory."""
    if link_path.exists() and not link_path.is_symlink():
        raise ValueError(f"{link_path} exists and is not a symlink; not replacing it")
    link_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = link_path.with_name(f".{link_path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve())
    os.replace(tmp, link_path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path, help="the tiny model directory (tiny_models)")
    p.add_argument("manifest", help="TrainingRun whose tasks.ids to learn; model.path is linked")
    p.add_argument("--cache", type=Path, required=True, help="folder of cached models")
    p.add_argument("--steps", type=int, default=WarmStartConfig.steps)
    p.add_argument("--learning-rate", type=float, default=WarmStartConfig.learning_rate)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not (args.base / "config.json").exists():
        p.error(f"{args.base} is not a model directory (no config.json)")
    try:
        spec = load_manifest(args.manifest).spec
        if not spec.tasks.path or not spec.tasks.ids:
            raise ValueError(f"{args.manifest}: needs spec.tasks.path and spec.tasks.ids")
        if "$" in spec.model.path:
            raise ValueError(f"model.path {spec.model.path}: a variable is unset (KUBECUA_CACHE?)")
        cfg = WarmStartConfig(
            steps=args.steps, learning_rate=args.learning_rate, max_pixels=spec.rollout.max_pixels
        )
        out, built = warm_start(args.base, Path(spec.tasks.path), spec.tasks.ids, args.cache, cfg)
    except ValueError as err:  # ConfigError too
        p.error(str(err))
    info = json.loads((out / MARKER).read_text())
    print(f"warm-started model ({'built now' if built else 'cached'}): {out}")
    for tid, probs in info["solution_probabilities"].items():
        print(f"  {tid}: P(reference)={probs['reference']:.2f} P(wrong)={probs['wrong']:.2f}")
    try:
        link(out, Path(spec.model.path))
    except ValueError as err:
        p.error(str(err))
    print(f"  linked as {spec.model.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
