"""The loop on several GPUs (issue 31 item 5): `make bench-loop LOOP_WORLDS="1 2 4"`.

Runs bench/loop_bench.py under torchrun for each world (one process a GPU; the step grows with
the world, so the work per GPU is the same), one launch per mode at a world of 2 or more (a mode
is a whole run, and a second run in the same processes hung once on gloo), world 1 in one launch
as before; each launch writes <out-dir>/world-<w>[-<mode>].json. Then it prints, per mode,
trajectories/min and the per-GPU loop efficiency: trajectories/min at world w over w times
world 1's (1.0 is perfect scaling; issue 31's goal is 0.9 at world 4, colocated). And, at each
world of 2 or more, the disaggregated placement's trajectories/min over colocated sync's (the
goal: 1.5x). Figures from different cards do not compare: the files' devices must agree.

Run (from trainer/): `python -m bench.loop_scaling --worlds 1 2 4 --modes sync,disaggregated
--out-dir ../out/bench-loop -- <loop_bench's arguments>`. --time-limit bounds all the launches
(one that runs past it is stopped with its workers, and the files already written stay);
--model-dir builds the model once for every launch. A failed launch does not stop the others:
scaling.json lists it under "failed" and the exit status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def scaling(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Example: sync at 60/min on world 1 and 114/min on world 2 -> efficiency 0.95 at 2."""
    devices = {d["device"] for d in docs}
    if len(devices) > 1:
        raise SystemExit(
            f"the files come from different cards {sorted(devices)}: rerun in one call"
        )
    rate: dict[int, dict[str, float]] = {}
    for d in docs:  # one world may come in several files (one a mode)
        for mode, figures in d["modes"].items():
            rate.setdefault(int(d.get("world", 1)), {})[mode] = figures["trajectories_per_minute"]
    out: dict[str, Any] = {"device": devices.pop(), "worlds": sorted(rate), "modes": {}}
    for mode in sorted({m for r in rate.values() for m in r}):
        row: dict[str, Any] = {}
        for w in sorted(rate):
            if mode not in rate[w]:
                continue
            entry = {"trajectories_per_minute": rate[w][mode]}
            base = rate.get(1, {}).get(mode)
            if base:
                entry["per_gpu_efficiency"] = round(rate[w][mode] / (w * base), 3)
            row[str(w)] = entry
        out["modes"][mode] = row
    out["disaggregated_vs_colocated_sync"] = {
        str(w): round(r["disaggregated"] / r["sync"], 3)
        for w, r in sorted(rate.items())
        if r.get("disaggregated") and r.get("sync")
    }
    return out


def launches(worlds: list[int], modes: list[str]) -> list[tuple[int, list[str], str]]:
    """(world, modes, file name) of each torchrun launch. Example: worlds [1, 2], modes sync and
    disaggregated -> (1, [sync], world-1.json), (2, [sync], ...), (2, [disaggregated], ...)."""
    out = []
    for w in worlds:
        mine = [m for m in modes if w > 1 or m != "disaggregated"]
        if w == 1 and mine:
            out.append((1, mine, "world-1.json"))
        elif w > 1:
            out += [(w, [m], f"world-{w}-{m}.json") for m in mine]
    return out


def merge_generator(out: Path) -> None:
    """Folds the first generator's figures (loop_bench.write_generator_figures) into the launch's
    file, as "generator" of each disaggregated mode: its engine's counters and the share of rank
    0's measured window it spent generating (the rest: waiting for desktops or weights)."""
    from bench.loop_bench import generator_file, time_split

    side = generator_file(str(out))
    if not side.exists():
        return
    gen = json.loads(side.read_text())
    if out.exists():
        doc = json.loads(out.read_text())
        for figures in doc.get("modes", {}).values():
            if figures.get("placement") == "disaggregated" and figures.get("window"):
                lo, hi = figures["window"]
                split = time_split([tuple(x) for x in gen["busy_intervals"]], [], lo, hi)
                busy = {"busy": split["generating"], "idle": split["idle"]}
                figures["generator"] = {"rank": gen["rank"], **gen["generation"], **busy}
        out.write_text(json.dumps(doc, indent=1) + "\n")
    side.unlink()  # the calls bring back 8 files at most


def stale(modes: list[str]) -> bool:
    """Every mode plays ahead of its learner (rollout.maxStaleness > 0: staleness_1,
    disaggregated)."""
    from bench.loop_bench import MODES

    return all(MODES[m][0] > 0 for m in modes)


def launch_env(world: int) -> dict[str, str]:
    """The launch's environment. torchrun gives each of several processes OMP_NUM_THREADS=1 when
    it is unset, which would leave the learner's host AdamW update (speedups/optimizer.py: the
    caller's torch threads) and the screenshots' resizing one core at world 2+ against all of
    them at world 1; so each process gets its share of this process's cores."""
    env = dict(os.environ)
    if world > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // world))
    return env


def run_launch(cmd: list[str], env: dict[str, str], seconds: float | None) -> str | None:
    """Runs one torchrun launch in its own process group; None when it exits 0, else what went
    wrong. At the time limit the whole group goes (torchrun and its workers: killing torchrun
    alone would leave the workers holding their GPUs)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return f"stopped at its time limit ({seconds:.0f} s)"
    except BaseException:  # SIGTERM (below) or ^C: the launch's workers go too
        stop_group(proc)
        raise
    return None if rc == 0 else f"exit status {rc}"


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--modes", default="sync,staleness_1,disaggregated")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument(
        "--time-limit",
        type=float,
        help="seconds for all the launches: each gets what is left, and a launch past it is "
        "stopped and reported while the files of those done stay",
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        help="build the model here once (or reuse it) for every launch and process",
    )
    p.add_argument(
        "--stale-steps",
        type=int,
        help="--steps for the launches whose modes all have maxStaleness > 0 (loop_bench's "
        "steady window needs 4 at maxStaleness 1; sync needs 2)",
    )
    p.add_argument("bench_args", nargs="*", help="after --: bench/loop_bench.py's own arguments")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)  # an outer `timeout` stops the launch's workers
    a.out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + a.time_limit if a.time_limit else None
    bench_args = list(a.bench_args)
    if a.model_dir and not (a.model_dir / ".built").exists():  # loop_bench.reuse_model's mark
        build = [sys.executable, "-m", "bench.loop_bench", "--build-model",
                 "--model-dir", str(a.model_dir), *bench_args]  # fmt: skip
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
    if a.model_dir:
        bench_args += ["--model-dir", str(a.model_dir)]
    docs, failed = [], []
    for w, modes, name in launches(a.worlds, a.modes.split(",")):
        out = a.out_dir / name
        steps = ["--steps", str(a.stale_steps)] if a.stale_steps and stale(modes) else []
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(w), "-m", "bench.loop_bench", "--modes", ",".join(modes),
               "--out", str(out), *bench_args, *steps]  # fmt: skip
        left = deadline - time.monotonic() if deadline is not None else None
        if left is not None and left < 30:
            failed.append({"world": w, "modes": modes, "error": "not started: no time left"})
            continue
        print(f"world {w}, {','.join(modes)}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        began = time.monotonic()
        error = run_launch(cmd, launch_env(w), left)  # the JSON goes to `out`
        print(f"world {w}, {','.join(modes)}: {error or 'done'} after "
              f"{time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
        merge_generator(out)
        if out.exists():  # also a stopped launch's finished modes (loop_bench writes each)
            doc = json.loads(out.read_text())
            if doc.get("modes"):
                docs.append(doc)
        if error:
            failed.append({"world": w, "modes": modes, "error": error})
    result = scaling(docs) if docs else {"worlds": [], "modes": {}}
    result["failed"] = failed
    (a.out_dir / "scaling.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if failed:
        raise SystemExit(f"{len(failed)} launch(es) failed: {failed}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
