"""The robustness sweep's pieces (bench/learning/robustness.py): the recipe it reads from a
TrainingRun spec, one run's paired verdict, the core budget it keeps, and a rate that counts
what was asked. The offline runs themselves are bench.learning.offline's (no run here)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.learning import offline, robustness


def flags(argv: list[str]) -> dict[str, str]:
    """--flag value pairs (bare flags map to "")."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[a] = "" if nxt.startswith("--") else nxt
    return out


def test_the_demo_recipe_is_read_from_make_demos_own_spec() -> None:
    fam, argv = robustness.recipes()["demo"]
    f = flags(argv)
    assert fam.name == "colourkeys-demo"
    # examples/trainingrun-local.yaml: 8 steps of 4 x 8 at 4e-4, a 90-epoch warm-up at 1e-3,
    # half the partial credit; a fixed-length warm-up is one chunk that cannot stop early
    assert (f["--steps"], f["--tasks"], f["--group"]) == ("8", "4", "8")
    assert float(f["--lr"]) == 4e-4
    assert float(f["--warmup-lr"]) == 1e-3
    assert f["--max-epochs"] == f["--check-every"] == "90"
    assert float(f["--pass1-min"]) > 1
    assert float(f["--partial-weight"]) == 0.5


def test_a_stopping_rule_becomes_the_offline_checks() -> None:
    spec: dict[str, Any] = {
        "steps": 3,
        "warmup": {
            "epochs": 60,
            "learningRate": 3e-4,
            "stopWhen": {
                "everyEpochs": 45,
                "tasks": 16,
                "k": 8,
                "passAtKMin": 0.7,
                "greedyPassMax": 0.5,
            },
        },
        "algorithm": {"tasksPerStep": 4, "groupSize": 8, "learningRate": 3e-4, "miniBatches": 2},
        "reward": {"score": 2.0, "partial": 0.5},
    }
    f = flags(robustness.offline_args(spec))
    assert f["--mini-batches"] == "2"
    assert (f["--check-every"], f["--max-epochs"], f["--probe"], f["--k"]) == (
        "45",
        "60",
        "16",
        "8",
    )
    assert float(f["--passk-min"]) == 0.7
    assert float(f["--pass1-max"]) == 0.5
    assert float(f["--partial-weight"]) == 0.25  # partial relative to the score's weight


def run_doc(seed: int, start: list[float], grpo: list[float]) -> dict[str, Any]:
    return {
        "seed": seed,
        "heldout_outcomes": {"start": start, "grpo": grpo},
        "heldout_start": sum(start) / len(start),
        "heldout_grpo": sum(grpo) / len(grpo),
        "warmup_checks": [{"epochs": 90}],
        "warmup_seconds": 1.0,
        "grpo_seconds": 1.0,
    }


def test_the_verdict_is_mcnemar_on_the_same_instances() -> None:
    # 10 up, 0 down: p = 2 / 2**10 < 0.01
    v = robustness.verdict(run_doc(0, [0.0] * 30, [1.0] * 10 + [0.0] * 20), 0.01)
    assert (v["up"], v["down"], v["start"], v["grpo"]) == (10, 0, "0/30", "10/30")
    assert v["p"] == pytest.approx(2 / 2**10)
    assert v["outside_noise"]
    # as many down as up is no rise, whatever p says
    v = robustness.verdict(run_doc(1, [1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5), 0.01)
    assert (v["up"], v["down"], v["outside_noise"]) == (5, 5, False)
    # 7 up, 0 down: p = 0.0156, within the noise at 0.01
    v = robustness.verdict(run_doc(2, [0.0] * 30, [1.0] * 7 + [0.0] * 23), 0.01)
    assert not v["outside_noise"]


def sweep_args(tmp_path: Path, **kw: Any) -> argparse.Namespace:
    base = {"out": str(tmp_path), "cores": 4, "seeds": [0, 1, 2], "threads": [1, 2],
            "alpha": 0.01, "python": "python3", "warm_dir": ""}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_runs_share_the_cores_and_the_rate_counts_every_run_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, peak, warm_dirs = [0], [0], set()

    async def fake_run(py: str, model: Path, fam: Path, fl: list[str], seed: int, threads: int,
                       out: Path, warm_dir: str = "") -> dict[str, Any]:  # fmt: skip
        warm_dirs.add(warm_dir)
        live[0] += threads
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.01)
        live[0] -= threads
        if seed == 2 and threads == 2:
            return {"seed": seed, "threads": threads, "error": "exited 1"}
        return {
            "threads": threads,
            **run_doc(seed, [0.0] * 30, [1.0] * (10 + seed) + [0.0] * (20 - seed)),
        }

    monkeypatch.setattr(robustness, "one", fake_run)
    fam = robustness.recipes()["demo"][0]
    args = sweep_args(tmp_path, warm_dir="/w")
    res = asyncio.run(robustness.sweep("demo", Path("/m"), fam, [], args))
    assert warm_dirs == {"/w"}
    assert peak[0] == 4  # full, never over: a two-thread run takes both its cores at once
    assert res["rate"] == "5/6"
    assert res["runs_asked"] == 6
    assert not res["goal_met"]
    assert res["per_threads"] == {"1": "3/3", "2": "2/3"}
    assert [r["error"] for r in res["failed_runs"]] == ["exited 1"]
    assert res["worst"]["seed"] == 0
    assert res["worst"]["up"] == 10


def test_a_read_only_summary_runs_nothing_and_counts_missing_runs_as_failed(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    doc = run_doc(0, [0.0] * 30, [1.0] * 30)
    (out / "seed0-t1.json").write_text(json.dumps({"runs": [doc]}))
    fam = robustness.recipes()["demo"][0]
    args = sweep_args(tmp_path, seeds=[0, 1], threads=[1], python="")
    res = asyncio.run(robustness.sweep("demo", Path("/m"), fam, [], args))
    assert res["rate"] == "1/2"
    assert res["failed_runs"][0]["error"].startswith("not run")


def test_family_plays_the_bench_recipe_on_another_family(tmp_path: Path) -> None:
    """--family swaps the bench recipe's family, as bench-learning's --family does; a folder
    without family.json is refused naming it."""
    other = robustness.recipes()["demo"][0]  # colourkeys-demo: not the bench's own family
    assert other != robustness.recipes()["bench"][0]
    common = ["--recipes", "bench", "--read-only", "--seeds", "0", "--threads", "1"]
    robustness.main(
        [*common, "--family", str(other), "--model", "bench=/m", "--out", str(tmp_path)]
    )
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["bench"]["family"] == "sandbox-image/tasks/colourkeys-demo"
    assert doc["bench"]["rate"] == "0/1"  # nothing was run: the run asked for counts as failed
    with pytest.raises(SystemExit, match=r"--family .*nowhere: no family\.json"):
        robustness.main([*common, "--family", str(tmp_path / "nowhere"), "--out", str(tmp_path)])


def test_a_run_gets_its_threads_and_its_float_orders_warm_up_folder(tmp_path: Path) -> None:
    """one() starts bench.learning.offline with the thread count in its environment and, with
    --warm-dir, a warm-up folder per thread count (warm-ups differ by float order)."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$OMP_NUM_THREADS" "$@" > "$(dirname "$0")/argv.txt"\n'
        'while [ "$1" != "--json" ]; do shift; done\n'
        f"echo '{json.dumps({'runs': [run_doc(3, [0.0] * 30, [1.0] * 30)]})}' > \"$2\"\n"
    )
    fake.chmod(0o755)
    run = asyncio.run(
        robustness.one(str(fake), Path("/m"), Path("/f"), ["--steps", "8"], 3, 2, tmp_path, "/w")
    )
    assert (run["seed"], run["threads"]) == (3, 2)
    argv = (tmp_path / "argv.txt").read_text().split("\n")
    assert argv[0] == "2"  # OMP_NUM_THREADS
    assert argv[argv.index("--warm-dir") + 1] == "/w/t2"
    assert argv[argv.index("--threads") + 1] == "2"


class _Epochs:
    """A warm-up that only counts its epochs: fit_in_chunks decides how many, nothing else."""

    def __init__(self, epochs: int = 0) -> None:
        self.epochs = epochs
        self.chunks: list[int] = []

    def run(self, epochs: int) -> None:
        self.chunks.append(epochs)
        self.epochs += epochs


def _chunks(epochs: int, max_epochs: int, every: int, verdicts: list[bool],
            checks: list[dict[str, Any]] | None = None) -> tuple[list[int], list[int]]:  # fmt: skip
    warm, checks, said = _Epochs(epochs), checks or [], iter(verdicts)

    async def check(at: int) -> dict[str, Any]:
        return {"epochs": at, "stop": next(said)}

    asyncio.run(offline.fit_in_chunks(warm, checks, max_epochs, every, check, lambda c: c["stop"]))
    return warm.chunks, [c["epochs"] for c in checks]


def test_the_offline_warm_up_chunks_as_the_trainer_does() -> None:
    # the bench's rule (every 45, at most 60), a check that says go on: 45 then 15, and no
    # check after the last chunk (before, offline trained 45 more: 90 epochs)
    assert _chunks(0, 60, 45, [False]) == ([45, 15], [45])
    # a check that says stop ends it there
    assert _chunks(0, 60, 45, [True]) == ([45], [45])
    # a fixed length (the demo: one chunk of all its epochs): trained, never checked
    assert _chunks(0, 90, 90, []) == ([90], [])
    # several checks, the third says stop
    assert _chunks(0, 100, 20, [False, False, True]) == ([20, 20, 20], [20, 40, 60])
    # a loaded warm-up whose last check said stop trains nothing more; one that said go on
    # goes on from where it was
    assert _chunks(45, 60, 45, [], [{"epochs": 45, "stop": True}]) == ([], [45])
    assert _chunks(45, 60, 45, [], [{"epochs": 45, "stop": False}]) == ([15], [45])
