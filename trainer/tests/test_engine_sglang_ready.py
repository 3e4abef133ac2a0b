"""The sglang engine waits for its servers before its first request.

The operator starts the trainer and the sglang Deployment together, so the trainer's first
/generate (or, on a resume, /update_weights_from_disk) can reach a server that refuses
connections (still loading its model) or answers GET /health with 503 (still warming up, as
sglang does while its server_status is Starting). The server here is a real http.server on a
socket that is bound but not listening until the test says so: connecting to it is refused, as
to a pod whose server has not opened its port yet.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.testing.http import send_json
from kubecua_trainer.engines.base import EngineError, SamplingParams
from kubecua_trainer.engines.sglang import SGLangEngine

STOP = 2
ENGINE_LOG = "kubecua_trainer.engines.sglang"


class StartingServer:
    """Refuses connections until listen(); then answers /health 503 until loaded is set, as
    sglang does during its warm-up, and 200 after. Records (method, path, status) in order."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.loaded = threading.Event()
        self.answered_503 = threading.Event()
        self.seen: list[tuple[str, str, int]] = []
        self.bodies: list[dict[str, Any]] = []
        self._httpd: ThreadingHTTPServer | None = None

    def listen(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the engine's client pools

            def _send(self, code: int, body: Any) -> None:
                outer.seen.append((self.command, self.path, code))
                send_json(self, code, body)
                if code == 503:
                    outer.answered_503.set()

            def do_GET(self) -> None:  # (http.server's names)
                if self.path != "/health":
                    return self._send(404, {"detail": "Not Found"})
                self._send(200 if outer.loaded.is_set() else 503, {})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                if not outer.loaded.is_set():  # what sglang would do is beside the point:
                    return self._send(503, {})  # the engine must not ask before it is up
                if self.path == "/update_weights_from_disk":
                    return self._send(200, {"success": True, "message": "ok"})
                out = [11, 12, STOP]
                logprobs = [[-0.1 * (i + 1), t, None] for i, t in enumerate(out)]
                meta = {"finish_reason": {"type": "stop"}, "output_token_logprobs": logprobs}
                self._send(200, {"output_ids": out, "meta_info": meta})

            def log_message(self, format: str, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(self.sock.getsockname(), Handler, bind_and_activate=False)
        httpd.socket.close()
        httpd.socket = self.sock
        httpd.server_activate()  # listen(): from here connections are accepted
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        else:
            self.sock.close()


@pytest.fixture
def starting() -> Iterator[StartingServer]:
    server = StartingServer()
    yield server
    server.close()


class Waiting(logging.Handler):
    """Sets an event when the engine logs that it waits for url."""

    def __init__(self, url: str) -> None:
        super().__init__(logging.INFO)
        self.url, self.lines = url, []
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if "waiting for sglang servers" in line and self.url in line:
            self.event.set()


@pytest.fixture
def waiting_log(caplog: pytest.LogCaptureFixture) -> Iterator[list[Waiting]]:
    caplog.set_level(logging.INFO, logger=ENGINE_LOG)
    handlers: list[Waiting] = []
    yield handlers
    for h in handlers:
        logging.getLogger(ENGINE_LOG).removeHandler(h)


def _watch(handlers: list[Waiting], url: str) -> Waiting:
    h = Waiting(url)
    logging.getLogger(ENGINE_LOG).addHandler(h)
    handlers.append(h)
    return h


async def _until(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 30), "timed out waiting for the event"


def test_first_requests_wait_for_a_server_that_starts_late(
    starting: StartingServer, waiting_log: list[Waiting]
) -> None:
    log = _watch(waiting_log, starting.url)

    async def run() -> None:
        engine = SGLangEngine([starting.url], image_pad_id=9, ready_timeout_s=60)
        # Both first uses, concurrently, as at a resume with episodes right behind it.
        update = asyncio.ensure_future(engine.update_weights(4, "/ckpt/step-00000004"))
        gen = asyncio.ensure_future(engine.generate([1, 5], [], SamplingParams(0.7, 0.9, 8)))
        await _until(log.event)  # refused: the engine says it waits, and for which URL
        assert (update.done(), gen.done()) == (False, False)
        starting.listen()
        await _until(starting.answered_503)  # up but warming up: it keeps waiting
        assert (update.done(), gen.done()) == (False, False)
        starting.loaded.set()
        await update
        generation = await gen
        assert generation.token_ids == [11, 12, STOP]
        assert generation.logprobs == pytest.approx([-0.1, -0.2, -0.3])
        assert engine.weights_step == 4
        await engine.close()

    asyncio.run(run())
    assert "ConnectError" in log.lines[0]  # the log says why it waits
    assert re.fullmatch(rf"sglang servers up after \d+s: {re.escape(starting.url)}", log.lines[-1])
    posts = [(p, s) for m, p, s in starting.seen if m == "POST"]
    assert sorted(posts) == [("/generate", 200), ("/update_weights_from_disk", 200)]
    first_post = next(i for i, (m, _, _) in enumerate(starting.seen) if m == "POST")
    health = starting.seen[:first_post]
    assert {s for _, _, s in health} == {503, 200}  # asked while warming up, then once up
    assert health[-1] == ("GET", "/health", 200)


def test_a_server_that_never_answers_is_named_in_the_error(
    starting: StartingServer, waiting_log: list[Waiting]
) -> None:
    """Two servers, one never listening: the error names that one only, and what to check."""
    up = StartingServer()
    up.listen()
    up.loaded.set()

    async def run() -> tuple[EngineError, EngineError]:
        engine = SGLangEngine([up.url, starting.url], image_pad_id=9, ready_timeout_s=0.5)
        with pytest.raises(EngineError) as err:
            await engine.generate([1, 5], [], SamplingParams())
        # Every later request gives the same answer rather than waiting all over again.
        with pytest.raises(EngineError) as again:
            await engine.update_weights(1, "/ckpt/step-00000001")
        await engine.close()
        return err.value, again.value

    try:
        first, later = asyncio.run(run())
    finally:
        up.close()
    msg = str(first)
    assert f"{starting.url} (ConnectError" in msg
    assert up.url not in msg
    assert "did not answer GET /health within 0.5s" in msg
    assert "kubectl get pods" in msg
    assert "rollout.sglangUrls" in msg
    assert later is first
    assert [p for m, p, _ in up.seen if m == "POST"] == []  # nothing sent anywhere


def test_a_url_that_is_not_http_fails_at_once() -> None:
    """No waiting out the deadline for a URL that can never answer (a missing scheme)."""

    async def run() -> None:
        engine = SGLangEngine(["sglang-run:30000"], image_pad_id=9, ready_timeout_s=600)
        with pytest.raises(EngineError, match="'sglang-run:30000' is not an http"):
            await engine.generate([1, 5], [], SamplingParams())
        await engine.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_ready_timeout_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="ready_timeout_s must be >= 0, got -1"):
        SGLangEngine(["http://127.0.0.1:1"], image_pad_id=9, ready_timeout_s=-1)
