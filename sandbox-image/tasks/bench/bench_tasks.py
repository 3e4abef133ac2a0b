"""Verification throughput on local desktops: `make bench-tasks` (BENCH_ARGS="--desktops 1 2 4
8 --per-desktop 3").

For each desktop count N: start N local desktops (not timed), then verify 3N tasks of the
offline suite's files area (reference, no-op and wrong, twice each: 6 episodes a task) with
`kubecua tasks verify`'s engine, and time it. Prints one JSON document: per N the seconds, tasks
verified a minute, episodes a second, and the per-desktop efficiency, throughput(N) /
(N x throughput(1)); and whether every verdict was `verified` (the files tasks are known good).
The work grows with N so each desktop has the same share; the files tasks are the suite's
cheapest (no app starts), so the figure is the verifier's and the desktops' overhead, not an
application's start-up. Run on a shared machine, figures vary with its load (record uptime)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kubecua_tasks.builtin import TASKS_DIR
from kubecua_tasks.desktops import local_desktops
from kubecua_tasks.verify import verify


def _folder(count: int) -> Path:
    tasks = sorted(
        p for p in (TASKS_DIR / "files").glob("*.json") if not p.name.endswith(".solutions.json")
    )
    tasks = [p for p in tasks if "infeasible" not in p.name][:count]
    if len(tasks) < count:
        raise SystemExit(f"only {len(tasks)} files tasks: ask for fewer per desktop")
    out = Path(tempfile.mkdtemp(prefix="kubecua-bench-tasks-"))
    for p in tasks:
        for f in (p, p.with_name(p.stem + ".solutions.json")):
            shutil.copy(f, out / f.name)
    return out


async def _one(n: int, per_desktop: int, repeats: int) -> dict[str, Any]:
    folder = _folder(n * per_desktop)
    try:
        async with local_desktops(n) as (urls, token):
            t0 = time.monotonic()
            manifest = await verify(folder, urls, token, repeats)
            seconds = time.monotonic() - t0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    episodes = sum(len(t.episodes) for t in manifest.tasks)
    return {
        "desktops": n,
        "tasks": len(manifest.tasks),
        "episodes": episodes,
        "seconds": round(seconds, 1),
        "tasks_per_minute": round(60 * len(manifest.tasks) / seconds, 2),
        "episodes_per_second": round(episodes / seconds, 3),
        "verdicts": dict(manifest.summary),
        "all_verified": all(t.verdict == "verified" for t in manifest.tasks),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--desktops", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--per-desktop", type=int, default=3, help="tasks per desktop")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    runs = [asyncio.run(_one(n, args.per_desktop, args.repeats)) for n in args.desktops]
    base = next((r for r in runs if r["desktops"] == 1), None)
    for r in runs:
        if base is not None:
            per = r["tasks_per_minute"] / (r["desktops"] * base["tasks_per_minute"])
            r["per_desktop_efficiency"] = round(per, 3)
    load = os.getloadavg()
    print(json.dumps({"benchmark": "tasks-verify", "cpus": os.cpu_count(),
                      "loadavg_1m_at_end": round(load[0], 2), "runs": runs}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
