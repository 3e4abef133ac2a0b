"""The sglang stand-in of the real-node test (tests/sglang_standin), on its own, as a process on
this machine: it takes only weights it really read and that fit its model, and it speaks the
answers the trainer's engine reads. (What the real-node test then proves rests on this.)"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kubecua_testkit.components import free_port, wait_until
from kubecua_testkit.tools import REPO

STANDIN = REPO / "tests" / "sglang_standin"
CONFIG = {"image_token_id": 9, "text_config": {"vocab_size": 12, "bos_token_id": 8}}


def safetensors(path: Path, tensors: dict[str, tuple[int, ...]], fill: int = 0) -> str:
    """A float32 safetensors file of these shapes, every byte `fill`; its sha256."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 4 * (shape[0] * shape[1] if len(shape) == 2 else shape[0])
        header[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    data = struct.pack("<Q", len(raw)) + raw + bytes([fill]) * offset
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def model(root: Path, fill: int, shapes: dict[str, tuple[int, ...]] | None = None) -> str:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(CONFIG))
    return safetensors(root / "model.safetensors", shapes or {"w": (3, 4), "b": (4,)}, fill)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    model(tmp_path / "base", 0)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path / "base"),
            "--host", "127.0.0.1", "--port", str(port), "--tp-size", "1"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _up(url), 30, "the stand-in")
        yield url, tmp_path
    finally:
        proc.terminate()
        assert proc.wait(10) == 0  # SIGTERM ends it at once (PID 1 of its container)


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_it_takes_weights_it_read_and_refuses_what_does_not_fit(server):
    url, root = server
    good = model(root / "step-1", 7)
    model(root / "other", 7, {"w": (4, 4), "b": (4,)})  # another architecture
    (root / "empty").mkdir()

    def update(path: Path, version: str) -> httpx.Response:
        body = {"model_path": str(path), "weight_version": version}
        return httpx.post(f"{url}/update_weights_from_disk", json=body, timeout=10)

    ok = update(root / "step-1", "1")
    assert (ok.status_code, ok.json()["success"]) == (200, True)
    for path, version in ((root / "other", "2"), (root / "empty", "3"), (root / "nowhere", "4")):
        refused = update(path, version)
        assert refused.status_code == 400, path
        assert refused.json()["success"] is False
        assert refused.json()["message"], path
    # A truncated file (its header promises more bytes than it has) is refused too.
    broken = root / "broken"
    model(broken, 1)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[:-4])
    assert update(broken, "5").status_code == 400
    assert httpx.get(f"{url}/get_weight_version").json() == {"weight_version": "1"}
    loads = httpx.get(f"{url}/standin/records").json()["loads"]
    assert [(r["weight_version"], r["model_path"]) for r in loads] == [
        ("default", str(root / "base")),
        ("1", str(root / "step-1")),
    ]
    assert loads[1]["sha256"] == {"model.safetensors": good}
    assert loads[1]["tensors"] == 2


def test_generate_answers_what_the_engine_reads_and_counts_by_weight_version(server):
    url, root = server
    body = {"input_ids": [1, 9, 2], "image_data": ["data:image/png;base64,AA=="],
            "sampling_params": {"max_new_tokens": 4, "stop_token_ids": [10]},
            "return_logprob": True}  # fmt: skip
    first = httpx.post(f"{url}/generate", json=body).json()
    meta = first["meta_info"]
    ids = [e[1] for e in meta["output_token_logprobs"]]
    assert ids == first["output_ids"]
    assert len(ids) == 4
    assert ids[-1] == 10
    assert all(0 <= t < 8 for t in ids[:-1])  # ordinary tokens, below the special ones
    assert meta["finish_reason"] == {"type": "stop", "matched": 10}
    assert meta["weight_version"] == "default"
    # New weights, new tokens for the same prompt: the answer depends on what was loaded.
    model(root / "step-1", 3)
    httpx.post(f"{url}/update_weights_from_disk",
               json={"model_path": str(root / "step-1"), "weight_version": "1"})  # fmt: skip
    second = httpx.post(f"{url}/generate", json=body).json()
    assert second["meta_info"]["weight_version"] == "1"
    assert second["output_ids"] != first["output_ids"]
    # One image pad per image, as sglang expands them: two pads for one image is refused.
    bad = httpx.post(f"{url}/generate", json={**body, "input_ids": [9, 9]})
    assert bad.status_code == 400
    assert httpx.get(f"{url}/standin/records").json()["generated"] == {"default": 1, "1": 1}


def test_a_flag_the_operators_deployment_does_not_pass_is_refused(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path),
            "--mem-fraction-static", "0.8"]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "--mem-fraction-static" in proc.stderr
