"""Structured logs: one JSON object per line, with the logger and the object kopf attached."""

from __future__ import annotations

import json
import logging
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        k8s = getattr(record, "k8s_ref", None)  # kopf's per-object loggers attach this
        if isinstance(k8s, dict):
            entry["object"] = {k: k8s.get(k) for k in ("kind", "namespace", "name") if k8s.get(k)}
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
