"""sglang engine: HTTP to sglang servers' native API (POST /generate, /update_weights_from_disk).

NOT YET EXERCISED AGAINST A LIVE SGLANG SERVER: real sglang has never run here (it cannot run on
the project's machines). The protocol targets sglang SGLANG_VERSION (the operator's default image,
lmsysorg/sglang:v<SGLANG_VERSION>): every body sent here uses only fields, with their types, of that
version's request classes, written down as facts in tests/test_sglang_protocol.py. The request and
response shapes are tested against a small loopback server (tests/test_engine_sglang.py).

- /generate gets input_ids, image_data (PNG data URIs, already fitted by tokens.fit_image),
  sampling_params and return_logprob=true; the sampled ids and their log-probs are read from
  meta_info.output_token_logprobs ([logprob, token_id, text] per token).
- Image pads are sent collapsed to one <|image_pad|> per image: sglang's processor expands each pad
  itself, and because the images are already at processor-aligned sizes it expands to exactly the
  count the trainer's Conversation holds. (To verify on a live server: prompt_tokens in meta_info.)
- After EVERY step (not only at checkpoints) rank 0 writes the new weights in the HF layout on the
  volume the servers mount (the checkpoint when one is due, else a weights-only copy under
  <checkpoint root>/weights) and every server loads them through /update_weights_from_disk
  {"model_path": dir, "weight_version": "<step>"}. The operator's sglang Deployment mounts the
  run's checkpoint PVC read-only at the trainer's checkpoint path, so dir resolves there too;
  servers given as sglangUrls must see the same path themselves. Why this path and not the NCCL one
  (/init_weights_update_group + /update_weights_from_distributed): it needs no NCCL group between
  the trainer pods and the server pods (a port open both ways, the same NCCL in two images, the
  server GPUs joining the trainer's world), works for any number of trainer ranks and servers,
  and its cost (a 3B bf16 write + load, seconds) is hidden by rollout.maxStaleness >= 1.
  /update_weights_from_tensor is for servers colocated on the trainer's GPUs, which we do not run.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import logging
from dataclasses import replace
from typing import Any

import httpx
from PIL import Image

from kubecua_trainer.engines.base import EngineError, Generation, SamplingParams, cut_at_stop

log = logging.getLogger(__name__)
SGLANG_VERSION = "0.5.3"  # the sglang release whose native API this client speaks


def collapse_image_pads(ids: list[int], pad_id: int) -> list[int]:
    """One pad per run of pads. Example: [7, 9, 9, 9, 8, 9, 9] with pad 9 -> [7, 9, 8, 9]."""
    out: list[int] = []
    for tok in ids:
        if tok == pad_id and out and out[-1] == pad_id:
            continue
        out.append(tok)
    return out


def image_data_uri(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def generate_payload(
    prompt_ids: list[int], images: list[Image.Image], sampling: SamplingParams, pad_id: int
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "input_ids": collapse_image_pads(prompt_ids, pad_id),
        "sampling_params": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_new_tokens": sampling.max_new_tokens,
            "stop_token_ids": list(sampling.stop_token_ids),
            "skip_special_tokens": False,
        },
        "return_logprob": True,
    }
    if images:
        payload["image_data"] = [image_data_uri(im) for im in images]
    return payload


def update_weights_payload(model_path: str, step: int) -> dict[str, Any]:
    """The body of /update_weights_from_disk: the servers load model_path, tagged with the step."""
    return {"model_path": model_path, "weight_version": str(step)}


def parse_generation(body: dict[str, Any], sampling: SamplingParams) -> Generation:
    """Read ids, log-probs and the finish reason out of a /generate response."""
    meta = body.get("meta_info") or {}
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise EngineError("sglang response has no meta_info.output_token_logprobs")
    ids = [int(e[1]) for e in entries]
    logprobs = [float(e[0]) for e in entries]
    reason = (meta.get("finish_reason") or {}).get("type")
    if reason not in ("stop", "length"):
        raise EngineError(f"sglang finished with {meta.get('finish_reason')!r}")
    gen = cut_at_stop(ids, logprobs, sampling.stop_token_ids, sampling.max_new_tokens)
    # A stop string (not a stop id) also reports "stop"; keep the server's word for it.
    return Generation(gen.token_ids, gen.logprobs, reason)


class SGLangEngine:
    """Round-robins requests over sglang servers; one shared httpx client."""

    def __init__(self, urls: list[str], image_pad_id: int, timeout_s: float = 600.0):
        if not urls:
            raise ValueError("sglang engine needs at least one URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.image_pad_id = image_pad_id
        self._next = itertools.cycle(self.urls)
        self._client = httpx.AsyncClient(timeout=timeout_s)
        self.weights_step: int | None = None  # the step whose weights the servers hold

    async def _post(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = await self._client.post(url, json=payload)
        except httpx.HTTPError as exc:
            raise EngineError(f"sglang {url}: {exc!r}") from exc
        if resp.status_code != 200:
            raise EngineError(f"sglang {url}: HTTP {resp.status_code}: {resp.text[:300]}")
        body = resp.json()
        if not isinstance(body, dict):
            raise EngineError(f"sglang {url}: expected a JSON object, got {type(body).__name__}")
        return body

    async def generate(
        self, prompt_ids: list[int], images: list[Image.Image], sampling: SamplingParams
    ) -> Generation:
        payload = generate_payload(prompt_ids, images, sampling, self.image_pad_id)
        version = self.weights_step or 0  # read before: a reload meanwhile only makes it newer
        body = await self._post(f"{next(self._next)}/generate", payload)
        return replace(parse_generation(body, sampling), policy_version=version)

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None:
        """Every server loads the weights directory (on a volume they all mount); the training
        loop hands one every step. Without a directory the servers keep their weights."""
        if checkpoint_dir is None:
            log.info(
                "step %d: no checkpoint to load; sglang keeps step %s", step, self.weights_step
            )
            return
        payload = update_weights_payload(checkpoint_dir, step)
        bodies = await asyncio.gather(
            *(self._post(f"{u}/update_weights_from_disk", payload) for u in self.urls)
        )
        failed = [(u, b.get("message")) for u, b in zip(self.urls, bodies, strict=True)]
        failed = [f for f, b in zip(failed, bodies, strict=True) if not b.get("success")]
        if failed:
            raise EngineError(f"weight update to step {step} failed on {failed}")
        self.weights_step = step

    async def close(self) -> None:
        await self._client.aclose()
