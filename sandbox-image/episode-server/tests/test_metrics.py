"""Every evaluator function desktop-env names resolves here by import, so any upstream OSWorld
task's evaluator runs (the one exception is refused before setup, with its reason)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import desktop_env
import pytest

from kubecua_episode import evaluators, osworld

METRICS_DIR = Path(desktop_env.__file__).parent / "evaluators" / "metrics"


def _upstream_functions() -> dict[str, set[str]]:
    """module -> the public functions it defines, read from desktop-env's source files."""
    out = {}
    for path in sorted(METRICS_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        out[path.stem] = {
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
        }
    return out


def test_every_metric_module_imports_in_this_environment() -> None:
    evaluators.load()
    modules = _upstream_functions()
    assert {"chrome", "docs", "gimp", "vlc", "slides", "pdf", "others", "vscode"} <= set(modules)
    for module, names in modules.items():
        mod = importlib.import_module(f"{evaluators.PACKAGE}.{module}")
        missing = {n for n in names if not callable(getattr(mod, n, None))}
        assert not missing, (module, missing)


def test_every_exported_metric_name_resolves_to_its_function() -> None:
    loaded = evaluators.load()
    names = evaluators.metric_names()
    assert len(names) > 100  # desktop-env 1.0.2 exports 136
    package = importlib.import_module(evaluators.PACKAGE)
    for name in names - set(evaluators.UNAVAILABLE):
        assert evaluators.metric(name) is loaded[name] is getattr(package, name), name
    some = [
        "is_vlc_playing",
        "compare_images",
        "is_expected_bookmarks",
        "check_brightness_decrease_and_structure_sim",
    ]
    some += ["compare_pptx_files", "check_pdf_pages", "check_mp3_meta", "compare_docx_files"]
    for name in some:
        assert callable(evaluators.metric(name)), name


def test_ocr_metric_is_refused_with_its_reason_before_setup() -> None:
    task = {"instruction": "x", "evaluator": {"func": "compare_image_text", "result": {}}}
    with pytest.raises(osworld.TaskError, match="easyocr, which needs torch"):
        osworld.validate_task(task)
    with pytest.raises(osworld.TaskError, match="unknown metric 'no_such_metric'"):
        osworld.validate_task({**task, "evaluator": {"func": ["exact_match", "no_such_metric"]}})
