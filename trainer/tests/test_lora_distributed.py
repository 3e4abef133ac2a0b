"""LoRA under FSDP2 with two real ranks (torchrun, gloo on the CPU): the sharded adapter trains
like one process, reaches the engine's copy, and resumes exactly, also in one process.

Tolerances as tests/test_distributed_learner.py: loss and grad norm within 1e-5 relative, the
adapter within 1e-6 absolute (fp32; only the order of the ranks' gradient sums differs); the
engine's copy and resume are bitwise."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from test_distributed_learner import TRAINER_DIR, torchrun


def test_two_ranks_train_the_adapter_like_one_process_and_resume_it_exactly(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    cmd = torchrun("-m", "bench.testing.lora_distributed_check", str(tiny_model_dir),
                   str(tmp_path / "ckpt"))  # fmt: skip
    proc = subprocess.run(cmd, cwd=TRAINER_DIR, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    got = json.loads(line)
    assert got["world"] == 2
    assert got["grad_norm"] > 0
    assert got["rel_diff"]["loss"] <= 1e-5, got
    assert got["rel_diff"]["grad_norm"] <= 1e-5, got
    assert got["adapter_max_abs_diff"] <= 1e-6, got
    assert all(r["refresh_bitwise"] for r in got["ranks"]), got
    assert got["resume"]["loss"][0] == got["resume"]["loss"][1]
    assert got["resume"]["adapter_bitwise"], got
    single = got["single"]
    assert "adapter_model.safetensors" in single["files"]
    assert "model.safetensors" not in single["files"]
    assert single["adam_names"], single  # AdamW's state: the adapter's parameters, by name
    assert single["trainable"] == 2 * 3 * 2  # q, v and down projections' A and B, 2 layers
    assert single["adam_bitwise"], single
    assert single["adapter_bitwise"], single
