"""Checkpoints: an HF-layout model directory plus everything needed to continue exactly.

<root>/step-00000040/ holds model.safetensors + config + processor/tokenizer (loadable with
load_policy or any HF Auto class, and by sglang's /update_weights_from_disk), optimizer.pt,
replay.pt, rng.pt (python, numpy, torch CPU and CUDA generators) and trainer_state.json. It is
written under a temporary name and renamed, so a crash never leaves a half checkpoint that
latest_checkpoint() would pick. Everything is read back with torch.load(weights_only=True), so a
checkpoint volume cannot smuggle in pickled code.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForImageTextToText

from kubecua_trainer.learner import Learner
from kubecua_trainer.model import Policy
from kubecua_trainer.replay import SuccessReplay

_STEP_DIR = re.compile(r"^step-(\d+)$")
STATE_FILE = "trainer_state.json"


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [v.tolist() if isinstance(v, np.ndarray) else v for v in np.random.get_state()],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    dir: str | Path,
    step: int,
    policy: Policy,
    learner: Learner,
    replay: SuccessReplay | None,
    rng: bool = True,
    extra: dict[str, Any] | None = None,
) -> str:
    """Write <dir>/step-<step> atomically (temp dir, then rename); returns its path."""
    root = Path(dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with policy.lock:
        policy.model.save_pretrained(tmp)  # type: ignore[operator]
        torch.save(learner.state_dict(), tmp / "optimizer.pt")
    policy.processor.save_pretrained(tmp)
    if replay is not None:
        torch.save(replay.state_dict(), tmp / "replay.pt")
    if rng:
        torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, "extra": extra or {}}, indent=1))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return str(final)


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under root as (step, path), oldest first."""
    found = []
    base = Path(root)
    if not base.is_dir():
        return []
    for p in base.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(root: str | Path) -> str | None:
    """Path of the highest-step complete checkpoint under root, or None."""
    found = list_checkpoints(root)
    return str(found[-1][1]) if found else None


def checkpoint_time(path: str | Path) -> float:
    """Unix time a checkpoint was completed: its state file is the last thing written."""
    return (Path(path) / STATE_FILE).stat().st_mtime


def prune_checkpoints(root: str | Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` checkpoints; returns the deleted paths."""
    old = list_checkpoints(root)[:-keep] if keep > 0 else []
    for _, p in old:
        shutil.rmtree(p)
    return [str(p) for _, p in old]


def load_checkpoint(
    path: str | Path, policy: Policy, learner: Learner, replay: SuccessReplay | None
) -> dict[str, Any]:
    """Restore weights, optimizer, replay and RNG into live objects; returns {step, extra}."""
    ckpt = Path(path)
    state = json.loads((ckpt / STATE_FILE).read_text())
    dtype = next(policy.model.parameters()).dtype
    loaded = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=dtype, local_files_only=True)
    with policy.lock:
        policy.model.load_state_dict(loaded.state_dict())
        learner.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    del loaded
    if replay is not None and (ckpt / "replay.pt").is_file():
        replay.load_state_dict(torch.load(ckpt / "replay.pt", weights_only=True))
    if (ckpt / "rng.pt").is_file():
        _set_rng_state(torch.load(ckpt / "rng.pt", weights_only=True))
    return {"step": int(state["step"]), "extra": state.get("extra", {})}
