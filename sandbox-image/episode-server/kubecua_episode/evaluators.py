"""desktop-env's metric functions, every module of them (desktop_env.evaluators.metrics).

Their dependencies are in this project's lock file, except easyocr: it needs torch (GBs, see the
dependency-metadata block of pyproject.toml). A stand-in module takes its place so that docs.py
imports; the one function that runs OCR (compare_image_text) is refused when a task is
validated: upstream catches the OCR error and would score the episode 0, a wrong reward.

Importing every module takes seconds (pandas, scikit-image, librosa, borb), and desktop-env's
SetupController imports one metric module (utils), which would run the package's __init__ and
with it all of them. So importing this module registers the package without running its
__init__ (submodules then import alone); names are read from __init__.py's source; and the
__init__ itself runs once, in a background thread started with the server (`preload`);
/readyz says Starting until it is done, and `metric()` waits for it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import os
import sys
import threading
import types
from collections.abc import Callable
from functools import cache
from typing import Any

import desktop_env

PACKAGE = "desktop_env.evaluators.metrics"
_INIT = os.path.join(os.path.dirname(desktop_env.__file__), "evaluators", "metrics", "__init__.py")
UNAVAILABLE = {
    "compare_image_text": "it reads text with easyocr, which needs torch; this sandbox does not "
    "install torch (pyproject.toml, dependency-metadata)",
}
_lock = threading.Lock()
_loaded = threading.Event()
_error: list[str] = []
log = logging.getLogger("kubecua.episode")


@cache
def metric_names() -> frozenset[str]:
    """Every name desktop_env.evaluators.metrics exports (its `from .x import (...)` lines)."""
    with open(_INIT) as f:
        tree = ast.parse(f.read())
    return frozenset(
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    )


class _NotInstalled(types.ModuleType):
    """A module deliberately left out: importing it works, using it raises."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ModuleNotFoundError(f"{self.__name__} is not installed in this sandbox")


def _stand_in(name: str) -> None:  # before any metric module imports it
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        sys.modules[name] = _NotInstalled(name)


def _register() -> types.ModuleType:
    """The metric package in sys.modules, its __init__ not run yet."""
    spec = importlib.util.spec_from_file_location(
        PACKAGE, _INIT, submodule_search_locations=[os.path.dirname(_INIT)]
    )
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    return module


_stand_in("easyocr")
_PENDING = PACKAGE not in sys.modules  # its __init__ is still to run (by _load)
_PACKAGE = sys.modules.get(PACKAGE) or _register()


@cache
def _load() -> dict[str, Callable[..., Any]]:
    spec = _PACKAGE.__spec__
    if _PENDING and spec is not None and spec.loader is not None:
        spec.loader.exec_module(_PACKAGE)  # runs __init__: imports every metric module
    return {name: getattr(_PACKAGE, name) for name in metric_names()}


def load() -> dict[str, Callable[..., Any]]:
    """Imports the metric package (once; concurrent callers wait for the first)."""
    with _lock:
        funcs = _load()
    _loaded.set()
    return funcs


def loaded() -> bool:
    """The sandbox is not ready before: a first evaluation must not wait seconds for imports."""
    return _loaded.is_set()


def import_error() -> str | None:
    """Why the import failed (a broken environment), for /readyz; None while fine."""
    return _error[0] if _error else None


def _preload() -> None:
    try:
        load()
    except Exception as e:  # the server stays up and says why it is not ready
        log.exception("importing desktop-env's metric modules failed")
        _error.append(f"{type(e).__name__}: {e}")


def preload() -> threading.Thread:
    thread = threading.Thread(target=_preload, name="metrics-import", daemon=True)
    thread.start()
    return thread


def unavailable(name: str) -> str | None:
    """Why a metric cannot run here, or None when it can."""
    if name in UNAVAILABLE:
        return f"metric {name!r} cannot run here: {UNAVAILABLE[name]}"
    if name not in metric_names():
        return f"unknown metric {name!r} (not in desktop_env.evaluators.metrics)"
    return None


def metric(name: str) -> Callable[..., Any]:
    if why := unavailable(name):
        raise LookupError(why)
    return load()[name]
