"""The sandbox bearer token, read by one rule wherever it is needed: the desktop server, the
episode server and the trainer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TOKEN_VAR = "KUBECUA_SANDBOX_TOKEN"
TOKEN_FILE_VAR = "KUBECUA_SANDBOX_TOKEN_FILE"


class TokenError(ValueError):
    """The token file cannot be read or holds no token; the message names the variable."""


def read_token(env: Mapping[str, str] | None = None) -> str | None:
    """$KUBECUA_SANDBOX_TOKEN, else the file $KUBECUA_SANDBOX_TOKEN_FILE names (a mounted Secret),
    stripped; None when neither is set (an empty variable counts as unset). A named file that
    cannot be read or is blank raises TokenError: a wrong path never runs without a token."""
    env = os.environ if env is None else env
    if token := env.get(TOKEN_VAR, "").strip():
        return token
    path = env.get(TOKEN_FILE_VAR, "").strip()
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise TokenError(f"cannot read {TOKEN_FILE_VAR}={path}: {exc}") from exc
    if not token:
        raise TokenError(f"{TOKEN_FILE_VAR}={path} is empty")
    return token
