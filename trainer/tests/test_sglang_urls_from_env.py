"""The operator runs the sglang servers of an `engine: sglang` run without rollout.sglangUrls and
tells the trainer where they are in KUBECUA_SGLANG_URLS (operator/kubecua_operator/trainingrun/
job.py): the trainer must use it. (It did not, and every such run stopped at start; found by
tests/e2e/test_real_node_sglang_weights.py.)"""

from __future__ import annotations

import pytest

from kubecua_trainer.config import RolloutConfig
from kubecua_trainer.engines import sglang_urls


def test_operator_urls_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_SGLANG_URLS", "http://run-sglang:30000, http://b:30000")
    assert sglang_urls(RolloutConfig(engine="sglang")) == [
        "http://run-sglang:30000",
        "http://b:30000",
    ]


def test_spec_urls_win_and_none_at_all_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_SGLANG_URLS", "http://run-sglang:30000")
    spec = RolloutConfig(engine="sglang", sglang_urls=["http://mine:30000"])
    assert sglang_urls(spec) == ["http://mine:30000"]
    monkeypatch.delenv("KUBECUA_SGLANG_URLS")
    assert sglang_urls(RolloutConfig(engine="sglang")) == []


def test_a_service_name_without_cluster_dns_goes_by_the_service_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `run-sglang-x9` resolves nowhere (no cluster DNS, no such host): the kubelet's service
    # variable gives its ClusterIP. A name that resolves, or one with dots, is kept as it is.
    monkeypatch.setenv("KUBECUA_SGLANG_URLS", "http://run-sglang-x9:30000,http://localhost:30000")
    monkeypatch.setenv("RUN_SGLANG_X9_SERVICE_HOST", "10.0.0.77")
    monkeypatch.setenv("LOCALHOST_SERVICE_HOST", "10.0.0.78")
    assert sglang_urls(RolloutConfig(engine="sglang")) == [
        "http://10.0.0.77:30000",
        "http://localhost:30000",
    ]
