"""The whole-loop benchmark's pieces on the CPU: the replayed-desktop stand-in plays a recorded
episode byte for byte (through the trainer's own sandbox client), and the loop bench's smoke run
gives sane figures (bench/loop_bench.py, bench/replay_desktop.py)."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from bench import loop_bench
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
