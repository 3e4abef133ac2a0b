"""Checkpoints: an HF-layout model directory plus everything needed to continue exactly.

<root>/step-00000040/ holds model.safetensors + config + processor/tokenizer (loadable with
load_policy or any HF Auto class, and by sglang's /update_weights_from_disk), optimizer.pt,
replay.pt, rng.pt (python, numpy, torch CPU and CUDA generators) and trainer_state.json. It is
written under a temporary name and renamed, so a crash never leaves a half checkpoint that
latest_checkpoint() would pick. Everything is read back with torch.load(weights_only=True), so a
checkpoint volume cannot smuggle in pickled code. A distributed run (save_sharded_checkpoint)
writes the same layout from rank 0, with the optimizer state keyed by parameter name and one RNG
state per rank. Any checkpoint resumes at any world size (1 included): the model is full, the
optimizer state is converted between its two layouts (Learner.load_state_dict), rank r takes the
saved rank r's RNG state (a rank the checkpoint did not have keeps its fresh seed).
With spec.model.lora the model files are the adapter alone, in peft's layout (adapter_config.json,
adapter_model.safetensors; lora.py), and optimizer.pt holds the adapter's state alone.
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

from kubecua_trainer.config import ConfigError
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.lora import (
    adapter_param_names,
    check_layout,
    is_lora,
    load_adapter,
    read_adapter,
    save_adapter,
)
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.distributed import Dist

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
    final, tmp = _fresh_tmp(Path(dir), f"step-{step:08d}")
    with policy.lock:
        _save_model(tmp, policy.model)
        torch.save(learner.state_dict(), tmp / "optimizer.pt")
    policy.processor.save_pretrained(tmp)
    if replay is not None:
        torch.save(replay.state_dict(), tmp / "replay.pt")
    if rng:
        torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, "extra": extra or {}}, indent=1))
    return _publish_dir(tmp, final)


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
    check_layout(ckpt, policy.model)
    if is_lora(policy.model):
        with policy.lock:
            load_adapter(ckpt, policy.model)
            learner.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    else:
        dtype = next(policy.model.parameters()).dtype
        loaded = AutoModelForImageTextToText.from_pretrained(
            ckpt, dtype=dtype, local_files_only=True
        )
        with policy.lock:
            policy.model.load_state_dict(loaded.state_dict())
            learner.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
        del loaded
    if replay is not None and (ckpt / "replay.pt").is_file():
        replay.load_state_dict(torch.load(ckpt / "replay.pt", weights_only=True))
    if (ckpt / "rng.pt").is_file():
        _set_rng_state(_rank_states(torch.load(ckpt / "rng.pt", weights_only=True))[0])
    return {"step": int(state["step"]), "extra": state.get("extra", {})}


def _rank_states(saved: dict[str, Any]) -> list[Any]:
    """rng.pt as one RNG state per saved rank: a distributed checkpoint holds {"ranks": [...]},
    a single process's one state."""
    return saved.get("ranks", [saved])


def _save_model(
    dir: Path, model: torch.nn.Module, state: dict[str, torch.Tensor] | None = None
) -> None:
    """The model's files: the adapter alone with LoRA, else the HF model (state: gathered)."""
    if is_lora(model):
        save_adapter(dir, model, state)
    elif state is not None:
        model.save_pretrained(dir, state_dict=state)  # type: ignore[operator]
    else:
        model.save_pretrained(dir)  # type: ignore[operator]


def _gather(model: torch.nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """The sharded model's full state on rank 0 (keep): the adapter's tensors alone with LoRA."""
    from kubecua_trainer.learning.sharded import full_state

    names = set(adapter_param_names(model)) if is_lora(model) else None
    return full_state(model, keep=keep, names=names)


def _fresh_tmp(root: Path, name: str) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    return root / name, tmp


def _publish_dir(tmp: Path, final: Path) -> str:
    """Make tmp durable, then rename it to final. Without the flush a node that loses power
    right after the rename may keep a complete-looking checkpoint of empty files, and older
    ones are pruned by then."""
    _fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync(final.parent)
    return str(final)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):  # files before their directories
        _fsync(path)
    _fsync(root)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():  # some filesystems cannot sync a directory; files must sync
            raise
    finally:
        os.close(fd)


def save_weights(dir: str | Path, step: int, policy: Policy, keep: int = 2) -> str:
    """<dir>/step-<step>: the model alone in the HF layout, for engines that load weights from
    disk every step (sglang); not a checkpoint (no optimizer, no RNG). Keeps the last `keep`."""
    final, tmp = _fresh_tmp(Path(dir), f"step-{step:08d}")
    with policy.lock:
        _save_model(tmp, policy.model)
    (tmp / STATE_FILE).write_text(json.dumps({"step": step}))
    path = _publish_dir(tmp, final)
    prune_checkpoints(dir, keep)
    return path


def save_sharded_weights(dir: str | Path, step: int, policy: Policy, d: Dist, keep: int = 2) -> str:
    """save_weights for an FSDP2-sharded policy: gathered by all ranks, written by rank 0."""
    state = _gather(policy.model, keep=d.is_main)
    path = str(Path(dir) / f"step-{step:08d}")
    if d.is_main:
        final, tmp = _fresh_tmp(Path(dir), f"step-{step:08d}")
        _save_model(tmp, policy.model, state)
        (tmp / STATE_FILE).write_text(json.dumps({"step": step}))
        path = _publish_dir(tmp, final)
        prune_checkpoints(dir, keep)
    d.barrier()
    return path


def save_sharded_checkpoint(
    dir: str | Path,
    step: int,
    policy: Policy,
    learner: Learner,
    replay: SuccessReplay | None,
    d: Dist,
    extra: dict[str, Any] | None = None,
) -> str:
    """The distributed checkpoint, in the same layout as save_checkpoint: the model gathered to
    full tensors, the optimizer state keyed by parameter name (any world size can resume it) and
    every rank's RNG states in rng.pt. Every rank calls it; rank 0 alone writes."""
    state = _gather(policy.model, keep=d.is_main)
    optimizer = learner.state_dict()
    rngs = d.gather_to_main(_rng_state())
    final = Path(dir) / f"step-{step:08d}"
    if d.is_main:
        final, tmp = _fresh_tmp(Path(dir), final.name)
        _save_model(tmp, policy.model, state)
        torch.save(optimizer, tmp / "optimizer.pt")
        policy.processor.save_pretrained(tmp)
        if replay is not None:
            torch.save(replay.state_dict(), tmp / "replay.pt")
        torch.save({"ranks": rngs}, tmp / "rng.pt")
        meta = {"step": step, "extra": {**(extra or {}), "world_size": d.world}}
        (tmp / STATE_FILE).write_text(json.dumps(meta, indent=1))
        _publish_dir(tmp, final)
    d.barrier()  # nobody goes on (or prunes, or resumes) before the checkpoint exists
    return str(final)


def load_sharded_checkpoint(
    path: str | Path,
    policy: Policy,
    learner: Learner,
    replay: SuccessReplay | None,
    d: Dist,
) -> dict[str, Any]:
    """Rank 0 reads the checkpoint and the other ranks receive it (no shared disk needed). A
    checkpoint of another world size (a single process's included) loads too: weights and
    optimizer state are full; ranks beyond the saved ones start from fresh RNG seeds."""
    from kubecua_trainer.learning.sharded import load_full_state

    ckpt = Path(path)
    model_state: dict[str, torch.Tensor] = {}
    opt: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    rngs: list[Any] | None = None
    lora = is_lora(policy.model)
    problem: str | None = None
    if d.is_main:
        try:
            check_layout(ckpt, policy.model)
        except ConfigError as err:
            problem = str(err)
    problem = d.broadcast(problem)  # every rank stops on it, none waits for the others
    if problem is not None:
        raise ConfigError(problem)
    if d.is_main:
        meta = json.loads((ckpt / STATE_FILE).read_text())
        if lora:
            model_state = read_adapter(ckpt)
        else:
            dtype = next(policy.model.parameters()).dtype
            loaded = AutoModelForImageTextToText.from_pretrained(
                ckpt, dtype=dtype, local_files_only=True
            )
            model_state = loaded.state_dict()
            del loaded
        opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
        saved = (
            _rank_states(torch.load(ckpt / "rng.pt", weights_only=True))
            if (ckpt / "rng.pt").is_file()
            else []
        )
        rngs = [saved[r] if r < len(saved) else None for r in range(d.world)]
    meta = d.broadcast(meta)
    load_full_state(policy.model, model_state, strict=not lora, group=d.group)
    learner.load_state_dict(opt if d.is_main else {"steps": 0})
    learner.steps = d.broadcast(learner.steps)
    if replay is not None:
        has = d.is_main and (ckpt / "replay.pt").is_file()
        state = torch.load(ckpt / "replay.pt", weights_only=True) if has else None
        state = d.broadcast(state)
        if state is not None:
            replay.load_state_dict(state)
    mine = d.scatter_from_main(rngs)
    if mine is not None:
        _set_rng_state(mine)
    return {"step": int(meta["step"]), "extra": meta.get("extra", {})}
