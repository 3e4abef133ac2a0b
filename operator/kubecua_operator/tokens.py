"""Pool bearer tokens, derived from one operator key: HMAC-SHA256(key, "<namespace>/<pool>/<uid>").

The operator never reads a Secret (its RBAC has no Secret read): it writes a pool's token Secret
from the derived value, can recreate a deleted one with the same token, and knows every pool's
token again after a restart. The key comes from a file (the chart mounts a Secret of the
operator's namespace); without one, a key is made once under ~/.cache/kubecua.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from functools import lru_cache
from pathlib import Path

from kubecua_operator import names
from kubecua_operator import settings as settings_mod


class TokenKeyError(ValueError):
    """The configured key cannot be used (missing, or shorter than names.MIN_TOKEN_BYTES)."""


def default_key_path() -> Path:
    cache = Path(os.environ.get("KUBECUA_CACHE", Path.home() / ".cache" / "kubecua"))
    return cache / "operator-token.key"


@lru_cache(maxsize=1)
def key() -> bytes:
    configured = settings_mod.get().token_key_file
    path = Path(configured) if configured else default_key_path()
    if not path.exists() and not configured:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    try:
        raw = path.read_bytes().strip()
    except OSError as err:
        raise TokenKeyError(f"token key file {path}: {err}") from None
    if len(raw) < names.MIN_TOKEN_BYTES:
        raise TokenKeyError(
            f"token key file {path}: {len(raw)} bytes, need >= {names.MIN_TOKEN_BYTES}"
        )
    return raw


def pool_token(namespace: str, pool: str, uid: str, secret_key: bytes | None = None) -> str:
    """43 URL-safe characters (32 bytes); a new pool (new uid) under an old name gets a new one.

    >>> k = b"k" * 32
    >>> a = pool_token("ns", "desks", "u-1", k)
    >>> len(a), a == pool_token("ns", "desks", "u-1", k), a == pool_token("ns", "desks", "u-2", k)
    (43, True, False)
    """
    mac = hmac.new(secret_key or key(), f"{namespace}/{pool}/{uid}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")
