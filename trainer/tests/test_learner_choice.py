"""The learner's speed-ups chosen where the spec leaves them out (speedups/choice.py, issue 31
item 1): compile on CUDA, as little text checkpointing as fits the GPU for the largest sample,
offload where the fp32 masters would crowd the GPU; explicit settings win."""

from __future__ import annotations

from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
from kubecua_trainer.learning.learner_setup import explicit
from kubecua_trainer.speedups.choice import GIB, Shape, Workload, choose, sample_tokens

QWEN25_VL_3B = Shape(
    params=3_754_622_976, text_layers=36, hidden=2048, intermediate=11008,
    vision_blocks=32, vision_hidden=1280, vision_intermediate=3420,
)  # fmt: skip
TINY = Shape(params=2_000_000, text_layers=2, hidden=64, intermediate=128)
H100 = 80 * GIB


def _workload(turns: int, pixels: int, new_tokens: int, total: int = H100) -> Workload:
    return Workload(
        tokens=sample_tokens(turns, pixels, new_tokens, turns),
        image_tokens=turns * (pixels // 784),
        param_bytes=2,
        cuda=True,
        total_bytes=total,
    )


def test_the_bench_workload_gets_the_learner_bench_settings_on_an_h100() -> None:
    """8 turns of 720p (bench-loop's shape): what `make bench-trainer` measured fastest (compile,
    no text checkpointing), then as few checkpointed vision blocks as fit (issue 46's profile:
    each one less is faster)."""
    c = choose(QWEN25_VL_3B, _workload(8, 1280 * 720, 32))
    assert (c.compile, c.text_checkpointing, c.vision_checkpointing) == (True, 0.0, 0.75)
    assert c.estimate_gib <= c.budget_gib
    assert c.optimizer_offload  # 42 GiB of fp32 masters and moments on an 80 GB card
    assert c.estimate_gib <= c.budget_gib


def test_longer_samples_and_smaller_cards_checkpoint_more_and_still_fit() -> None:
    """15 turns of 1080p at the default maxPixels and maxNewTokens (the episode that must fit on
    one 80 GB GPU), then the same on a 48 GB card."""
    long = choose(QWEN25_VL_3B, _workload(15, 1_003_520, 256))
    assert 0.0 < long.text_checkpointing <= 1.0
    assert long.estimate_gib <= long.budget_gib <= 64
    small = choose(QWEN25_VL_3B, _workload(15, 1_003_520, 256, total=48 * GIB))
    assert small.text_checkpointing > long.text_checkpointing


def test_vision_by_memory_unchecks_vision_blocks_only_once_the_text_layers_are_unchecked() -> None:
    """Issue 46's option (the default since the H200 profile): the loop's workload on an H200
    beside the engine's copy keeps no vision block checkpointed, on an 80 GB card some, and each
    estimate fits; the 15 x 1080p episode, whose text layers need checkpointing on 80 GB, keeps
    every block. Without it every vision block is checkpointed."""
    h200 = Workload(
        **{**_workload(8, 1280 * 720, 32, total=141 * GIB).__dict__, "engine_copy": True}
    )
    assert choose(QWEN25_VL_3B, h200, vision_by_memory=False).vision_checkpointing == 1.0
    assert choose(QWEN25_VL_3B, h200) == choose(QWEN25_VL_3B, h200, vision_by_memory=True)
    big = choose(QWEN25_VL_3B, h200, vision_by_memory=True)
    assert (big.text_checkpointing, big.vision_checkpointing) == (0.0, 0.0)
    assert big.estimate_gib <= big.budget_gib
    h100 = choose(QWEN25_VL_3B, _workload(8, 1280 * 720, 32), vision_by_memory=True)
    assert h100.text_checkpointing == 0.0
    assert 0.0 < h100.vision_checkpointing < 1.0
    assert h100.estimate_gib <= h100.budget_gib
    long = choose(QWEN25_VL_3B, _workload(15, 1_003_520, 256), vision_by_memory=True)
    assert long.text_checkpointing > 0.0
    assert long.vision_checkpointing == 1.0


def test_explicit_settings_win() -> None:
    c = choose(
        QWEN25_VL_3B, _workload(8, 1280 * 720, 32), compile_=False, checkpointing=True,
        offload=False,
    )  # fmt: skip
    assert (c.compile, c.text_checkpointing, c.vision_checkpointing) == (False, 1.0, 1.0)
    assert not c.optimizer_offload
    assert c.why == "all set in the spec"
    off = choose(QWEN25_VL_3B, _workload(8, 1280 * 720, 32), checkpointing=False)
    assert (off.text_checkpointing, off.vision_checkpointing) == (0.0, 0.0)


def test_a_small_model_keeps_its_state_on_the_gpu_and_the_cpu_keeps_the_old_defaults() -> None:
    assert not choose(TINY, _workload(2, 112 * 112, 8)).optimizer_offload
    cpu = choose(TINY, Workload(tokens=500, image_tokens=32, param_bytes=4, cuda=False))
    assert (cpu.compile, cpu.optimizer_offload) == (False, False)
    assert (cpu.text_checkpointing, cpu.vision_checkpointing) == (1.0, 1.0)


def test_sharding_over_more_ranks_needs_less_checkpointing() -> None:
    w = _workload(15, 1_003_520, 256)
    one = choose(QWEN25_VL_3B, w, offload=True)
    four = choose(QWEN25_VL_3B, Workload(**{**w.__dict__, "world": 4}), offload=True)
    assert four.text_checkpointing < one.text_checkpointing  # the freed memory buys speed
    assert four.estimate_gib <= four.budget_gib


def test_a_field_the_manifest_leaves_out_is_chosen_and_one_it_sets_is_kept() -> None:
    def trainer(fields: dict[str, object]) -> object:
        obj = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": "r"},
            "spec": {
                "model": {"path": "/m"},
                "sandboxes": {"urls": ["http://127.0.0.1:1"]},
                "tasks": {"path": "/t"},
                "steps": 1,
                "trainer": fields,
            },
        }
        return parse_training_run(obj).spec.trainer

    left_out = trainer({})
    assert [explicit(left_out, f) for f in ("compile", "gradient_checkpointing")] == [None, None]
    kept = trainer({"compile": False, "gradientCheckpointing": True, "optimizerOffload": False})
    assert explicit(kept, "compile") is False
    assert explicit(kept, "gradient_checkpointing") is True
    assert explicit(kept, "optimizer_offload") is False
