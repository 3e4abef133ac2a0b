"""`python3 -m sglang.launch_server`: a stand-in server speaking the part of sglang's native HTTP
API that kubecua's sglang engine uses (trainer/kubecua_trainer/engines/sglang.py; the request
and answer shapes are the facts of trainer/tests/test_sglang_protocol.py, sglang 0.5.3).

It is not sglang and does not pretend to be one on the wire beyond these routes:
- GET /health, /health_generate: 200 once the model's weights are loaded (the Deployment's
  readiness probe);
- POST /update_weights_from_disk {"model_path", "weight_version"?}: really reads every
  *.safetensors file under model_path from its own mounts (the run's checkpoint PVC), checks each
  tensor's byte length against its dtype and shape and the tensor names and shapes against the
  model it started with (as sglang refuses weights of another architecture), and only then
  takes weight_version. 200 {"success": true, ...}, else 400 {"success": false, "message"};
- GET /get_weight_version, /get_model_info, /get_server_info: the weight version it holds;
- POST /generate {"input_ids", "image_data"?, "sampling_params", "return_logprob"}: checks the
  one-pad-per-image contract, answers meta_info.output_token_logprobs and finish_reason.
- GET /standin/records (its own, not sglang's): every load (path, version, sha256 of each file
  read, tensor count) and how many /generate calls each weight version served. Each load is
  also logged as one `standin-load {json}` line, so the record outlives the pod.

Generation is deterministic, not the model's: the tokens are drawn from a hash of the loaded
weights' digest and the prompt, with the log-prob of a uniform policy over the vocabulary. Running
the tiny Qwen2.5-VL here would need sglang's image-pad expansion and processor (what this test
cannot check anyway, see the engine's docstring) and a CPU forward per turn on a loaded 2-core
machine; what this stand-in is for is the weight path: which files reach the server, when.
Standard library only, so it runs in any Python 3.11 image (the test layers it on the
operator's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import signal
import struct
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip


class LoadError(Exception):
    pass


def read_safetensors(path: Path) -> tuple[dict[str, tuple[str, tuple[int, ...]]], str]:
    """Every tensor of one safetensors file (name -> dtype, shape), all its bytes read and
    checked, and the file's sha256. The format: an 8-byte little-endian header length, a JSON
    header of {name: {dtype, shape, data_offsets}}, then the data."""
    data = path.read_bytes()
    if len(data) < 8:
        raise LoadError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as err:
        raise LoadError(f"{path}: bad header: {err}") from err
    body = len(data) - 8 - size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        want = math.prod(info["shape"]) * DTYPE_BYTES[info["dtype"]]
        if end - begin != want or not 0 <= begin <= end <= body:
            raise LoadError(f"{path}: tensor {name} has {end - begin} bytes, wants {want}")
        tensors[name] = (info["dtype"], tuple(info["shape"]))
    return tensors, hashlib.sha256(data).hexdigest()


def read_weights(model_path: str) -> dict[str, Any]:
    """Every *.safetensors file of a HF model directory: tensors, sha256 per file, digest."""
    root = Path(model_path)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        raise LoadError(f"no *.safetensors file in {model_path}")
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    sums = {}
    for f in files:
        found, sums[f.name] = read_safetensors(f)
        tensors.update(found)
    digest = hashlib.sha256("".join(sums[k] for k in sorted(sums)).encode()).hexdigest()
    return {"tensors": tensors, "sha256": sums, "digest": digest}


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        config = json.loads((Path(args.model_path) / "config.json").read_text())
        text = config.get("text_config", config)
        self.vocab = int(text["vocab_size"])
        self.image_pad = int(config["image_token_id"])
        # Ordinary tokens only: the added (special) ones start at the bos id in Qwen's vocab.
        self.ordinary = int(text.get("bos_token_id") or self.vocab)
        base = read_weights(args.model_path)
        self.shapes = base["tensors"]
        self.version = "default"  # sglang's server_args.weight_version before any update
        self.digest = base["digest"]
        self.loads: list[dict[str, Any]] = []
        self.served: Counter[str] = Counter()
        self._record(args.model_path, self.version, base, 0.0)

    def _record(self, path: str, version: str, w: dict[str, Any], seconds: float) -> None:
        row = {"model_path": path, "weight_version": version, "sha256": w["sha256"],
               "tensors": len(w["tensors"]), "seconds": round(seconds, 3)}  # fmt: skip
        self.loads.append(row)
        print("standin-load " + json.dumps(row), flush=True)

    def update(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = body.get("model_path")
        version = body.get("weight_version")
        if not isinstance(path, str) or not (version is None or isinstance(version, str)):
            return 400, {"success": False, "message": "model_path (str) required, "
                         "weight_version must be a str"}  # fmt: skip
        started = time.monotonic()
        try:
            w = read_weights(path)
        except (OSError, LoadError, KeyError) as err:
            return 400, {"success": False, "message": f"Failed to update weights: {err}"}
        if w["tensors"] != self.shapes:
            diff = sorted(set(w["tensors"].items()) ^ set(self.shapes.items()))[:3]
            return 400, {"success": False, "message": f"weights do not fit the model: {diff}"}
        with self.lock:
            if version is not None:
                self.version = version
            self.digest = w["digest"]
            self._record(path, self.version, w, time.monotonic() - started)
        return 200, {"success": True, "message": "Succeeded to update model weights.",
                     "num_paused_requests": 0}  # fmt: skip

    def generate(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        ids, sp = body.get("input_ids"), body.get("sampling_params") or {}
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return 400, {"error": {"message": "input_ids: a list of token ids is required"}}
        images = body.get("image_data") or []
        if ids.count(self.image_pad) != len(images):  # sglang expands one pad per image
            return 400, {"error": {"message": f"{ids.count(self.image_pad)} image pads for "
                                   f"{len(images)} images"}}  # fmt: skip
        with self.lock:
            version, digest = self.version, self.digest
            self.served[version] += 1
        seed = hashlib.sha256(f"{digest}:{ids}".encode()).digest()
        stops = [int(t) for t in sp.get("stop_token_ids") or []]
        n = int(sp.get("max_new_tokens", 16))
        k = min(n, 6) - (1 if stops and n <= 6 else 0)  # room for a stop id where one is asked
        out = [seed[i] * 7 % self.ordinary for i in range(k)] + stops[:1]
        finish = ({"type": "stop", "matched": out[-1]} if stops and out and out[-1] in stops
                  else {"type": "length", "length": len(out)})  # fmt: skip
        lp = -math.log(self.vocab)
        meta = {"id": seed.hex()[:16], "finish_reason": finish, "prompt_tokens": len(ids),
                "completion_tokens": len(out), "weight_version": version,
                "output_token_logprobs": [[lp, t, None] for t in out]}  # fmt: skip
        return 200, {"text": "", "output_ids": out, "meta_info": meta}

    def info(self) -> dict[str, Any]:
        with self.lock:
            return {"model_path": self.args.model_path, "tokenizer_path": self.args.model_path,
                    "is_generation": True, "weight_version": self.version}  # fmt: skip

    def records(self) -> dict[str, Any]:
        with self.lock:
            return {"loads": list(self.loads), "generated": dict(self.served)}


def handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the engine's httpx client pools

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # (http.server's names)
            routes = {
                "/health": lambda: {}, "/health_generate": lambda: {},
                "/get_weight_version": lambda: {"weight_version": server.info()["weight_version"]},
                "/get_model_info": server.info,
                "/get_server_info": lambda: {**vars(server.args), **server.info()},
                "/standin/records": server.records,
            }  # fmt: skip
            route = routes.get(self.path)
            if route is None:
                return self._send(404, {"detail": "Not Found"})
            self._send(200, route())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._send(400, {"error": {"message": "the body is not JSON"}})
            routes = {"/generate": server.generate, "/update_weights_from_disk": server.update}
            route = routes.get(self.path)
            if route is None or not isinstance(body, dict):
                return self._send(404 if route is None else 400, {"detail": "bad request"})
            self._send(*route(body))

        def log_message(self, format: str, *args: Any) -> None:
            if "/health" not in self.path:  # the readiness probe every 5 s: not worth a line
                sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler


def main(argv: list[str] | None = None) -> None:
    # Exactly the flags the operator's Deployment passes (children.build_sglang): another one
    # means the Deployment changed, and this test should say so rather than ignore it.
    parser = argparse.ArgumentParser(prog="sglang.launch_server (kubecua test stand-in)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", type=int, default=1)
    args = parser.parse_args(argv)
    server = Server(args)
    print(f"stand-in sglang on {args.host}:{args.port}, model {args.model_path}", flush=True)
    # PID 1 of its container: without a handler SIGTERM would be ignored until the grace ends.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ThreadingHTTPServer((args.host, args.port), handler(server)).serve_forever()


if __name__ == "__main__":
    main()
