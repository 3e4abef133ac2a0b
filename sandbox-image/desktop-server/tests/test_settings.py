"""Settings from KUBECUA_* variables (pydantic-settings) and the token by the sandbox client's
reader: values parse, and a wrong one stops the server with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubecua_desktop.settings import Settings, SettingsError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("KUBECUA_"):
            monkeypatch.delenv(name)


def test_variables_parse_into_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("mounted\n")
    for name, value in {
        "KUBECUA_SANDBOX_TOKEN_FILE": str(tmp_path / "token"),
        "KUBECUA_DESKTOP_TRUST_LOOPBACK": "1",
        "KUBECUA_DESKTOP_FILE_ROOTS": "/srv:/data",
        "KUBECUA_DESKTOP_CAPTURE": "xgetimage",
        "KUBECUA_DESKTOP_WARM_PYTHON": "0",
        "KUBECUA_RECORDING_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(name, value)
    s = Settings.from_env(host="0.0.0.0", port=5001)
    assert (s.host, s.port, s.token, s.trust_loopback) == ("0.0.0.0", 5001, "mounted", True)
    assert s.file_roots == [Path("/srv"), Path("/data")]
    assert (s.capture_backend, s.warm_python, s.recording_dir) == ("xgetimage", False, tmp_path)


def test_defaults_and_empty_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_DESKTOP_TRUST_LOOPBACK", "")
    s = Settings.from_env()
    assert (s.token, s.trust_loopback, s.warm_python) == (None, False, True)
    assert s.file_roots == [Path.home(), Path("/tmp")]
    with pytest.raises(SettingsError, match="no bearer token: set KUBECUA_SANDBOX_TOKEN"):
        s.validate_token()


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_DESKTOP_WARM_PYTHON", "maybe")
    with pytest.raises(SettingsError, match="KUBECUA_DESKTOP_WARM_PYTHON='maybe': "):
        Settings.from_env()


def test_the_server_refuses_an_unreadable_token_file_naming_it(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "KUBECUA_SANDBOX_TOKEN_FILE": str(tmp_path / "gone")}
    out = subprocess.run(
        [sys.executable, "-m", "kubecua_desktop", "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert f"cannot read KUBECUA_SANDBOX_TOKEN_FILE={tmp_path}/gone" in out.stderr
