"""Every `make bench-*` target runs to completion as a user runs it, in a small smoke mode, and
prints figures that make sense: the numbers a benchmark exists to measure are there, positive and
finite, and the exactness checks it carries hold. The figures themselves mean nothing at these
sizes (and on a loaded CI machine); docs/benchmarks.md has the real runs.

A benchmark that crashes part-way (as bench-operator's watcher once did after its scale-out) or
that stops printing a figure fails here, not in front of a user.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from kubecua_testkit.tools import REPO

# Whole benchmarks, set-up included (a torchrun start, desktops, a kwok cluster). On a quiet
# machine the slowest (bench-learning) takes about 5 min; under heavy load several times that.
LIMIT_SECONDS = 1500
pytestmark = pytest.mark.timeout(LIMIT_SECONDS + 120)


def last_json(stdout: str) -> dict[str, Any]:
    """The last JSON object the benchmark printed (one per line, or pretty-printed from a line
    that starts with "{"): progress and per-case lines come before it."""
    decoder, found = json.JSONDecoder(), None
    lines = stdout.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for start, line in zip(offsets, lines, strict=False):
        if line.startswith("{"):
            try:
                value, _ = decoder.raw_decode(stdout, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found = value
    assert found is not None, f"no JSON object in the output:\n{stdout[-2000:]}"
    return found


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def check_desktop(r: dict[str, Any]) -> None:
    assert (r["width"], r["height"], r["repeat"]) == (1920, 1080, 3)
    assert r["capture_uses_mit_shm"] is True
    for key in ("capture_ms", "encode_png_ms", "http_screenshot_png_ms", "http_screenshot_jpeg_ms"):
        assert positive(r[key]), key
    assert r["encode_png_bytes"] > 1000  # a real 1080p desktop, not an empty buffer


def check_sandbox(r: dict[str, Any]) -> None:
    assert r["n"] == 3
    for key in ("step_overhead_1920x1080_seconds", "reset_seconds", "container_cold_start_seconds"):
        assert positive(r[key]["p50"]), key
        assert r[key]["p95"] >= r[key]["p50"], key
    # The OSWorld anchor includes its fixed 2 s pause: ours must come out below it.
    assert (
        r["step_overhead_1920x1080_seconds"]["p50"]
        < r["osworld_anchor_step_seconds_excl_action"]["p50"]
    )


def check_operator(r: dict[str, Any]) -> None:
    assert r["replicas"] == 20
    assert positive(r["scale_seconds"])
    assert positive(r["api_requests"])
    # The discovery figures come after the scale-out: their presence is the point (the watcher
    # once died there and they were never printed).
    assert r["discovery_samples"] > 0
    assert positive(r["discovery_p50_ms"])
    assert r["discovery_p99_ms"] >= r["discovery_p50_ms"]


def check_trainer(r: dict[str, Any]) -> None:
    assert r["smoke"] is True
    assert "mean nothing" in r["note"]
    step = r["cases"]["step"]
    assert positive(step["tokens_per_second"])
    assert math.isfinite(step["loss"])
    assert positive(step["grad_norm"])
    assert positive(r["cases"]["naive_ckpt"]["tokens_per_second"])


def check_generation(r: dict[str, Any]) -> None:
    assert r["smoke"] is True
    for name in ("plain", "engine"):
        run = r[name]
        assert positive(run["tokens_per_second"]), name
        assert run["generated_tokens"] > 0, name
        # Behaviour log-probs stay exact against a full recompute.
        assert run["logprob_max_abs_diff"] < 1e-4, name
    assert r["engine"]["generated_tokens"] == r["plain"]["generated_tokens"]
    assert r["engine"]["reused_tokens"] > 0  # turn k reuses turn k-1's cache


def check_distributed(r: dict[str, Any]) -> None:
    assert "smoke" in r["device"]
    assert positive(r["refresh"][0]["seconds"])
    for name in ("plain", "fsdp2"):
        assert positive(r["learner"][name]["tokens_per_second_per_gpu"]), name


def check_rollouts(r: dict[str, Any]) -> None:
    for name in ("sync", "staleness_1"):
        run = r[name]
        assert run["steps"] == 2, name
        assert run["episodes"] > 0, name
        assert 0 < run["utilisation"] <= 1, name
    assert r["sync"]["staleness_max"] == 0


def check_learning(r: dict[str, Any]) -> None:
    assert r["heldout_untrained"]["episodes"] == 4
    (seed,) = r["seeds"]
    for stage in ("heldout_start", "heldout_end"):
        assert seed[stage]["episodes"] == 4, stage
        assert 0 <= seed[stage]["success"] <= 1, stage
    assert seed["train_episodes_per_step"] == [32]  # 4 tasks x groups of 8, one step
    assert r["recipe"]["warmup"]["epochs"] == 3
    # spec.warmup.stopWhen measured on real desktops once, after 2 epochs, on 2 training
    # instances (1 greedy + 2 sampled episodes each); none after the last chunk
    (check,) = seed["warmup_checks"]
    assert (check["epochs"], check["scored"] + check["excluded"]) == (2, 6)
    assert seed["warmup_epochs"] == (2 if check["verdict"] != "go on" else 3)
    (row,) = r["per_seed"]  # the three arms' figures side by side (no control in the smoke)
    assert 0 <= row["heldout_sft"] <= 1
    assert row["sft_more_epochs"] >= 1
    assert r["verdict"]["goal_reached"] is False  # one seed cannot meet a three-seed goal


def check_loop(r: dict[str, Any]) -> None:
    assert r["smoke"] is True
    for name in ("sync", "staleness_1"):
        mode = r["modes"][name]
        assert positive(mode["trajectories_per_minute"]), name
        assert positive(mode["generation"]["decode_tokens_per_second"]), name
        assert positive(mode["learner"]["tokens_per_second"]), name
        split = mode["gpu_time"]
        assert sum(split.values()) == pytest.approx(1.0, abs=0.01), name
    assert r["modes"]["sync"]["max_staleness"] == 0
    assert r["modes"]["staleness_1"]["max_staleness"] == 1


def check_vm(r: dict[str, Any]) -> None:
    assert r["cold_boot_to_ready_seconds"]["n"] == 1
    assert positive(r["cold_boot_to_ready_seconds"]["p50"])
    assert r["restore_to_ready_seconds"]["n"] == 3
    assert positive(r["restore_to_ready_seconds"]["p50"])
    assert positive(r["snapshot_seconds"])
    assert positive(r["idle_vm_pss_mib"])
    assert r["container_reset_seconds"]["n"] == 3


# target -> (BENCH_ARGS, check)
BENCHES: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "bench-desktop": ("--repeat 3", check_desktop),
    "bench-sandbox": ("--n 3 --cold-starts 1", check_sandbox),
    "bench-operator": ("--smoke", check_operator),
    "bench-trainer": ("", check_trainer),  # no GPU: its toy-width smoke
    "bench-generation": ("--smoke", check_generation),
    "bench-trainer-distributed": ("", check_distributed),
    "bench-trainer-rollouts": ("--steps 2", check_rollouts),
    "bench-learning": ("--smoke", check_learning),
    "bench-loop": ("--smoke", check_loop),
    "bench-vm": ("--boots 1 --restores 3", check_vm),
}


def run_bench(target: str, args: str, limit: float) -> subprocess.CompletedProcess[str]:
    """make TARGET in its own process group, killed whole when it overruns: a benchmark leaves
    desktops and child runs behind otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    cmd = ["make", "-s", "--no-print-directory", target, f"BENCH_ARGS={args}"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{target} {args} ran over {limit:.0f} s; its last output:\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("target", list(BENCHES))
def test_bench_runs_to_the_end_with_sane_figures(target: str) -> None:
    args, check = BENCHES[target]
    start = time.monotonic()
    proc = run_bench(target, args, LIMIT_SECONDS)
    took = time.monotonic() - start
    assert proc.returncode == 0, f"{target} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    check(last_json(proc.stdout))
    print(f"{target} {args}: {took:.0f} s")
