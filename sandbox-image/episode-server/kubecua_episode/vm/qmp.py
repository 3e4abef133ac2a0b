"""A minimal synchronous QMP client (qemu's JSON machine protocol over a unix socket).

Only what the VM runner needs: the capabilities handshake, commands, and HMP commands through
human-monitor-command (savevm/loadvm have no QMP command in qemu 7.2). Events are skipped."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any


class QmpError(RuntimeError):
    pass


class Qmp:
    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._sock: socket.socket | None = None
        self._buf = b""

    def connect(self, wait_s: float = 10.0) -> None:
        """Connect once qemu has made the socket (it does so right after it starts)."""
        deadline = time.monotonic() + wait_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            try:
                sock.connect(str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise QmpError(f"no QMP socket at {self.path} after {wait_s:.0f} s") from None
                time.sleep(0.05)
        self._sock = sock
        self._read()  # the greeting
        self.command("qmp_capabilities")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _read(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise QmpError("qemu closed the QMP connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        return msg

    def command(self, name: str, **arguments: Any) -> Any:
        if self._sock is None:
            raise QmpError("not connected")
        msg: dict[str, Any] = {"execute": name}
        if arguments:
            msg["arguments"] = arguments
        self._sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read()
            if "event" in reply:
                continue
            if "error" in reply:
                raise QmpError(f"{name}: {reply['error'].get('desc', reply['error'])}")
            return reply.get("return")

    def hmp(self, line: str, timeout_s: float | None = None) -> str:
        """An HMP command; HMP reports failures as text, which this raises as QmpError."""
        assert self._sock is not None
        self._sock.settimeout(timeout_s or self.timeout_s)
        try:
            out = str(self.command("human-monitor-command", **{"command-line": line}))
        finally:
            self._sock.settimeout(self.timeout_s)
        if out.strip().lower().startswith("error") or "Error:" in out:
            raise QmpError(f"{line}: {out.strip()}")
        return out
