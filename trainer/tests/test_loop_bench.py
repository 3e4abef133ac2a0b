"""The whole-loop benchmark's pieces on the CPU: the replayed-desktop stand-in plays a recorded
episode byte for byte (through the trainer's own sandbox client), and the loop bench's smoke run
gives sane figures (bench/loop_bench.py, bench/replay_desktop.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_distributed_learner import TRAINER_DIR

from bench import loop_bench, loop_scaling
from bench.replay_desktop import ReplaySandbox, load_recording
from kubecua_sandbox_client import SandboxClient


def test_replayed_desktop_plays_a_recorded_episode_byte_for_byte() -> None:
    recording = load_recording()
    ep = recording[0]
    assert ep.screens[0][:8] == b"\x89PNG\r\n\x1a\n"
    assert len(ep.step_seconds) >= 2

    async def play(sandbox: ReplaySandbox) -> tuple[list[bytes], float, list[float]]:
        async with SandboxClient(sandbox.url, token="t") as client:
            t0 = time.monotonic()
            started = await client.start_episode({"id": "x", "instruction": "i", "config": []})
            start_s = time.monotonic() - t0
            shots = [base64.b64decode(started.observation.screenshot)]
            waits = []
            for _ in ep.step_seconds:
                t0 = time.monotonic()
                res = await client.step(started.episode_id, "WAIT")
                waits.append(time.monotonic() - t0)
                shots.append(base64.b64decode(res.observation.screenshot))
            score = (await client.evaluate(started.episode_id)).score
            await client.release(started.episode_id)
            assert score == ep.reward  # the first episode a sandbox of index 0 starts
            return shots, start_s, waits

    with ReplaySandbox(recording, "t", latency_scale=0.1) as sandbox:
        shots, start_s, waits = asyncio.run(play(sandbox))
    assert shots == ep.screens  # every screenshot, byte for byte, in the recorded order
    assert sandbox.served == ep.screens
    assert start_s >= 0.1 * ep.start_seconds
    for got, recorded in zip(waits, ep.step_seconds, strict=True):
        assert got >= 0.1 * recorded  # at least the (scaled) recorded latency


def test_loop_bench_smoke_gives_sane_figures(tmp_path) -> None:
    doc = loop_bench.main(["--smoke", "--out", str(tmp_path / "loop.json")])
    assert doc["smoke"] is True
    assert "smoke run" in doc["note"]
    assert set(doc["modes"]) == {"sync", "staleness_1"}
    for name, mode in doc["modes"].items():
        assert mode["trajectories"] == doc["workload"]["group_size"], name
        for value in (mode["trajectories_per_minute"], mode["wall_seconds"],
                      mode["generation"]["prefill_tokens_per_second"],
                      mode["generation"]["decode_tokens_per_second"],
                      mode["learner"]["tokens_per_second"]):  # fmt: skip
            assert value > 0, (name, mode)
        learner = mode["learner"]
        # forward+backward alone is the step less its optimizer: never slower than the step
        assert learner["fwd_bwd_tokens_per_second"] >= learner["tokens_per_second"], name
        # every sample holds at least one screenshot, at most one a turn
        assert 1 <= learner["images_per_sample"] <= doc["workload"]["turns"], (name, learner)
        split = mode["gpu_time"]
        assert set(split) == {"generating", "learning", "both", "idle"}
        assert all(0.0 <= v <= 1.0 for v in split.values())
        assert sum(split.values()) == pytest.approx(1.0, abs=1e-3)
        assert split["generating"] + split["both"] > 0
        assert split["learning"] + split["both"] > 0
    assert doc["modes"]["staleness_1"]["max_staleness"] == 1


def test_time_split_example() -> None:
    split = loop_bench.time_split([(0, 6)], [(4, 8)], 0, 10)
    assert split == {"generating": 0.4, "learning": 0.2, "both": 0.2, "idle": 0.2}


def test_loop_bench_under_torchrun_at_world_two_gives_figures_for_both_gpus(
    tmp_path: Path,
) -> None:
    """`make bench-loop LOOP_WORLDS=2`'s wiring on the CPU (gloo; the colocated mode, one step;
    100 s on the loaded 2-core machine, most of it two processes importing and building):
    two processes, the step grown to both, each with its own stand-in desktops; rank 0 alone
    writes the figures, and the driver prints the scaling summary from them."""
    cmd = [sys.executable, "-m", "bench.loop_scaling", "--worlds", "2", "--modes", "sync",
           "--out-dir", str(tmp_path), "--", "--smoke", "--steps", "1"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=TRAINER_DIR, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    doc = json.loads((tmp_path / "world-2-sync.json").read_text())
    assert doc["world"] == 2
    assert doc["workload"]["tasks_per_step"] == 2  # one task a GPU
    sync = doc["modes"]["sync"]
    assert sync["placement"] == "colocated"
    assert sync["trajectories"] == 2 * doc["workload"]["group_size"]  # both GPUs' episodes
    assert sync["trajectories_per_minute"] > 0
    assert sync["learner"]["tokens_per_second"] > 0
    assert sync["generation"]["decode_tokens"] > 0  # rank 0 generated its share
    summary = json.loads(proc.stdout)
    assert summary["worlds"] == [2]
    assert (
        summary["modes"]["sync"]["2"]["trajectories_per_minute"] == sync["trajectories_per_minute"]
    )


def test_loop_scaling_example() -> None:
    one = {"device": "cpu", "world": 1, "modes": {"sync": {"trajectories_per_minute": 60.0}}}
    rates = {"sync": 114.0, "disaggregated": 171.0}
    modes = {m: {"trajectories_per_minute": r} for m, r in rates.items()}
    two = {"device": "cpu", "world": 2, "modes": modes}
    got = loop_scaling.scaling([one, two])
    assert got["modes"]["sync"]["2"] == {
        "trajectories_per_minute": 114.0,
        "per_gpu_efficiency": 0.95,
    }
    assert got["modes"]["sync"]["1"]["per_gpu_efficiency"] == 1.0
    assert got["disaggregated_vs_colocated_sync"] == {"2": 1.5}
    with pytest.raises(SystemExit, match="different cards"):
        loop_scaling.scaling([one, {**two, "device": "NVIDIA H100"}])
    # world 1 in one launch (no disaggregated there), then one launch a mode
    assert loop_scaling.launches([1, 2], ["sync", "disaggregated"]) == [
        (1, ["sync"], "world-1.json"),
        (2, ["sync"], "world-2-sync.json"),
        (2, ["disaggregated"], "world-2-disaggregated.json"),
    ]


def test_the_bench_sample_takes_the_loops_length_without_more_loss_tokens() -> None:
    """The in-loop/bench comparison runs the bench on samples as long as the loop's: the extra
    length is earlier turns' text, which carries no loss."""
    from bench.shapes import build_model, synthetic_sample

    model = build_model("tiny_qwen2_5_vl", "cpu")
    plain = synthetic_sample(model, 1, 112, 112)
    long = synthetic_sample(model, 1, 112, 112, length=500)
    assert long.input_ids.numel() == 500
    assert int(long.loss_mask.sum()) == int(plain.loss_mask.sum())
    assert torch.equal(long.image_grid_thw, plain.image_grid_thw)
    # shorter than one turn already is: the sample is left as it is
    assert (
        synthetic_sample(model, 1, 112, 112, length=10).input_ids.numel() == plain.input_ids.numel()
    )


def test_the_adaptive_mode_moves_the_bound_between_steps(monkeypatch) -> None:
    """bench-loop's staleness_1_adaptive: the training loop tells the share, at each step whose
    rollouts it launched ahead, whether they were done; the bound it reports stays within its
    range, and the shared default is back after the mode."""
    from kubecua_trainer.parallel import gpu_share

    told: list[bool] = []
    adapt = gpu_share.GpuShare.adapt

    def spy(self: gpu_share.GpuShare, rollouts_ready: bool) -> None:
        told.append(rollouts_ready)
        adapt(self, rollouts_ready)

    monkeypatch.setattr(gpu_share.GpuShare, "adapt", spy)
    doc = loop_bench.main(["--smoke", "--modes", "staleness_1_adaptive", "--steps", "4"])
    assert len(told) == 3, told  # steps 2-4 were launched ahead
    assert all(isinstance(r, bool) for r in told)
    bounds = doc["modes"]["staleness_1_adaptive"]["learner"]["yield_bound_seconds"]
    assert bounds, doc["modes"]
    assert all(gpu_share.MIN_YIELD_SECONDS <= b <= gpu_share.MAX_YIELD_SECONDS for b in bounds)
    # halvings and doublings of 1 s only
    assert all(math.log2(b).is_integer() or b == gpu_share.MIN_YIELD_SECONDS for b in bounds)
    assert gpu_share.ADAPTIVE_YIELD is False
