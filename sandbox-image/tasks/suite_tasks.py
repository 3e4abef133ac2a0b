"""The offline task suite as one family, `offline-suite`: the tables files_tasks.py (files,
terminal, editor), office_tasks.py (LibreOffice), browser_tasks.py (Chromium), desktop_tasks.py
(settings, multi-step GUI) and system_tasks.py (sudo, VLC, GIMP, sound, default apps, Chrome's
profile), each <area>/<id>.json with its solutions. It takes no parameters: each task is
written by hand. The office tables build their documents with openpyxl and python-docx
(kubecua-tasks' dependencies).

Why runpy: a table registers its tasks when its module body runs (taskkit.task), and Python
runs a module body once per process, on its first import; running each body afresh inside
taskkit.collect gives the suite's files every time the family is generated. The tables are
imported first, outside any collect, so that one table importing another (system_tasks.py
uses browser_tasks.py's helpers) finds it imported and registers nothing twice."""

from __future__ import annotations

import importlib
import runpy

from kubecua_tasks.plugin import TaskFamily
from pydantic import BaseModel, ConfigDict
from taskkit import collect

TABLES = ("files_tasks", "office_tasks", "browser_tasks", "desktop_tasks", "system_tasks")


class SuiteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _run_tables() -> None:
    for name in TABLES:
        runpy.run_module(name, run_name=name)


def build(_: SuiteParams) -> dict[str, str]:
    for name in TABLES:
        importlib.import_module(name)
    return collect(_run_tables)


OFFLINE_SUITE = TaskFamily(
    "offline-suite",
    "the offline suite: files, terminal, editor, LibreOffice, browser, settings, system areas",
    SuiteParams,
    build,
)
