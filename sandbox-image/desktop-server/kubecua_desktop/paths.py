"""Path safety for /file, /setup/upload, /list_directory and friends.

Paths are expanded (~, $VARS), resolved through symlinks and '..', and must land inside one of the
allowed roots (by default the home directory and /tmp). Anything else is refused with a 4xx.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fastapi import HTTPException, status


def resolve_safe(raw: str, roots: Sequence[Path]) -> Path:
    """The resolved path, or HTTPException 400 (malformed) / 403 (outside the roots).

    With roots [/home/user, /tmp]: "~/a.txt" -> /home/user/a.txt;
    "/home/user/../../etc/passwd" -> 403; "a.txt" -> 400 (relative).
    """
    if not raw or "\x00" in raw:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "path is empty or contains a NUL byte")
    path = Path(os.path.expandvars(os.path.expanduser(raw)))
    if not path.is_absolute():
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"path must be absolute or start with ~/: {raw!r}"
        )
    real = path.resolve()
    if not any(real.is_relative_to(root.resolve()) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"path {raw!r} resolves outside the allowed roots ({allowed})",
        )
    return real
