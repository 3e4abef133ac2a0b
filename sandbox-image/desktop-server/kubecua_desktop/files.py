"""What the file routes do: directory trees, uploads, downloads and opening files."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path
from typing import IO, Any

import httpx
from fastapi import HTTPException, status

from kubecua_desktop.desktop import Desktop
from kubecua_desktop.procs import Launcher

MAX_TREE_ENTRIES = 20_000  # bounds the response for a mistaken "/" style request
DOWNLOAD_TRIES = 3


def directory_tree(root: Path) -> dict[str, Any]:
    """OSWorld's shape: {"type": "directory", "name", "children": [...]}, files as {"type": "file"}.

    A directory that cannot be read becomes {"error": "..."} like upstream.
    """
    budget = [MAX_TREE_ENTRIES]

    def walk(directory: Path) -> dict[str, Any]:
        tree: dict[str, Any] = {"type": "directory", "name": directory.name, "children": []}
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            return {"error": str(exc)}
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                raise HTTPException(
                    status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
                    f"more than {MAX_TREE_ENTRIES} entries under {root}; ask for a smaller dir",
                )
            if entry.is_dir(follow_symlinks=False):
                tree["children"].append(walk(Path(entry.path)))
            else:
                tree["children"].append({"type": "file", "name": entry.name})
        return tree

    if not root.is_dir():
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"not a directory: {root}")
    return walk(root)


def _refuse_os_error(target: Path, exc: OSError) -> HTTPException:
    """A write the caller's path makes impossible is a 4xx (found by fuzzing: an upload below a
    file, or onto a directory, was a 500); anything else (a full disk) stays a 500."""
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG):
        return HTTPException(status.HTTP_400_BAD_REQUEST, f"cannot write {target}: {exc}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return HTTPException(status.HTTP_403_FORBIDDEN, f"cannot write {target}: {exc}")
    return HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, f"cannot write {target}: {exc}")


def save_stream(source: IO[bytes], target: Path) -> int:
    """Write source to target (creating parent dirs); the byte count. Partial files are removed."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refuse_os_error(target, exc) from exc
    try:
        with target.open("wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    except OSError as exc:
        if not target.is_dir():
            target.unlink(missing_ok=True)
        raise _refuse_os_error(target, exc) from exc
    return target.stat().st_size


def download(url: str, target: Path) -> int:
    """Fetch url into target with up to 3 tries; the byte count, or 502 with the last error."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refuse_os_error(target, exc) from exc
    last: Exception | None = None
    for _ in range(DOWNLOAD_TRIES):
        try:
            with httpx.stream("GET", url, timeout=300, follow_redirects=True) as response:
                response.raise_for_status()
                with target.open("wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
            return target.stat().st_size
        except (httpx.HTTPError, OSError) as exc:
            last = exc
            target.unlink(missing_ok=True)
    raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"download of {url} failed: {last}")


def open_and_wait(
    desktop: Desktop, launcher: Launcher, target: str, path: Path | None, timeout: float
) -> str:
    """Open a file (or start an app by name), then activate the first window that names it."""
    if path is not None:
        launcher.launch(desktop.open_command(path), env=None)
        names = [path.name, path.stem]
    else:
        launcher.launch([target], env=None)
        names = [target]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for title in desktop.window_titles():
            if any(name in title for name in names):
                desktop.activate_window(title, strict=True, by_class=False)
                return "File opened and window activated successfully"
        time.sleep(0.25)  # polling the window list; no event to wait on without a WM hook
    raise HTTPException(
        status.HTTP_504_GATEWAY_TIMEOUT, f"no window for {target} within {timeout:g} seconds"
    )
