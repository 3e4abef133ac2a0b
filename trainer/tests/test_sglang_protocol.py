"""Every body the sglang engine sends fits sglang's own request classes at the pinned version.

The facts below were read from sglang 0.5.3 (SGLANG_VERSION, the operator's default image
lmsysorg/sglang:v0.5.3): the request dataclasses in python/sglang/srt/managers/io_struct.py, the
sampling keywords of SamplingParams.__init__ in python/sglang/srt/sampling/sampling_params.py,
the routes in python/sglang/srt/entrypoints/http_server.py, the finish reasons in
python/sglang/srt/managers/schedule_batch.py and the log-prob triples in
python/sglang/srt/managers/tokenizer_manager.py. Types are written as they arrive in JSON (an
image is a URL or data-URI string, or an ImageData object).

Why a table and not sglang itself: io_struct does import without a GPU (0.5.3 installed with
--no-deps into a throwaway venv beside torch, plus about 20 small packages), but the package pins
torch==2.8.0, flashinfer and sgl-kernel, so it cannot join the trainer's environment (torch 2.11).
test_the_facts_are_sglangs_own checks the table against the classes wherever sglang imports, e.g.
with `<venv with sglang==0.5.3>/bin/python -m pytest tests/test_sglang_protocol.py` (done for
0.5.3 when the table was written); in the trainer's venv it is skipped.

The LoRA routes (/load_lora_adapter, /unload_lora_adapter), their classes and LoRAUpdateOutput
were read the same way from the 0.5.3 wheel (sglang-0.5.3-py3-none-any.whl from PyPI, issue 33);
test_the_facts_are_sglangs_own covers them but has not been rerun in an sglang venv since.

Real sglang has never run here: these are the request shapes, not proof of a live server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml  # type: ignore[import-untyped]
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, TypeAdapter, ValidationError

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import EngineError, SamplingParams
from kubecua_trainer.engines.sglang import (
    SGLANG_VERSION,
    SGLangEngine,
    generate_payload,
    load_adapter_payload,
    unload_adapter_payload,
    update_weights_payload,
)

REPO = Path(__file__).resolve().parents[2]
PAD, STOP = 9, 2

# ---- Facts: sglang 0.5.3 -------------------------------------------------------------------
FACTS_VERSION = "0.5.3"
Item = str | dict[str, Any]  # io_struct's ImageDataInputItem, over JSON
Media = list[list[Item]] | list[Item] | Item | None
Strs = str | list[str] | None
Lora = list[str | None] | str | None

# POST routes of http_server.py and the io_struct dataclass each one takes as its body.
ENDPOINTS = {
    "/generate": "GenerateReqInput",
    "/update_weights_from_disk": "UpdateWeightFromDiskReqInput",
    "/load_lora_adapter": "LoadLoRAAdapterReqInput",
    "/unload_lora_adapter": "UnloadLoRAAdapterReqInput",
}
# Every field of each dataclass (BaseReq's rid included), with its type; REQUIRED have no default.
FIELDS: dict[str, dict[str, Any]] = {
    "GenerateReqInput": {
        "rid": Strs,
        "text": Strs,
        "input_ids": list[list[int]] | list[int] | None,
        "input_embeds": list[list[list[float]]] | list[list[float]] | None,
        "image_data": Media,
        "video_data": Media,
        "audio_data": Media,
        "sampling_params": list[dict[str, Any]] | dict[str, Any] | None,
        "return_logprob": list[bool] | bool | None,
        "logprob_start_len": list[int] | int | None,
        "top_logprobs_num": list[int] | int | None,
        "token_ids_logprob": list[list[int]] | list[int] | None,
        "return_text_in_logprobs": bool,
        "stream": bool,
        "log_metrics": bool,
        "return_hidden_states": list[bool] | bool,
        "modalities": list[str] | None,
        "session_params": list[dict[str, Any]] | dict[str, Any] | None,
        "lora_path": Lora,
        "lora_id": Lora,
        "custom_logit_processor": Lora,
        "bootstrap_host": Strs,
        "bootstrap_port": list[int | None] | int | None,
        "bootstrap_room": list[int] | int | None,
        "bootstrap_pair_key": Strs,
        "data_parallel_rank": int | None,
        "background": bool,
        "conversation_id": str | None,
        "priority": int | None,
        "extra_key": Strs,
        "no_logs": bool,
        "custom_labels": dict[str, str] | None,
        "return_bytes": bool,
    },
    "UpdateWeightFromDiskReqInput": {
        "rid": Strs,
        "model_path": str,
        "load_format": str | None,
        "abort_all_requests": bool,
        "weight_version": str | None,
        "is_async": bool,
        "torch_empty_cache": bool,
        "keep_pause": bool,
    },
    "LoadLoRAAdapterReqInput": {
        "rid": Strs,
        "lora_name": str,
        "lora_path": str,
        "pinned": bool,
        "lora_id": str | None,
    },
    "UnloadLoRAAdapterReqInput": {"rid": Strs, "lora_name": str, "lora_id": str | None},
}
REQUIRED = {
    "GenerateReqInput": set(),
    "UpdateWeightFromDiskReqInput": {"model_path"},
    "LoadLoRAAdapterReqInput": {"lora_name", "lora_path"},
    "UnloadLoRAAdapterReqInput": {"lora_name"},
}
# GenerateReqInput.sampling_params is passed as keywords to SamplingParams(...): an unknown key
# fails the request.
SAMPLING: dict[str, Any] = {
    "max_new_tokens": int,
    "stop": Strs,
    "stop_token_ids": list[int] | None,
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "frequency_penalty": float,
    "presence_penalty": float,
    "repetition_penalty": float,
    "min_new_tokens": int,
    "n": int,
    "json_schema": str | None,
    "regex": str | None,
    "ebnf": str | None,
    "structural_tag": str | None,
    "ignore_eos": bool,
    "skip_special_tokens": bool,
    "spaces_between_special_tokens": bool,
    "no_stop_trim": bool,
    "custom_params": dict[str, Any] | None,
    "stream_interval": int | None,
    "logit_bias": dict[str, float] | None,
    "sampling_seed": int,
}
# What the engine reads back. /generate with return_logprob: meta_info.output_token_logprobs is
# one [logprob, token_id, text or null] per sampled token (text null unless
# return_text_in_logprobs); meta_info.finish_reason is {"type": "stop", "matched": id or string},
# {"type": "length", "length": n} or {"type": "abort", ...}. /update_weights_from_disk answers
# {"success", "message", "num_paused_requests"}: HTTP 200 when success, else 400.
# /load_lora_adapter and /unload_lora_adapter answer LoRAUpdateOutput {"success",
# "error_message", "loaded_adapters"}: HTTP 200 when success, else 400. /generate resolves its
# lora_path through the server's adapter registry by name (an unknown name fails the request).
LOGPROB_ENTRY = tuple[float, int, str | None]
UPDATE_ANSWER = {"success": bool, "message": str, "num_paused_requests": int | None}

STRICT = ConfigDict(strict=True)  # no "3" for 3, no 1 for True


def problems(body: dict[str, Any], fields: dict[str, Any], required: set[str]) -> list[str]:
    """Each field of body that the facts do not allow, and each required field it lacks."""
    out = [f"{k}: not a field of sglang {FACTS_VERSION}" for k in body if k not in fields]
    out += [f"{k}: required" for k in sorted(required - body.keys())]
    for key, value in body.items():
        if key in fields:
            try:
                TypeAdapter(fields[key], config=STRICT).validate_python(value)
            except ValidationError as err:
                out.append(f"{key}: {value!r} is not {fields[key]}: {err.errors()[0]['msg']}")
    return out


def check_request(path: str, body: dict[str, Any]) -> None:
    cls = ENDPOINTS[path]
    found = problems(body, FIELDS[cls], REQUIRED[cls])
    if "sampling_params" in body:
        found += problems(body["sampling_params"], SAMPLING, set())
    assert not found, f"POST {path} against sglang {FACTS_VERSION} {cls}: {found}"


# ---- A stand-in that records every request and answers as the facts say ---------------------


def _answer(path: str, body: dict[str, Any]) -> JSONResponse:
    if path == "/generate":
        limit = body["sampling_params"]["max_new_tokens"]
        out = [11, 12, STOP][:limit]
        finish = {"type": "stop", "matched": STOP} if out[-1] == STOP else {"type": "length"}
        if finish["type"] == "length":
            finish["length"] = len(out)
        entries = [[-0.5 * (i + 1), t, None] for i, t in enumerate(out)]
        meta = {"finish_reason": finish, "output_token_logprobs": entries}
        return JSONResponse({"text": "", "output_ids": out, "meta_info": meta})
    if path in ("/load_lora_adapter", "/unload_lora_adapter"):
        ok = path == "/unload_lora_adapter" or (Path(body["lora_path"]) / "adapter.bin").is_file()
        lora = {"success": ok, "error_message": None if ok else "no such dir",
                "loaded_adapters": {}}  # fmt: skip
        return JSONResponse(lora, status_code=200 if ok else 400)
    ok = body["model_path"].startswith("/ckpt/")
    answer = {"success": ok, "message": "loaded" if ok else "no such dir", "num_paused_requests": 0}
    return JSONResponse(answer, status_code=200 if ok else 400)


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    app = FastAPI()

    @app.post("/{path:path}")
    async def any_post(path: str, request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(("/" + path, body))
        return _answer("/" + path, body)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    server.should_exit = True
    thread.join(timeout=10)


SAMPLINGS = [
    SamplingParams(),  # the defaults
    SamplingParams(0.7, 0.9, 8, (STOP,)),
    SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=1, stop_token_ids=()),
]


def test_every_body_the_engine_sends_uses_only_sglangs_fields_and_types(recorder: Any) -> None:
    url, seen = recorder

    async def run() -> None:
        engine = SGLangEngine([url, url], image_pad_id=PAD)
        for sampling in SAMPLINGS:
            await engine.generate([1, PAD, PAD, 5], [screenshot(1)], sampling)
            await engine.generate([1, 5], [], sampling)  # text only: no image_data
        await engine.generate([1, PAD, 3, PAD, PAD], [screenshot(1), screenshot(2)], SAMPLINGS[1])
        await engine.update_weights(3, "/ckpt/weights/step-00000003")
        await engine.close()

    asyncio.run(run())
    assert [p for p, _ in seen] == ["/generate"] * 7 + ["/update_weights_from_disk"] * 2
    for path, body in seen:
        check_request(path, body)
    # The values, not only their types: the engine asks for log-probs and names the weights.
    assert all(b["return_logprob"] is True for p, b in seen if p == "/generate")
    assert len(seen[6][1]["image_data"]) == 2
    assert seen[-1][1] == {"model_path": "/ckpt/weights/step-00000003", "weight_version": "3"}


def test_a_lora_run_loads_each_steps_adapter_and_every_generation_names_it(
    recorder: Any, tmp_path: Path
) -> None:
    """verl#5220: rollouts ran without the trained adapter. Here each step's adapter directory
    is loaded on every server, each /generate after it names that adapter, and adapters older
    than the previous one are unloaded; every body fits sglang 0.5.3's classes."""
    url, seen = recorder
    steps = {}
    for step in (1, 2, 3):
        steps[step] = tmp_path / f"step-{step}"
        steps[step].mkdir()
        (steps[step] / "adapter_config.json").write_text("{}")  # lora.is_adapter_dir
        (steps[step] / "adapter.bin").write_text("")  # what the stand-in loads

    async def run() -> list[str | None]:
        engine = SGLangEngine([url, url], image_pad_id=PAD)
        names = [engine.adapter]
        await engine.generate([1, 5], [], SAMPLINGS[1])  # before any update: the base
        for step, path in steps.items():
            await engine.update_weights(step, str(path))
            names.append(engine.adapter)
            await engine.generate([1, PAD, 5], [screenshot(step)], SAMPLINGS[1])
        broken = tmp_path / "broken"  # a config, but nothing the server can load
        broken.mkdir()
        (broken / "adapter_config.json").write_text("{}")
        with pytest.raises(EngineError, match=r"load_lora_adapter: HTTP 400.*no such dir"):
            await engine.update_weights(4, str(broken))
        assert engine.adapter == names[-1]  # a failed load leaves generation on the last one
        await engine.close()
        return names

    _, first, second, third = asyncio.run(run())
    for path, body in seen:
        check_request(path, body)
    generations = [b for p, b in seen if p == "/generate"]
    assert "lora_path" not in generations[0]
    assert [b["lora_path"] for b in generations[1:]] == [first, second, third]
    assert len({first, second, third}) == 3
    loads = [b for p, b in seen if p == "/load_lora_adapter"]
    assert [(b["lora_name"], b["lora_path"]) for b in loads[:6:2]] == [
        (first, str(steps[1])), (second, str(steps[2])), (third, str(steps[3]))
    ]  # fmt: skip
    assert [b for p, b in seen if p == "/unload_lora_adapter"] == [{"lora_name": first}] * 2
    assert not [p for p, _ in seen if p == "/update_weights_from_disk"]  # the base stays


def test_the_engine_reads_answers_shaped_as_sglang_writes_them(recorder: Any) -> None:
    url, _ = recorder

    async def run() -> None:
        engine = SGLangEngine([url], image_pad_id=PAD)
        stop = await engine.generate([1, 5], [], SamplingParams(max_new_tokens=8))
        assert (stop.token_ids, stop.finish_reason) == ([11, 12, STOP], "stop")
        assert stop.logprobs == pytest.approx([-0.5, -1.0, -1.5])
        cut = await engine.generate([1, 5], [], SamplingParams(max_new_tokens=2))
        assert (cut.token_ids, cut.finish_reason) == ([11, 12], "length")
        with pytest.raises(EngineError, match=r"HTTP 400.*no such dir"):
            await engine.update_weights(4, "/elsewhere/step-4")  # sglang 0.5.3 answers 400
        assert engine.weights_step is None
        await engine.close()

    asyncio.run(run())
    TypeAdapter(LOGPROB_ENTRY).validate_python([-0.5, 11, None])  # the facts' own shape


def test_the_checker_refuses_what_sglang_would_not_take() -> None:
    """The check itself has teeth: an unknown field, a wrong type, a missing path."""
    good = generate_payload([1, 5], [], SamplingParams(), PAD)
    assert problems(good, FIELDS["GenerateReqInput"], set()) == []
    bad = {**good, "max_tokens": 8, "return_logprob": "yes"}
    found = problems(bad, FIELDS["GenerateReqInput"], set())
    assert found[0] == "max_tokens: not a field of sglang 0.5.3"
    assert found[1].startswith("return_logprob: 'yes' is not")
    sampling = {**good["sampling_params"], "stop_token_ids": [2.5], "max_tokens": 8}
    assert [p.split(":")[0] for p in problems(sampling, SAMPLING, set())] == [
        "max_tokens",
        "stop_token_ids",
    ]
    update = update_weights_payload("/ckpt/step-00000002", 2)
    fields, required = FIELDS["UpdateWeightFromDiskReqInput"], {"model_path"}
    assert problems(update, fields, required) == []
    assert problems({"weight_version": 2}, fields, required) == [
        "model_path: required",
        "weight_version: 2 is not str | None: Input should be a valid string",
    ]


def test_the_pinned_version_is_the_operators_default_sglang_image() -> None:
    assert SGLANG_VERSION == FACTS_VERSION
    image = f"lmsysorg/sglang:v{SGLANG_VERSION}"
    values = yaml.safe_load((REPO / "charts/kubecua/values.yaml").read_text())
    assert values["operator"]["sglangImage"] == image
    settings = (REPO / "operator/kubecua_operator/settings.py").read_text()
    assert f'sglang_image: str = Field("{image}"' in settings


def test_the_facts_are_sglangs_own() -> None:
    """Run where sglang imports: the table equals the classes, and sglang's own parsers take
    every body the engine sends."""
    io_struct = pytest.importorskip("sglang.srt.managers.io_struct")
    import sglang
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSampling

    assert sglang.__version__ == FACTS_VERSION
    for name, fields in FIELDS.items():
        cls = getattr(io_struct, name)
        real = {f.name: f for f in dataclasses.fields(cls)}
        assert set(real) == set(fields), name
        missing = dataclasses.MISSING
        required = {
            n for n, f in real.items() if f.default is missing and f.default_factory is missing
        }
        assert required == REQUIRED[name]
    keywords = list(SGLangSampling.__init__.__code__.co_varnames[1:])
    assert set(keywords[: SGLangSampling.__init__.__code__.co_argcount - 1]) == set(SAMPLING)
    bodies = [generate_payload([1, PAD, 5], [screenshot(1)], s, PAD) for s in SAMPLINGS]
    for body in bodies:  # FastAPI validates the body into the dataclass with pydantic
        req = TypeAdapter(io_struct.GenerateReqInput).validate_python(body)
        req.normalize_batch_and_arguments()
        SGLangSampling(**body["sampling_params"]).verify(vocab_size=32)
    update = update_weights_payload("/ckpt/weights/step-00000001", 1)
    req = TypeAdapter(io_struct.UpdateWeightFromDiskReqInput).validate_python(update)
    assert (req.model_path, req.weight_version) == ("/ckpt/weights/step-00000001", "1")
    load = TypeAdapter(io_struct.LoadLoRAAdapterReqInput).validate_python(
        load_adapter_payload("kubecua-1-step-1", "/ckpt/step-00000001")
    )
    assert (load.lora_name, load.lora_path) == ("kubecua-1-step-1", "/ckpt/step-00000001")
    unload = unload_adapter_payload("kubecua-1-step-1")
    TypeAdapter(io_struct.UnloadLoRAAdapterReqInput).validate_python(unload)
    adapted = generate_payload([1, 5], [], SAMPLINGS[0], PAD, "kubecua-1-step-1")
    TypeAdapter(io_struct.GenerateReqInput).validate_python(adapted).normalize_batch_and_arguments()
