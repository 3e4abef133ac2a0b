"""Shared fixtures: tiny Qwen2.5-VL / Qwen3-VL directories built once per test session, and the
real local control plane (`cluster`, `namespace`) from kubecua_testkit, one per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tiny_models import build_tiny_model

pytest_plugins = ["kubecua_testkit.fixtures"]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2.5-VL saved as an HF directory (model, tokenizer, processor)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2_5_vl"), "qwen2_5_vl")


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-VL saved as an HF directory."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3_vl"), "qwen3_vl")


@pytest.fixture
def policy(tiny_model_dir: Path) -> Policy:
    """A fresh (untrained) tiny Qwen2.5-VL policy on the CPU, fp32."""
    return load_policy(str(tiny_model_dir), device="cpu")
