"""Prometheus metrics: names with the kubecua_trainer_ prefix, base units, values from episodes."""

from __future__ import annotations

import socket

import httpx
from PIL import Image
from prometheus_client import generate_latest

from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.telemetry.metrics import TrainerMetrics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_served_with_values_from_episodes_and_steps() -> None:
    m = TrainerMetrics()
    ok = EpisodeResult("t", "g", "e0")
    ok.turns = [Turn(Image.new("RGB", (8, 8)), "x", "WAIT", gen_tokens=10, env_seconds=0.3)] * 3
    ok.seconds = 4.0
    ok.score(1.0)
    lost = EpisodeResult("t", "g", "e1")
    lost.fail("sandbox_lost", "502")
    m.observe_episode(ok)
    m.observe_episode(lost)
    m.observe_step(
        {
            "reward_mean": 0.5,
            "success_rate": 0.25,
            "kl": 0.01,
            "grad_norm": 2.0,
            "seconds": 1.5,
            "not_a_metric": 7.0,
        }
    )
    m.replay_injections.inc(2)
    port = free_port()
    m.serve(port)
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    expect = [
        'kubecua_trainer_episodes_total{outcome="success"} 1.0',
        'kubecua_trainer_episodes_total{outcome="sandbox_lost"} 1.0',
        "kubecua_trainer_reward_mean 0.5",
        "kubecua_trainer_success_rate 0.25",
        "kubecua_trainer_kl 0.01",
        "kubecua_trainer_grad_norm 2.0",
        "kubecua_trainer_generated_tokens_total 30.0",
        "kubecua_trainer_env_step_duration_seconds_count 3.0",
        "kubecua_trainer_episode_turns_sum 3.0",
        "kubecua_trainer_learner_step_duration_seconds_sum 1.5",
        "kubecua_trainer_replay_injections_total 2.0",
    ]
    for line in expect:
        assert line in text, line
    assert "not_a_metric" not in text
    names = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and ln[0] != "#"}
    assert all(n.startswith("kubecua_trainer_") for n in names)


def test_checkpoint_timestamp_is_absent_until_the_first_checkpoint_then_tracks_the_newest() -> None:
    name = "kubecua_trainer_last_checkpoint_timestamp_seconds"
    m = TrainerMetrics()
    assert name not in generate_latest(m.registry).decode()  # a 0 would read as 56 years old
    m.checkpoint_written(1_700_000_000.5)
    m.checkpoint_written(1_700_000_090.25)
    lines = [x for x in generate_latest(m.registry).decode().splitlines() if x.startswith(name)]
    assert lines == [f"{name} 1.70000009025e+09"]
