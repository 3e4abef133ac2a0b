"""The sglang client against a loopback server speaking sglang's documented native API.

sglang cannot run on these machines (the GPU machines lent to this project have no sglang, and
only 64 MiB of wheels can be carried to them), so this is the one allowed fake: a small real
FastAPI app that implements the documented request/response shapes of POST /generate and
POST /update_weights_from_disk. It checks what the client sends and answers like sglang does.
The client is NOT exercised against a live sglang server here.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, HTTPException
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_train import local_run

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import EngineError, SamplingParams
from kubecua_trainer.engines.sglang import SGLangEngine, collapse_image_pads
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource

PAD, STOP = 9, 2


def _app(seen: list[dict[str, Any]], pad: int = PAD) -> FastAPI:
    app = FastAPI()

    @app.post("/generate")
    def generate(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        if "input_ids" not in req or not req.get("return_logprob"):
            raise HTTPException(400, "input_ids and return_logprob required")
        n_images = len(req.get("image_data") or [])
        if req["input_ids"].count(pad) != n_images:
            raise HTTPException(400, "one image pad per image expected")
        sp = req["sampling_params"]
        out = [11, 12, STOP] if sp["max_new_tokens"] >= 3 else [11, 12][: sp["max_new_tokens"]]
        finish = (
            {"type": "stop", "matched": STOP}
            if out[-1] in sp["stop_token_ids"]
            else {"type": "length", "length": len(out)}
        )
        return {
            "text": "ab",
            "output_ids": out,
            "meta_info": {
                "id": "r1",
                "finish_reason": finish,
                "prompt_tokens": len(req["input_ids"]),
                "completion_tokens": len(out),
                "output_token_logprobs": [[-0.1 * (i + 1), t, None] for i, t in enumerate(out)],
            },
        }

    @app.post("/update_weights_from_disk")
    def update(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        path = req["model_path"]
        ok = path.startswith("/ckpt/") or (Path(path) / "model.safetensors").is_file()
        return {"success": ok, "message": "ok" if ok else "no such path", "num_paused_requests": 0}

    return app


@pytest.fixture
def sglang_url() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield from _serve(PAD)


def _serve(pad: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app(seen, pad), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    started = threading.Event()
    while not started.wait(0.01):  # poll the server's own readiness flag, not a fixed sleep
        if server.started:
            started.set()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    server.should_exit = True
    thread.join(timeout=10)


def test_generate_sends_documented_shapes_and_parses_logprobs(sglang_url: Any) -> None:
    url, seen = sglang_url

    async def run() -> None:
        engine = SGLangEngine([url], image_pad_id=PAD)
        prompt = [1, 5, PAD, PAD, PAD, PAD, 6, 7]
        gen = await engine.generate(prompt, [screenshot(1)], SamplingParams(0.7, 0.9, 8, (STOP,)))
        assert gen.token_ids == [11, 12, STOP]
        assert gen.finish_reason == "stop"
        assert gen.logprobs == pytest.approx([-0.1, -0.2, -0.3])
        short = await engine.generate([1, 5], [], SamplingParams(max_new_tokens=2))
        assert short.token_ids == [11, 12]
        assert short.finish_reason == "length"
        await engine.close()

    asyncio.run(run())
    req = seen[0]
    assert req["input_ids"] == [1, 5, PAD, 6, 7]
    assert req["image_data"][0].startswith("data:image/png;base64,")
    assert req["sampling_params"] == {
        "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 8, "stop_token_ids": [STOP],
        "skip_special_tokens": False,
    }  # fmt: skip
    assert req["return_logprob"] is True


def test_update_weights_and_errors_are_reported(sglang_url: Any) -> None:
    url, seen = sglang_url

    async def run() -> None:
        engine = SGLangEngine([url, url], image_pad_id=PAD)
        await engine.update_weights(3, "/ckpt/step-00000003")
        await engine.update_weights(4, None)  # no checkpoint this step: servers keep step 3
        assert engine.weights_step == 3
        with pytest.raises(EngineError, match="no such path"):
            await engine.update_weights(5, "/elsewhere")
        with pytest.raises(EngineError, match="HTTP 400"):
            await engine.generate([1, 5], [screenshot(2)], SamplingParams())  # pad missing
        await engine.close()
        dead = SGLangEngine(["http://127.0.0.1:9"], image_pad_id=PAD)
        with pytest.raises(EngineError, match=r"127\.0\.0\.1:9"):
            await dead.generate([1], [], SamplingParams())
        await dead.close()

    asyncio.run(run())
    assert [r["model_path"] for r in seen[:2]] == ["/ckpt/step-00000003"] * 2
    assert [r["weight_version"] for r in seen[:2]] == ["3", "3"]


def test_the_loop_hands_sglang_the_weights_of_every_step(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Weights reach the servers after every update, not only at checkpoints: a weights-only HF
    directory on the steps without a checkpoint, the checkpoint on the others."""
    pad = int(json.loads((tiny_model_dir / "config.json").read_text())["image_token_id"])
    served = _serve(pad)
    url, seen = next(served)
    try:
        with LoopbackSandbox() as a:
            run = local_run(tmp_path, tiny_model_dir, [a.url], steps=3, port=0)
            run.spec.rollout.engine = "sglang"
            run.spec.rollout.sglang_urls = [url]
            run.spec.algorithm.dynamic_sampling = False
            opts = RunOptions(console=False, source=StaticSource([a.url], TOKEN))
            result = asyncio.run(train(run, opts))
    finally:
        next(served, None)
    assert [r["step"] for r in result.history] == [1, 2, 3]
    updates = [r for r in seen if "model_path" in r]
    root = tmp_path / "out/checkpoints"
    assert [r["model_path"] for r in updates] == [
        str(root / "weights/step-00000001"),  # everySteps 2: no checkpoint at step 1
        str(root / "step-00000002"),
        str(root / "step-00000003"),
    ]
    assert [r["weight_version"] for r in updates] == ["1", "2", "3"]
    assert (root / "weights/step-00000001/model.safetensors").is_file()


def test_collapse_image_pads() -> None:
    assert collapse_image_pads([7, 9, 9, 9, 8, 9, 9], 9) == [7, 9, 8, 9]
    assert collapse_image_pads([], 9) == []
