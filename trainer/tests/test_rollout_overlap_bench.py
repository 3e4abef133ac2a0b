"""The utilisation bench's own logic: the figures it derives from a run's history, and the
scaled model of its learner-bound regime (a valid Qwen2.5-VL of the asked width and depth)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText

from bench.rollout_overlap import (
    LEARNER_BOUND,
    parse_args,
    regime,
    scale_text_config,
    summarise,
)
from kubecua_trainer.tiny_models import build_config, train_tokenizer


def _row(start: float, rollout: float, learn: float, busy: float, **extra: float) -> dict:
    return {"rollout_started_at": start, "rollout_seconds": rollout,
            "learn_started_at": start + rollout, "learn_ended_at": start + rollout + learn,
            "sandbox_seconds": busy, "episodes": 2, "staleness_max": 0.0, **extra}  # fmt: skip


def test_summarise_divides_desktop_seconds_by_wall_times_desktops() -> None:
    rows = [_row(100.0, 4.0, 4.0, 6.0), _row(108.0, 4.0, 2.0, 8.0, weight_refresh_seconds=0.5)]
    s = summarise(rows, desktops=2, staleness=1)
    # wall: 100 -> 114; busy 14 desktop-seconds over 2 desktops
    assert s["wall_seconds"] == 14.0
    assert s["utilisation"] == 0.5
    assert s["episodes_per_minute"] == 17.14  # 4 episodes in 14 s
    assert s["learn_seconds_mean"] == 3.0
    assert s["rollout_seconds_mean"] == 4.0
    assert s["episode_seconds_mean"] == 3.5
    assert s["weight_refresh_seconds_mean"] == 0.25
    assert (s["steps"], s["episodes"], s["max_staleness"]) == (2, 4, 1)


def test_summarise_refuses_an_empty_history() -> None:
    with pytest.raises(ValueError, match="no step"):
        summarise([], desktops=2, staleness=0)


def test_scaled_config_builds_a_model_of_that_width_and_depth() -> None:
    config = scale_text_config(build_config("qwen2_5_vl", train_tokenizer()), 128, 3)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    assert len(model.model.language_model.layers) == 3
    out = model(input_ids=torch.tensor([[1, 2, 3, 4]]), output_hidden_states=True)
    assert out.hidden_states[-1].shape == (1, 4, 128)


@pytest.mark.parametrize(
    ("hidden", "layers", "flag"), [(100, 2, "--hidden"), (0, 2, "--hidden"), (64, 0, "--layers")]
)
def test_scaled_config_rejects_sizes_it_cannot_build(hidden: int, layers: int, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        scale_text_config(build_config("qwen2_5_vl", train_tokenizer()), hidden, layers)


def test_learner_bound_preset_fills_only_what_flags_leave_open() -> None:
    args = parse_args(["--learner-bound", "--layers", "4"])
    assert (args.hidden, args.layers, args.torch_threads) == (LEARNER_BOUND["hidden"], 4, 1)
    tiny = parse_args([])
    assert (tiny.hidden, tiny.layers, tiny.torch_threads) == (None, None, None)
    assert regime(args) == "learner-bound"
    assert regime(tiny) == "tiny test model"
    assert regime(parse_args(["--hidden", "256"])) == "scaled model"
