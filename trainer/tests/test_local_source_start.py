"""LocalSource's start-up when a launcher dies: it fails at once with the launcher's own words,
instead of waiting out its start timeout (300 s by default) for sandboxes that cannot come."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import LocalSource


def test_a_launcher_that_exits_fails_the_start_at_once(tmp_path: Path, monkeypatch) -> None:
    launcher = tmp_path / "launcher"
    launcher.write_text("#!/bin/sh\necho 'Xvfb: cannot open display' >&2\nexit 3\n")
    launcher.chmod(0o755)
    monkeypatch.setenv("KUBECUA_SANDBOX_LOCAL", str(launcher))
    source = LocalSource(2, tmp_path / "work", start_timeout=120)
    started = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        asyncio.run(source.start(SandboxLeases()))
    assert time.monotonic() - started < 60  # not the 120 s start timeout
    assert "exited with code 3 before it was ready" in str(err.value)
    assert "Xvfb: cannot open display" in str(err.value)
    assert source.sandboxes == []  # stopped: nothing left running
