"""Command line of the trainer.

    python -m kubecua_trainer run examples/trainingrun-local.yaml     a manifest file, locally
        [--seed N]                      the same recipe with another seed (spec.seed)
    python -m kubecua_trainer run --trainingrun NAME --namespace NS     the live object (in a pod)
    python -m kubecua_trainer validate FILE                             check a manifest, print it
    python -m kubecua_trainer evaluate MODEL --tasks T --local 2 --output-dir D
                                        held-out evaluation of a model or checkpoint (steps 0)
    python -m kubecua_trainer record --tasks DIR --local 2 --out DIR    demonstrations, recorded
    python -m kubecua_trainer export-successes RUN_DIR --to FILE.jsonl  a run's successes as demos
    python -m kubecua_trainer export-merged CHECKPOINT OUT            a LoRA checkpoint merged
                                        into its base model: a plain Hugging Face model directory

In a pod the operator runs `run /etc/kubecua/trainingrun.yaml` (its ConfigMap) and sets
KUBECUA_TRAININGRUN_NAME and KUBECUA_TRAININGRUN_NAMESPACE; whenever a TrainingRun is named, the
run patches that object's status and serves metrics on all interfaces.
SIGTERM (the operator suspending the run, an eviction, a local `kill`) stops the run
after checkpointing its last completed step and exits 143 (128 + SIGTERM): the run is not finished,
and a Job must not count the pod as succeeded; the next run resumes from that checkpoint. A rank
under torchrun's agent (kubecua_trainer.launch) exits 0 instead, since the agent counts any other
code as a failed worker; the launcher itself then exits 143.
`evaluate --help` lists its flags (evaluation/standalone.py).
A run prints its seed first. Its log records go to <outputDir>/trainer.log; on a local run's
terminal they are left to the console's lines (one per warm-up epoch and per step) except
warnings and errors, while with --no-progress (benchmarks: no console) and in a pod (kubectl logs
is its log) they go to stderr as well.
Exit codes: 0 all steps done, 143 stopped by SIGTERM before the last step, 2 invalid
configuration, 1 any other failure, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubecua_trainer.config import ConfigError, TrainingRun, load_from_cluster, load_manifest
from kubecua_trainer.evaluation import standalone

STOPPED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM, the last completed step checkpointed


def stopped_exit_code() -> int:
    """143, but 0 for a worker of torch's elastic agent (it sets TORCHELASTIC_RUN_ID): the agent
    counts a non-zero worker as failed, and the launcher reports the stop instead."""
    return 0 if os.environ.get("TORCHELASTIC_RUN_ID") else STOPPED


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kubecua_trainer", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a TrainingRun")
    run.add_argument("manifest", nargs="?", help="TrainingRun YAML file")
    run.add_argument("--trainingrun", default=os.environ.get("KUBECUA_TRAININGRUN_NAME"))
    run.add_argument("--namespace", default=os.environ.get("KUBECUA_TRAININGRUN_NAMESPACE"))
    run.add_argument("--steps", type=int, help="override spec.steps")
    run.add_argument(
        "--seed", type=int, help="override spec.seed: the same recipe with another seed"
    )
    run.add_argument("--output-dir", help="override spec.outputDir")
    run.add_argument("--metrics-port", type=int, help="override spec.metrics.port (0: off)")
    run.add_argument("--metrics-addr", help="bind address (default 127.0.0.1 locally)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    val = sub.add_parser("validate", help="validate a manifest and print the full spec")
    val.add_argument("manifest")
    _demonstration_commands(sub)
    merge = sub.add_parser("export-merged", help="a LoRA checkpoint folded into its base model")
    merge.add_argument("checkpoint", type=Path, help="a checkpoint of a spec.model.lora run")
    merge.add_argument("out", type=Path, help="the new Hugging Face model directory")
    merge.add_argument("--base", help="the base model directory (default: the adapter's own)")
    standalone.add_parser(sub)
    return p


def _demonstration_commands(sub: Any) -> None:
    rec = sub.add_parser("record", help="play tasks' reference solutions into demonstrations")
    rec.add_argument("--tasks", type=Path, required=True, help="task JSON file or folder")
    rec.add_argument("--ids", nargs="+", help="only these task ids")
    where = rec.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", type=int, metavar="N", help="start N local desktops")
    where.add_argument("--urls", nargs="+", help="episode-server URLs")
    rec.add_argument("--token-file", type=Path, help="sandbox bearer token (--urls)")
    rec.add_argument("--out", type=Path, required=True, help="folder for demonstrations.jsonl")
    rec.add_argument("--repeats", type=int, default=1, help="episodes per task (default 1)")
    rec.add_argument("--timeout", type=float, default=300.0, help="seconds per episode")
    rec.add_argument(
        "--solution",
        default="reference",
        help="the <id>.solutions.json entry to play (default reference; e.g. a task family's"
        " biased demonstrator, `demonstration`)",
    )
    exp = sub.add_parser("export-successes", help="a run's successful episodes as demonstrations")
    exp.add_argument("run_dir", type=Path, help="the run's output folder (outputDir)")
    exp.add_argument("--to", type=Path, required=True, help="the new trajectory JSONL file")
    exp.add_argument("--min-reward", type=float, default=1.0, help="keep rewards >= this")


def _demonstrations(args: argparse.Namespace) -> int:
    """record / export-successes: no manifest; 2 on bad input, as the other commands."""
    from kubecua_trainer.warmup.export import export_successes
    from kubecua_trainer.warmup.record import record_command

    try:
        if args.command == "export-successes":
            read, kept = export_successes(args.run_dir, args.to, args.min_reward)
            print(f"{kept} of {read} episodes (reward >= {args.min_reward:g}) -> {args.to}")
            return 0
        if args.repeats < 1 or (args.local is not None and args.local < 1):
            raise ConfigError("--repeats and --local: must be >= 1")
        lines = asyncio.run(
            record_command(
                args.tasks,
                args.ids,
                args.out,
                args.local,
                args.urls,
                args.token_file,
                args.repeats,
                args.timeout,
                args.solution,
            )
        )
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {describe(err)}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _export_merged(args: argparse.Namespace) -> int:
    from kubecua_trainer.lora import export_merged

    try:
        out = export_merged(args.checkpoint, args.out, args.base)
    except ConfigError as err:
        print(f"error: {describe(err)}", file=sys.stderr)
        return 2
    print(f"merged model: {out}")
    return 0


def describe(err: BaseException) -> str:
    """An error as the CLI prints it: its message, or its type when it has none (a bare
    TimeoutError once printed `error: ` and nothing else).

    >>> describe(TimeoutError()), describe(FileNotFoundError("no model at /m"))
    ('TimeoutError (no message)', 'no model at /m')
    """
    text = str(err).strip()
    return text or f"{type(err).__name__} (no message)"


@contextlib.contextmanager
def log_to_file(out_dir: Path, console: bool) -> Iterator[Path]:
    """The run's log records into <out_dir>/trainer.log (a rank other than 0: trainer-rank-N.log)
    while it runs; with a console the terminal keeps warnings and errors only, so a record is
    never shown beside the console's line for the same event."""
    rank = os.environ.get("RANK", "0")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("trainer.log" if rank == "0" else f"trainer-rank-{rank}.log")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    terminal = [
        h for h in root.handlers
        if type(h) is logging.StreamHandler and h.stream in (sys.stderr, sys.stdout)
    ]  # fmt: skip
    levels = [h.level for h in terminal]
    if console:
        for h in terminal:
            h.setLevel(logging.WARNING)
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
        for h, level in zip(terminal, levels, strict=True):
            h.setLevel(level)


def load_run(args: argparse.Namespace) -> TrainingRun:
    if args.command == "evaluate":
        return standalone.evaluation_run(args)
    if args.manifest:
        run = load_manifest(args.manifest)
        if getattr(args, "trainingrun", None):  # the operator's copy of a live object
            run.metadata["name"] = args.trainingrun
            run.metadata["namespace"] = args.namespace or run.namespace
    elif args.trainingrun and args.namespace:
        run = load_from_cluster(args.trainingrun, args.namespace)
    else:
        raise ConfigError("give a manifest file, or --trainingrun NAME and --namespace NS")
    spec = run.spec
    if getattr(args, "steps", None) is not None:
        if args.steps < 1:
            raise ConfigError("--steps: must be >= 1")
        spec.steps = args.steps
    if getattr(args, "seed", None) is not None:
        if not 0 <= args.seed <= 2**32 - 1:
            raise ConfigError("--seed: must be between 0 and 4294967295")
        spec.seed = args.seed
    if getattr(args, "output_dir", None):
        spec.output_dir = os.path.abspath(args.output_dir)
    if getattr(args, "metrics_port", None) is not None:
        spec.metrics.port = args.metrics_port
    return run


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # A SIGTERM before the run listens for it (torch's import, the model's load) is kept for the
    # run to see, not left to kill the process: it then stops before its first step (exit 143).
    early: list[int] = []
    if args.command in ("run", "evaluate"):
        signal.signal(signal.SIGTERM, lambda sig, _frame: early.append(sig))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the bar
    if args.command in ("record", "export-successes"):
        return _demonstrations(args)
    if args.command == "export-merged":
        return _export_merged(args)
    try:
        run = load_run(args)
    except ConfigError as err:
        print(f"error: {describe(err)}", file=sys.stderr)
        return 2
    if args.command == "validate":
        print(json.dumps(run.spec.model_dump(by_alias=True, exclude_none=True), indent=2))
        return 0
    # torch is imported only when running
    from kubecua_trainer.run.saver import run_dirs
    from kubecua_trainer.run.train import RunOptions, train
    from kubecua_trainer.speedups.cpu_threads import limit_cpu_threads
    from kubecua_trainer.warmup.goal import WarmupBelowGoal

    # A pod's log is what kubectl logs shows, so there the records stay on the terminal too.
    in_cluster = bool(getattr(args, "trainingrun", None))
    quiet = not args.no_progress and not in_cluster
    with log_to_file(run_dirs(run.spec)[0], console=quiet) as log_file:
        if args.command == "run" and os.environ.get("RANK", "0") == "0":
            print(
                f"run {run.name}: seed {run.spec.seed} (--seed N: the same recipe with another);"
                f" log {log_file}",
                file=sys.stderr,
                flush=True,
            )
        limit_cpu_threads()
        opts = RunOptions(
            console=not args.no_progress,
            metrics_addr=getattr(args, "metrics_addr", None)
            or ("0.0.0.0" if in_cluster else "127.0.0.1"),
            patch_status=in_cluster,
            handle_signals=True,
            signals_seen=early,
            reclaim=args.command != "evaluate",
        )
        try:
            result = asyncio.run(train(run, opts))
        except ConfigError as err:
            print(f"error: {describe(err)}", file=sys.stderr)
            return 2
        except (FileNotFoundError, TimeoutError, WarmupBelowGoal) as err:
            # a missing model or launcher, sandboxes that never came, a warm-up that did not take
            print(f"error: {describe(err)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted; the next run resumes from the latest checkpoint", file=sys.stderr)
            return 130
    code = 0 if result.stopped_at is None else stopped_exit_code()
    if not result.main:  # rank 0 prints the run's summary
        return code
    if result.stopped_at is not None:
        print(f"stopped by SIGTERM after step {result.stopped_at}; resume from the checkpoint")
    elif args.command == "evaluate":
        standalone.print_results(result.out_dir, figures=args.no_progress)
        return code
    else:
        print(f"done: {len(result.history)} steps; outcomes {dict(result.outcomes)}")
    print(f"report: {result.report}")
    print(f"curves: {result.curves}")
    print(f"last checkpoint: {result.last_checkpoint}")
    return code
