"""Cost accounting (cost.py): the figures per trajectory and per success, the ledger a resumed run
adds to, the GPUs a spec holds, status.cost and the run's cost gauges, and a spec with one price
refused naming spec.cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kubecua_api.cost import CostConfig
from kubecua_trainer.config import API_VERSION, KIND, ConfigError, parse_training_run
from kubecua_trainer.telemetry.cost import LEDGER, CostLedger, Spent, figures, gpus_held, publish
from kubecua_trainer.telemetry.metrics import TrainerMetrics
from kubecua_trainer.telemetry.status import build_cost_status

PRICES = CostConfig(price_per_sandbox_hour=0.25, price_per_gpu_hour=2.0)


def spec(**extra):
    body = {"model": {"path": "/m"}, "sandboxes": {"urls": ["http://a:8000"]},
            "tasks": {"path": "/t"}, "steps": 1, **extra}  # fmt: skip
    return parse_training_run({"apiVersion": API_VERSION, "kind": KIND, "spec": body}).spec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_figures_per_trajectory_and_per_success_with_money_at_both_prices() -> None:
    got = figures(Spent(600.0, 1800.0, 20, 4), PRICES)
    assert got["sandbox_seconds_per_trajectory"] == 30.0
    assert got["gpu_seconds_per_trajectory"] == 90.0
    assert (got["sandbox_seconds_per_success"], got["gpu_seconds_per_success"]) == (150.0, 450.0)
    assert got["cost"] == pytest.approx(600 / 3600 * 0.25 + 1800 / 3600 * 2.0)  # 1.0417
    assert got["cost_per_trajectory"] == pytest.approx(got["cost"] / 20)
    assert got["cost_per_success"] == pytest.approx(got["cost"] / 4)
    assert got["currency"] == "USD"


def test_without_prices_or_successes_only_defined_figures_appear() -> None:
    got = figures(Spent(60.0, 0.0, 3, 0), None)
    assert got["sandbox_seconds_per_trajectory"] == 20.0
    assert got["sandbox_seconds_per_success"] is None  # no success yet: undefined, not 0
    assert not {"cost", "currency"} & set(got)
    status = build_cost_status(got)
    assert status["sandboxSecondsPerTrajectory"] == 20.0
    assert status["sandboxSecondsPerSuccess"] is None  # null: a merge patch leaves it absent
    assert (status["total"], status["currency"]) == (None, None)


def test_gpus_held_counts_trainer_and_operator_run_sglang_servers() -> None:
    assert gpus_held(spec()) == 0  # CPU, embedded engine
    assert gpus_held(spec(trainer={"nodes": 2, "gpusPerNode": 4})) == 8
    sglang = {"engine": "sglang", "replicas": 2, "gpusPerReplica": 1}
    both = spec(trainer={"nodes": 2, "gpusPerNode": 4}, rollout=sglang,
                checkpoint={"volume": "ckpt"})  # fmt: skip
    assert gpus_held(both) == 10
    theirs = spec(rollout={"engine": "sglang", "sglangUrls": ["http://s:30000"]})
    assert gpus_held(theirs) == 0  # someone else's servers: not this run's GPUs


def test_ledger_counts_steps_leases_and_time_and_a_resumed_run_adds_to_it(tmp_path: Path) -> None:
    clock = Clock()
    s = spec(trainer={"gpusPerNode": 2}, cost={"pricePerSandboxHour": 0.5, "pricePerGpuHour": 3})
    ledger = CostLedger(tmp_path, s, clock)
    clock.now += 10.0
    step = ledger.step(["success", "failure", "setup_failed", "failure"], 8.0, 5.0, 9.0, 9.0)
    assert step["gpu_seconds"] == 10.0  # the step's 5 s x 2 GPUs
    assert step["sandbox_seconds_per_trajectory"] == 2.0  # its 8 s over 4 (excluded included)
    assert step["sandbox_seconds_per_success"] == 8.0
    assert "sandbox_seconds" not in step  # step.py's own key stays as it was
    # Evaluation after the step leased 3 s more; the whole run is 20 s of 2 GPUs.
    clock.now += 10.0
    saved = ledger.save(own=12.0)
    assert ledger.spent(own=12.0) == Spent(12.0, 40.0, trajectories=4, successes=1)
    assert json.loads((tmp_path / LEDGER).read_text()) == saved
    assert (saved["sandbox_seconds"], saved["gpu_seconds"]) == (12.0, 40.0)
    # A new process of the same run (resumed) starts from the ledger, not from zero.
    again = CostLedger(tmp_path, s, clock)
    clock.now += 5.0
    again.step(["success", "success"], 4.0, 5.0, 4.5, 4.5)
    total = again.save(own=4.5)
    assert (total["sandbox_seconds"], total["gpu_seconds"]) == (16.5, 50.0)
    assert (total["trajectories"], total["successful_trajectories"]) == (6, 3)
    assert total["cost"] == pytest.approx(16.5 / 3600 * 0.5 + 50 / 3600 * 3)


def test_distributed_totals_add_this_ranks_later_leases_to_the_all_rank_sum(tmp_path) -> None:
    ledger = CostLedger(tmp_path, spec(), Clock())
    ledger.step(["failure"] * 4, 20.0, 1.0, leased=20.0, own=6.0)  # 4 ranks' leases: 20 s
    assert ledger.spent(own=9.0).sandbox_seconds == 23.0  # rank 0 then evaluated for 3 s


def test_publish_sets_run_gauges_and_money_only_with_prices(tmp_path: Path) -> None:
    s = spec(cost={"pricePerSandboxHour": 0.36, "pricePerGpuHour": 0, "currency": "EUR"})
    ledger, metrics = CostLedger(tmp_path, s, Clock()), TrainerMetrics()
    ledger.step(["success", "failure"], 10.0, 1.0, 10.0, 10.0)
    totals = publish(ledger, 10.0, metrics, None)
    text = generate_latest(metrics.registry).decode()
    assert "kubecua_trainer_run_sandbox_seconds 10.0" in text
    assert "kubecua_trainer_run_trajectories 2.0" in text
    assert "kubecua_trainer_run_successful_trajectories 1.0" in text
    assert 'kubecua_trainer_run_cost{currency="EUR"} 0.001' in text  # 10 s at 0.36 an hour
    assert totals["cost_per_success"] == pytest.approx(0.001)
    plain, unpriced = TrainerMetrics(), tmp_path / "unpriced"
    unpriced.mkdir()
    publish(CostLedger(unpriced, spec(), Clock()), 0.0, plain, None)
    assert "kubecua_trainer_run_cost" not in generate_latest(plain.registry).decode()


def test_one_price_alone_is_refused_naming_spec_cost() -> None:
    with pytest.raises(ConfigError, match=r"spec\.cost"):
        spec(cost={"pricePerGpuHour": 2.5})
    with pytest.raises(ConfigError, match=r"spec\.cost\.pricePerSandboxHour"):
        spec(cost={"pricePerSandboxHour": -1, "pricePerGpuHour": 1})
