"""`make bench-learning`: does an agent get better on tasks it never trained on? Real pipeline,
real local desktops, the typeword family (sandbox-image/tasks/typeword_tasks.py).

What it does: builds the benchmark model (tiny_models size "bench", cached by a hash of its
inputs), starts local desktops once, records the warm-up's demonstrations with the recorder
(`python -m kubecua_trainer record`, cached by a hash of the tasks and the recorder), then runs
`python -m kubecua_trainer run` on the same desktops (sandboxes.urls) for each seed: spec.warmup
on the demonstrations, spec.evaluation of the held-out instances at step 0, GRPO on the train
instances, evaluation at the end; plus a control with the same seed and evaluation whose GRPO
learning rate is 1e-30 (the config requires > 0). Prints one JSON document (stdout) and writes
it with a curves PNG to --out. Goal (issue 19): held-out success rises by >= 20 points in every
seed while the control stays within one episode.
What it leaves out: any pretrained knowledge (the model starts random), and tasks that need the
screenshot (the word is in the instruction); see docs/benchmarks.md for what it shows.
How to run: make bench-learning [BENCH_ARGS="--smoke"], or from trainer/:
    .venv/bin/python -m bench.learning.run --out ../out/bench-learning
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from bench.learning import family, plot
from bench.learning.family import BENCH_PROMPT, FAMILY, WARMUP_IDS, load_split
from kubecua_trainer import tiny_models
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import LocalSource

PY = sys.executable
CONTROL_LR = 1e-30
GOAL_RISE = 0.20

# The calibrated recipe (bench/learning/offline.py chose it; docs/benchmarks.md has the runs).
RECIPE: dict[str, Any] = {
    "steps": 12,
    "warmup": {"epochs": 60, "batchSize": 2, "learningRate": 3e-3},
    "algorithm": {
        "groupSize": 4,
        "tasksPerStep": 8,
        "maxTurns": 1,
        "learningRate": 5e-4,
        "maxNewTokens": 16,
        "temperature": 1.0,
    },
    # 784 pixels: a 28x28 screenshot, one image token. The words are in the instruction; a
    # larger image only dilutes the attention the copy has to learn (offline.py measured it).
    "rollout": {
        "engine": "hf",
        "systemPrompt": BENCH_PROMPT,
        "maxPixels": 784,
        "keepScreenshots": 1,
        "episodeTimeoutSeconds": 120,
    },
}
SMOKE = {"steps": 1, "seeds": [0], "heldout": 4, "control": False}
SMOKE_WARMUP_EPOCHS = 10  # the smoke checks that the pipeline runs through, not that it learns


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def bench_model(cache: Path) -> Path:
    """The benchmark model, built once per content of its builder and of the family's words."""
    corpus = family.corpus()
    key = digest(Path(tiny_models.__file__).read_bytes(), "\n".join(corpus).encode())
    out = cache / "models" / f"bench-typeword-{key}"
    if not (out / "config.json").exists():
        tmp = Path(tempfile.mkdtemp(dir=cache / "models", prefix=".building-"))
        tiny_models.build_tiny_model(tmp, size="bench", corpus=corpus)
        tmp.rename(out)
    return out


def warmup_ids() -> list[str]:
    return list(WARMUP_IDS)


async def demonstrations(cache: Path, urls: list[str] | None, token_file: Path | None) -> Path:
    """The warm-up instances' reference solutions, recorded on the desktops at `urls` (or on 2
    local ones the recorder starts), cached by a hash of the tasks and the recorder."""
    from kubecua_trainer.warmup import record

    ids = warmup_ids()
    files = [FAMILY / "train" / f"{i}{ext}" for i in ids for ext in (".json", ".solutions.json")]
    key = digest(Path(record.__file__).read_bytes(), *(f.read_bytes() for f in files))
    out = cache / "demonstrations" / f"typeword-{key}"
    if (out / record.OUT_FILE).exists():
        return out / record.OUT_FILE
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    argv = ["record", "--tasks", str(FAMILY / "train"), "--ids", *ids, "--out", str(tmp)]
    argv += ["--urls", *urls, "--token-file", str(token_file)] if urls else ["--local", "2"]
    await _python(argv, None)
    tmp.rename(out)
    return out / record.OUT_FILE


def manifest(
    name: str,
    seed: int,
    lr: float,
    model: Path,
    demos: Path,
    urls: list[str],
    steps: int,
    heldout_ids: list[str] | None,
) -> dict[str, Any]:
    evaluation: dict[str, Any] = {
        "tasks": {"path": str(FAMILY / "heldout")},
        "episodesPerTask": 1,
        "temperature": 0.0,
        "maxTurns": 1,
    }
    if heldout_ids:
        evaluation["tasks"]["ids"] = heldout_ids
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"path": str(model), "dtype": "float32"},
            "sandboxes": {"urls": urls, "minReady": len(urls)},
            "tasks": {"path": str(FAMILY / "train")},
            "evaluation": evaluation,
            "warmup": {"demonstrations": str(demos), **RECIPE["warmup"]},
            "algorithm": {**RECIPE["algorithm"], "learningRate": lr},
            "rollout": {**RECIPE["rollout"], "maxInFlightEpisodes": 2 * len(urls)},
            "trainer": {"gradientCheckpointing": False},
            "checkpoint": {"everySteps": 1000, "keep": 1},
            "steps": steps,
            "seed": seed,
            "metrics": {"port": 0},
        },
    }


async def _python(argv: list[str], log: Path | None) -> None:
    """`python -m kubecua_trainer ARGV`, its output to `log` (or ours); fails loudly."""
    out = log.open("w") if log else None
    try:
        proc = await asyncio.create_subprocess_exec(
            PY, "-m", "kubecua_trainer", *argv, stdout=out, stderr=out
        )
        try:
            code = await proc.wait()
        except asyncio.CancelledError:  # we are stopping: so does the run (it checkpoints)
            proc.terminate()
            await proc.wait()
            raise
        if code != 0:
            where = f"; its log: {log}" if log else ""
            raise RuntimeError(f"kubecua_trainer {argv[0]} exited {proc.returncode}{where}")
    finally:
        if out:
            out.close()


def collect(out_dir: Path, seconds: float) -> dict[str, Any]:
    """Held-out success at the first and last evaluation, and training success per step."""
    evals = [
        json.loads(x) for x in (out_dir / "evaluations/history.jsonl").read_text().splitlines()
    ]
    steps = [json.loads(x) for x in (out_dir / "history.jsonl").read_text().splitlines()]
    first, last = evals[0], evals[-1]

    def figure(e: dict[str, Any]) -> dict[str, Any]:
        return {
            "step": e["step"],
            "success": e["success_rate"],
            "episodes": e["scored"],
            "excluded": e["excluded"],
        }

    return {
        "heldout_start": figure(first),
        "heldout_end": figure(last),
        "rise": round(last["success_rate"] - first["success_rate"], 4),
        "train_success_per_step": [round(s["success_rate"], 4) for s in steps],
        "train_episodes_per_step": [int(s.get("episodes", s.get("scored", 0))) for s in steps],
        "wall_seconds": round(seconds, 1),
    }


async def untrained(ctx: dict[str, Any], out: Path) -> dict[str, Any]:
    """The held-out figure of the model before any training: `evaluate --spec` on the seeds'
    own manifest, so it evaluates exactly as their step-0 evaluation does."""
    run_dir = out / "untrained"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = manifest(
        "untrained", 0, CONTROL_LR, ctx["model"], ctx["demos"], ctx["urls"], ctx["steps"],
        ctx["heldout_ids"],
    )  # fmt: skip
    path = run_dir / "trainingrun.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    argv = ["evaluate", str(ctx["model"]), "--spec", str(path), "--urls", *ctx["urls"]]
    argv += ["--token-file", os.environ["KUBECUA_SANDBOX_TOKEN_FILE"]]
    argv += ["--output-dir", str(run_dir / "out"), "--no-progress"]
    await _python(argv, run_dir / "evaluate.log")
    summary = json.loads((run_dir / "out/evaluations/step-0000/summary.json").read_text())
    return {"success": summary["success_rate"], "episodes": summary["scored"]}


async def one_run(name: str, seed: int, lr: float, ctx: dict[str, Any], out: Path) -> dict:
    spec = manifest(
        name, seed, lr, ctx["model"], ctx["demos"], ctx["urls"], ctx["steps"], ctx["heldout_ids"]
    )
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    path = run_dir / "trainingrun.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    t0 = time.monotonic()
    argv = ["run", str(path), "--output-dir", str(run_dir / "out"), "--no-progress"]
    await _python(argv, run_dir / "run.log")
    print(f"bench-learning: {name} done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return {"seed": seed, "learning_rate": lr, **collect(run_dir / "out", time.monotonic() - t0)}


def verdict(seeds: list[dict[str, Any]], control: dict[str, Any] | None) -> dict[str, Any]:
    """The goal: every seed rises >= 20 points; the control moves by at most one episode."""
    rises = all(s["rise"] >= GOAL_RISE for s in seeds)
    still = None
    if control is not None:
        one = 1.0 / max(1, control["heldout_start"]["episodes"])
        still = abs(control["rise"]) <= one + 1e-9
    return {
        "every_seed_rises_20_points": rises,
        "control_stays_within_one_episode": still,
        "goal_reached": bool(rises and still),
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    cache, out = Path(args.cache), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (cache / "models").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    source = LocalSource(args.desktops, out / "desktops")
    await source.start(SandboxLeases())
    try:
        token_file = out / "desktops" / "token"
        os.environ["KUBECUA_SANDBOX_TOKEN_FILE"] = str(token_file)
        urls = [sb.url for sb in source.sandboxes]
        heldout = [str(t["id"]) for t in load_split("heldout")]
        ctx = {
            "model": bench_model(cache),
            "urls": urls,
            "steps": args.steps,
            "demos": await demonstrations(cache, urls, token_file),
            "heldout_ids": heldout[: args.heldout] if args.heldout else None,
        }
        setup = time.monotonic() - t0
        before = await untrained(ctx, out)
        seeds = [
            await one_run(f"seed-{s}", s, RECIPE["algorithm"]["learningRate"], ctx, out)
            for s in args.seeds
        ]
        control = (
            await one_run("control", args.seeds[0], CONTROL_LR, ctx, out) if args.control else None
        )
    finally:
        await source.stop()
    doc = {
        "benchmark": "learning (typeword family, issue 19)",
        "family": {
            "train": len(load_split("train")),
            "heldout": len(ctx["heldout_ids"] or heldout),
            "warmup_demonstrations": len(WARMUP_IDS),
        },
        "model": str(ctx["model"]),
        "recipe": {**RECIPE, "steps": args.steps, "desktops": args.desktops},
        "heldout_untrained": before,
        "seeds": seeds,
        "control": control,
        "verdict": verdict(seeds, control),
        "setup_seconds": round(setup, 1),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "curves": str(out / "curves.png"),
    }
    (out / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot.curves(doc, out / "curves.png")
    return doc


async def prepare(cache: Path) -> None:
    """What the demo's manifest names: the model and the demonstrations, under fixed names
    (links to their hashed, cached builds)."""
    (cache / "models").mkdir(parents=True, exist_ok=True)
    model, demos = bench_model(cache), (await demonstrations(cache, None, None)).parent
    for link, target in (
        (cache / "models/bench-typeword", model),
        (cache / "demonstrations/typeword", demos),
    ):
        tmp = link.with_name(link.name + ".new")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)
        print(f"{link} -> {target}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="../out/bench-learning")
    p.add_argument(
        "--cache", default=os.path.expanduser(os.environ.get("KUBECUA_CACHE", "~/.cache/kubecua"))
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=RECIPE["steps"])
    p.add_argument("--desktops", type=int, default=4)
    p.add_argument("--heldout", type=int, default=0, help="only the first N held-out (0: all)")
    p.add_argument("--no-control", dest="control", action="store_false")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="1 seed, 10 warm-up epochs, 1 step, 4 held-out, no control",
    )
    p.add_argument("--prepare", action="store_true", help="only build the model, record demos")
    args = p.parse_args(argv)
    if args.prepare:
        asyncio.run(prepare(Path(args.cache)))
        return
    if args.smoke:
        args.steps, args.seeds, args.heldout, args.control = (SMOKE[k] for k in SMOKE)
        RECIPE["warmup"] = {**RECIPE["warmup"], "epochs": SMOKE_WARMUP_EPOCHS}
    # SIGTERM as Ctrl-C: the desktops and the child run are stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(json.dumps(asyncio.run(bench(args)), indent=1))


if __name__ == "__main__":
    main()
