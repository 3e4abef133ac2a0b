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
--out-dir ../out/bench-loop -- <loop_bench's arguments>`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--modes", default="sync,staleness_1,disaggregated")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("bench_args", nargs="*", help="after --: bench/loop_bench.py's own arguments")
    a = p.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    docs = []
    for w, modes, name in launches(a.worlds, a.modes.split(",")):
        out = a.out_dir / name
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(w), "-m", "bench.loop_bench", "--modes", ",".join(modes),
               "--out", str(out), *a.bench_args]  # fmt: skip
        print(f"world {w}, {','.join(modes)}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # the JSON goes to `out`
        docs.append(json.loads(out.read_text()))
    result = scaling(docs)
    (a.out_dir / "scaling.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
