"""The engines package in readable parts (issue 31 item 2): no module over 350 lines, and no import
circle among its modules, counting imports under `if TYPE_CHECKING:` too (the embedded engine's
old two files imported each other that way)."""

from __future__ import annotations

import ast
from pathlib import Path

from test_import_layers import ROOT

ENGINES = ROOT / "kubecua_trainer" / "engines"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def engine_graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in ENGINES.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.update(
                    m
                    for m in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
                    if m in files
                )
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in files)
        graph[name] = found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Modules that reach themselves through their imports.

    Example: {a: {b}, b: {a}, c: {a}} -> [a, b]."""
    out = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        if start in seen:
            out.append(start)
    return sorted(out)


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a", "b"]


def test_the_engines_import_no_circle() -> None:
    graph = engine_graph()
    assert "kubecua_trainer.engines.embedded.scheduler" in graph
    assert circles(graph) == []


def test_no_engine_module_is_over_350_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in ENGINES.rglob("*.py")}
    assert {n: s for n, s in sizes.items() if s > 350} == {}
