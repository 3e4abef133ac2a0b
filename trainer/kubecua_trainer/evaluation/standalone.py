"""`python -m kubecua_trainer evaluate`: the held-out evaluation of any model directory or
checkpoint, without training.

    python -m kubecua_trainer evaluate out/checkpoints/step-00000040 --tasks tasks/heldout \\
        --local 2 --episodes-per-task 4 --output-dir out-eval

It builds a TrainingRun with steps 0 and spec.evaluation and runs it through train(), the path
every run takes: the figures, files, metrics and console lines are those of an in-run
evaluation (evaluations/step-0000/ under --output-dir). In a cluster, a TrainingRun with
`steps: 0` is the same job. A checkpoint directory (checkpoint.py) is an HF model directory
and loads as is. Sandboxes: --local N desktops started here, --urls of episode servers, or
--pool NAME --namespace NS (a SandboxPool, through the kubeconfig); --token-file is the bearer
token of --urls / --pool (local desktops make their own). --spec MANIFEST evaluates as that
TrainingRun does: its spec.evaluation (tasks, episodes, sampling, turns), rollout (pixels,
screenshots kept, system prompt) and maxNewTokens; flags given as well override them.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from kubecua_trainer.config import (
    API_VERSION,
    KIND,
    ConfigError,
    TrainingRun,
    load_manifest,
    parse_training_run,
)

# spec fields the flags set, to name the flag in a validation error
FLAGS = {
    "spec.evaluation.episodesPerTask": "--episodes-per-task",
    "spec.evaluation.temperature": "--temperature",
    "spec.evaluation.maxTurns": "--max-turns",
    "spec.rollout.maxPixels": "--max-pixels",
    "spec.rollout.systemPrompt": "--system-prompt",
    "spec.algorithm.maxNewTokens": "--max-new-tokens",
    "spec.sandboxes.local.replicas": "--local",
    "spec.sandboxes.urls": "--urls",
    "spec.seed": "--seed",
}


def add_parser(sub: Any) -> None:
    ev = sub.add_parser("evaluate", help="evaluate a model or checkpoint on held-out tasks")
    ev.add_argument("model", help="HF model directory or checkpoint (checkpoints/step-NNNNNNNN)")
    ev.add_argument("--spec", help="a TrainingRun manifest: evaluate as its run does")
    ev.add_argument("--tasks", help="OSWorld task file or folder (default: --spec's)")
    ev.add_argument("--ids", nargs="+", help="only these task ids, in this order")
    where = ev.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", type=int, metavar="N", help="start N local desktops")
    where.add_argument("--urls", nargs="+", metavar="URL", help="episode-server URLs")
    where.add_argument("--pool", metavar="NAME", help="a SandboxPool (needs --namespace)")
    ev.add_argument("--namespace", help="namespace of --pool")
    ev.add_argument("--token-file", help="sandbox bearer token file (--urls, --pool)")
    ev.add_argument("--episodes-per-task", type=int, metavar="K", help="default 1")
    ev.add_argument("--temperature", type=float, help="0 = greedy (default)")
    ev.add_argument("--max-turns", type=int, help="default: the algorithm's (15)")
    ev.add_argument("--max-new-tokens", type=int, help="tokens per reply (default 256)")
    ev.add_argument("--max-pixels", type=int, help="pixel cap per screenshot")
    ev.add_argument(
        "--system-prompt", help="the agent's system prompt (spec.rollout.systemPrompt's rules)"
    )
    ev.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    ev.add_argument("--output-dir", required=True, help="where evaluations/ is written")
    ev.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: off)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")


def evaluation_run(args: argparse.Namespace) -> TrainingRun:
    """The TrainingRun of an `evaluate` command line; ConfigError naming the flag to fix."""
    model, out = _model_dir(args.model), Path(args.output_dir).resolve()
    if (out / "checkpoints").is_dir():
        raise ConfigError(
            f"--output-dir: {out} holds a training run's checkpoints, which a run there would "
            "resume instead of evaluating MODEL: choose another folder"
        )
    evaluation, rollout, algorithm = _from_spec(args.spec) if args.spec else ({}, {}, {})
    if args.tasks is not None:
        tasks_path = Path(args.tasks).resolve()
        if not tasks_path.exists():
            raise ConfigError(f"--tasks: {args.tasks} does not exist")
        evaluation["tasks"] = {"path": str(tasks_path)}
    if "tasks" not in evaluation:
        raise ConfigError("--tasks: give the held-out tasks (or --spec, a TrainingRun's manifest)")
    if args.ids:
        evaluation["tasks"] = {**evaluation["tasks"], "ids": args.ids}
    for key, flag in (
        ("episodesPerTask", args.episodes_per_task),
        ("temperature", args.temperature),
        ("maxTurns", args.max_turns),
    ):
        if flag is not None:
            evaluation[key] = flag
    evaluation.setdefault("temperature", 0.0)
    if args.max_pixels is not None:
        rollout["maxPixels"] = args.max_pixels
    if args.system_prompt is not None:
        rollout["systemPrompt"] = args.system_prompt
    if args.max_new_tokens is not None:
        algorithm["maxNewTokens"] = args.max_new_tokens
    spec: dict[str, Any] = {
        "model": {"path": str(model)},
        "sandboxes": _sandboxes(args),
        "tasks": evaluation["tasks"],  # required by the schema; 0 steps train on nothing
        "evaluation": evaluation,
        "rollout": rollout,
        "algorithm": algorithm,
        "steps": 0,
        "seed": args.seed,
        "outputDir": str(out),
        "metrics": {"port": args.metrics_port},
    }
    metadata: dict[str, Any] = {"name": f"evaluate-{model.name}"}
    if args.namespace:
        metadata["namespace"] = args.namespace
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    try:
        return parse_training_run(obj, "evaluate")
    except ConfigError as err:
        text = str(err)
        for field, flag in FLAGS.items():
            text = text.replace(field, flag)
        raise ConfigError(text) from None


# What --spec takes from a manifest: how its run evaluates, never what it trains or where.
_ROLLOUT_KEYS = ("maxPixels", "keepScreenshots", "systemPrompt", "episodeTimeoutSeconds")


def _from_spec(path: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(evaluation, rollout, algorithm) fields of a manifest's spec, as camelCase dicts."""
    try:
        spec = load_manifest(path).spec
    except ConfigError as err:
        raise ConfigError(f"--spec: {err}") from None
    if spec.evaluation is None:
        raise ConfigError(f"--spec: {path} has no spec.evaluation to evaluate as; give --tasks")
    evaluation = spec.evaluation.model_dump(by_alias=True, exclude_none=True)
    evaluation.pop("everySteps", None)
    evaluation.pop("atStart", None)
    evaluation.pop("beforeWarmup", None)  # a run's schedule: this evaluates MODEL, no warm-up
    evaluation.setdefault("maxTurns", spec.algorithm.max_turns)  # the run's fallback too
    rollout = spec.rollout.model_dump(by_alias=True, exclude_none=True)
    algorithm = {"maxNewTokens": spec.algorithm.max_new_tokens}
    return evaluation, {k: rollout[k] for k in _ROLLOUT_KEYS if k in rollout}, algorithm


def _model_dir(given: str) -> Path:
    path = Path(given).resolve()
    if (path / "config.json").is_file():
        return path
    steps = sorted(p for p in path.glob("step-*") if (p / "config.json").is_file())
    if steps:
        raise ConfigError(
            f"MODEL: {given} is a checkpoint root; give one of its checkpoints, e.g. {steps[-1]}"
        )
    raise ConfigError(
        f"MODEL: {given} is not a model directory (no config.json): give an HF model directory"
        " or a checkpoint folder (checkpoints/step-NNNNNNNN)"
    )


def _sandboxes(args: argparse.Namespace) -> dict[str, Any]:
    if args.token_file:
        if not Path(args.token_file).is_file():
            raise ConfigError(f"--token-file: {args.token_file} is not a file")
        if args.local is not None:
            raise ConfigError("--token-file: local desktops make their own token; drop it")
        # sources.resolve_token reads it (no tokenSecretRef is set for a command line)
        os.environ["KUBECUA_SANDBOX_TOKEN_FILE"] = str(Path(args.token_file).resolve())
    if args.local is not None:
        return {"local": {"replicas": args.local}, "minReady": max(1, args.local)}
    if args.urls:
        bad = [u for u in args.urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ConfigError(f"--urls: episode-server URLs start with http:// or https:// ({bad})")
        return {"urls": args.urls, "minReady": 1}
    if not args.namespace:
        raise ConfigError("--pool: give the SandboxPool's --namespace too")
    return {"poolRef": args.pool, "minReady": 1}


def print_results(out_dir: Path, figures: bool) -> None:
    """Where an evaluate-only run's results are, and its figures (from its summary.json) when
    the progress console, which already printed them, was off."""
    from kubecua_trainer.evaluation import results
    from kubecua_trainer.evaluation.stage import console_line  # imports torch: only now

    folder = results.step_dir(out_dir, 0)
    summary = folder / "summary.json"
    if not summary.is_file():
        print(f"no results: {summary} was not written")
        return
    if figures:
        print(console_line(json.loads(summary.read_text())))
    print(f"summary: {summary}")
    print(f"OSWorld-style results: {folder / 'osworld'}")
