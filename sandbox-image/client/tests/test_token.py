"""One token rule for every reader: the variable, else the file it names; stripped; a named file
that is missing or blank is an error naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubecua_sandbox_client import TokenError, read_token


def test_the_variable_wins_over_the_file_and_is_stripped(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    env = {"KUBECUA_SANDBOX_TOKEN": " from-env\n", "KUBECUA_SANDBOX_TOKEN_FILE": "/nonexistent"}
    assert read_token(env) == "from-env"
    env["KUBECUA_SANDBOX_TOKEN_FILE"] = str(tmp_path / "token")
    assert read_token(env) == "from-env"


def test_the_file_is_read_and_stripped_when_the_variable_is_unset_or_blank(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("mounted-token\n")
    path = str(tmp_path / "token")
    assert read_token({"KUBECUA_SANDBOX_TOKEN_FILE": path}) == "mounted-token"
    assert read_token({"KUBECUA_SANDBOX_TOKEN": "  ", "KUBECUA_SANDBOX_TOKEN_FILE": path}) == (
        "mounted-token"
    )


def test_neither_set_is_no_token() -> None:
    assert read_token({}) is None
    assert read_token({"KUBECUA_SANDBOX_TOKEN": "", "KUBECUA_SANDBOX_TOKEN_FILE": " "}) is None


def test_a_missing_or_blank_file_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(TokenError, match=f"cannot read KUBECUA_SANDBOX_TOKEN_FILE={missing}: "):
        read_token({"KUBECUA_SANDBOX_TOKEN_FILE": str(missing)})
    (tmp_path / "blank").write_text(" \n")
    with pytest.raises(TokenError, match=f"KUBECUA_SANDBOX_TOKEN_FILE={tmp_path}/blank is empty"):
        read_token({"KUBECUA_SANDBOX_TOKEN_FILE": str(tmp_path / "blank")})


def test_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN", "process-token")
    assert read_token() == "process-token"
