"""The package's layering, read from its import graph (ast, nothing imported):

- kubecua_trainer never imports the benchmarks and test harness (trainer/bench/), which the
  image leaves out;
- no upward imports: a module of a subpackage (kubecua_trainer.warmup, .engines, ...) imports no
  module outside it that imports the subpackage back, directly or through others. Imports under
  `if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
Graph = dict[str, set[str]]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Modules of `modules` that the tree imports at run time (module or function level)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in modules:
                found.add(node.module)
            for a in node.names:  # `from kubecua_trainer import pipeline` names a module
                if f"{node.module}.{a.name}" in modules:
                    found.add(f"{node.module}.{a.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(*packages: str) -> Graph:
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for pkg in packages
        for p in (ROOT / pkg).rglob("*.py")
    }
    modules = set(files)
    return {m: _imports(ast.parse(p.read_text()), modules) - {m} for m, p in files.items()}


def _reach(graph: Graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_imports(graph: Graph) -> list[tuple[str, str]]:
    """(module, import) pairs where a subpackage's module imports a module outside the subpackage
    that reaches back into it."""
    packages = {m.rsplit(".", 1)[0] for m in graph if m.count(".") >= 2}
    bad = []
    for module, imported in graph.items():
        for pkg in (p for p in packages if _inside(module, p)):
            for target in imported:
                if not _inside(target, pkg) and any(_inside(r, pkg) for r in _reach(graph, target)):
                    bad.append((module, target))
    return sorted(set(bad))


def test_the_checker_finds_an_upward_import_and_leaves_a_downward_one() -> None:
    graph = {
        "pkg.train": {"pkg.sub.stage", "pkg.util"},
        "pkg.sub.stage": {"pkg.util", "pkg.train"},  # train imports stage: upward
        "pkg.sub.other": {"pkg.util"},
        "pkg.util": set(),
    }
    assert upward_imports(graph) == [("pkg.sub.stage", "pkg.train")]
    graph["pkg.sub.stage"] = {"pkg.util"}
    assert upward_imports(graph) == []


def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones() -> None:
    graph = import_graph("kubecua_trainer")
    assert "kubecua_trainer.train" in graph["kubecua_trainer.cli"]  # imported inside a function
    assert "kubecua_trainer.loop" not in graph["kubecua_trainer.pipeline"]  # TYPE_CHECKING only
    assert "kubecua_trainer.evaluation.stage" in graph["kubecua_trainer.pipeline"]


def test_the_package_has_no_upward_imports() -> None:
    assert upward_imports(import_graph("kubecua_trainer")) == []


def test_the_package_never_imports_the_benchmarks() -> None:
    graph = import_graph("kubecua_trainer", "bench")
    users = {m: sorted(i for i in imp if _inside(i, "bench")) for m, imp in graph.items()}
    assert {m: u for m, u in users.items() if _inside(m, "kubecua_trainer") and u} == {}
