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
- With spec.model.lora the step's directory holds a peft adapter (adapter_config.json; lora.py),
  not a model: every server loads it through /load_lora_adapter {"lora_name", "lora_path"} under
  a name new to the servers, each /generate names it in "lora_path" (sglang's field for the
  adapter's name), and adapters older than the previous one are unloaded through
  /unload_lora_adapter {"lora_name"} (requests still on the previous one finish on it). The base
  weights never change. The servers need --enable-lora with --max-lora-rank and
  --lora-target-modules covering spec.model.lora (kubecua_api.lora.sglang_args; the
  operator's sglang Deployment passes them). verl#5220: rollouts ran
  silently without the trained adapter; here a /generate without the step's adapter name cannot
  be sent once one is loaded (tests/test_sglang_protocol.py checks the bodies).
- Before its first request the engine waits until every server answers GET /health (wait_ready):
  the operator starts the trainer and the sglang Deployment together, and a server refuses
  connections while it loads the model, then answers 503 until its warm-up is done (sglang's
  /health while server_status is Starting). Without the wait the first /generate or
  /update_weights_from_disk fails with EngineError, which no episode catches: the run dies.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import logging
import secrets
import time
from dataclasses import replace
from typing import Any

import httpx
from PIL import Image

from kubecua_trainer.engines.base import EngineError, Generation, SamplingParams, cut_at_stop
from kubecua_trainer.lora import is_adapter_dir

log = logging.getLogger(__name__)
SGLANG_VERSION = "0.5.3"  # the sglang release whose native API this client speaks
# How long build_engine's engine waits for its servers to come up: loading a 3B model from a
# freshly pulled multi-GB image, then CUDA-graph capture and warm-up, takes minutes.
READY_TIMEOUT_S = 600.0
HEALTH_TIMEOUT_S = 10.0  # one GET /health (sglang may answer it by generating one token)
BACKOFF_S = (0.2, 5.0)  # first and longest pause between two tries at a server not yet up
LOG_EVERY_S = 30.0


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
    prompt_ids: list[int],
    images: list[Image.Image],
    sampling: SamplingParams,
    pad_id: int,
    adapter: str | None = None,
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
    if adapter is not None:  # sglang 0.5.3 takes a loaded adapter's name in lora_path
        payload["lora_path"] = adapter
    return payload


def update_weights_payload(model_path: str, step: int) -> dict[str, Any]:
    """The body of /update_weights_from_disk: the servers load model_path, tagged with the step."""
    return {"model_path": model_path, "weight_version": str(step)}


def load_adapter_payload(name: str, path: str) -> dict[str, Any]:
    """The body of /load_lora_adapter: the servers load the adapter directory under `name`."""
    return {"lora_name": name, "lora_path": path}


def unload_adapter_payload(name: str) -> dict[str, Any]:
    return {"lora_name": name}


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


def _not_up(resp: httpx.Response) -> bool:
    """A server still starting: sglang answers 503 until its warm-up is done, and a proxy in
    front of it 502/503/504 until its backend is. Any other answer means the server is up: 200,
    or (a server without sglang's /health route, such as a gateway) an error its first real
    request will report with its own words."""
    return resp.status_code >= 500


async def _health(client: httpx.AsyncClient, url: str) -> str | None:
    """None when url is up, else why not (for the log and the final error)."""
    try:
        resp = await client.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:  # waiting will not mend it
        raise EngineError(f"sglang URL {url!r} is not an http(s) URL: {exc}") from exc
    except httpx.HTTPError as exc:  # refused, unresolved, timed out: not up yet
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if _not_up(resp):
        return f"HTTP {resp.status_code}"
    if resp.status_code != 200:
        log.warning("sglang %s/health answered HTTP %d; taking it as up", url, resp.status_code)
    return None


async def wait_for_servers(client: httpx.AsyncClient, urls: list[str], timeout_s: float) -> None:
    """Return once every url answers GET /health (see _not_up); retry connection errors and 5xx
    with a growing pause; log which urls it still waits for; raise EngineError naming those
    that never answered within timeout_s."""
    started = time.monotonic()
    deadline = started + timeout_s
    waiting = {u: "not asked yet" for u in urls}
    pause, last_log = BACKOFF_S[0], None
    while True:
        reasons = await asyncio.gather(*(_health(client, u) for u in waiting))
        waiting = {u: r for u, r in zip(waiting, reasons, strict=True) if r is not None}
        now = time.monotonic()
        if not waiting:
            if last_log is not None:
                log.info("sglang servers up after %.0fs: %s", now - started, ", ".join(urls))
            return
        if now >= deadline:
            why = "; ".join(f"{u} ({r})" for u, r in waiting.items())
            raise EngineError(
                f"sglang servers did not answer GET /health within {timeout_s:g}s: {why}. "
                "Check that the sglang pods are running and ready (kubectl get pods; kubectl "
                "logs for a crash, an out-of-memory kill or a model that failed to load) and "
                "that the URLs are right (rollout.sglangUrls, or KUBECUA_SGLANG_URLS that the "
                "operator sets)"
            )
        if last_log is None or now - last_log >= LOG_EVERY_S:
            still = ", ".join(f"{u} ({r})" for u, r in waiting.items())
            log.info("waiting for sglang servers (%.0fs left): %s", deadline - now, still)
            last_log = now
        await asyncio.sleep(min(pause, max(0.0, deadline - now)))
        pause = min(pause * 2, BACKOFF_S[1])


class SGLangEngine:
    """Round-robins requests over sglang servers; one shared httpx client.

    ready_timeout_s: before its first request the engine waits this long at most for every
    server to answer GET /health (build_engine passes READY_TIMEOUT_S); None sends requests
    straight away, to servers known to be up."""

    def __init__(
        self,
        urls: list[str],
        image_pad_id: int,
        timeout_s: float = 600.0,
        ready_timeout_s: float | None = None,
    ):
        if not urls:
            raise ValueError("sglang engine needs at least one URL")
        if ready_timeout_s is not None and ready_timeout_s < 0:
            raise ValueError(f"sglang ready_timeout_s must be >= 0, got {ready_timeout_s}")
        self.urls = [u.rstrip("/") for u in urls]
        self.image_pad_id = image_pad_id
        self.ready_timeout_s = ready_timeout_s
        self._next = itertools.cycle(self.urls)
        self._client = httpx.AsyncClient(timeout=timeout_s)
        self._ready: asyncio.Future[None] | None = None  # one wait shared by every request
        self.weights_step: int | None = None  # the step whose weights the servers hold
        self.adapter: str | None = None  # the adapter every /generate names (spec.model.lora)
        self._adapters: list[str] = []  # loaded by this engine, oldest first
        # Adapter names new to servers that outlive this trainer (sglang refuses a known name).
        self._session = secrets.token_hex(4)

    async def wait_ready(self) -> None:
        """Wait (once; concurrent callers share the wait and its outcome) until every server
        answers its health endpoint; a no-op without ready_timeout_s."""
        if self.ready_timeout_s is None:
            return
        if self._ready is None:
            self._ready = asyncio.ensure_future(
                wait_for_servers(self._client, self.urls, self.ready_timeout_s)
            )
        # shield: one cancelled episode must not cancel the wait the others share
        await asyncio.shield(self._ready)

    async def _post(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        await self.wait_ready()
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
        version = self.weights_step or 0  # read before: a reload meanwhile only makes it newer
        payload = generate_payload(prompt_ids, images, sampling, self.image_pad_id, self.adapter)
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
        if is_adapter_dir(checkpoint_dir):
            await self._load_adapter(step, checkpoint_dir)
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

    def forget_cache(self, timeout: float = 0.0) -> bool:
        """Nothing to free here: the servers' KV lives on their own GPUs."""
        return True

    async def _load_adapter(self, step: int, path: str) -> None:
        """Every server loads the step's adapter; generation switches to it; adapters older
        than the previous one are unloaded."""
        name = f"kubecua-{self._session}-step-{step}"
        payload = load_adapter_payload(name, path)
        await asyncio.gather(*(self._post(f"{u}/load_lora_adapter", payload) for u in self.urls))
        self._adapters.append(name)
        self.adapter, self.weights_step = name, step
        while len(self._adapters) > 2:
            old = unload_adapter_payload(self._adapters.pop(0))
            await asyncio.gather(*(self._post(f"{u}/unload_lora_adapter", old) for u in self.urls))

    async def close(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()  # a stop while waiting: no wait outlives the client
        await self._client.aclose()
