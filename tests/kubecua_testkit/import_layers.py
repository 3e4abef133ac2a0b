"""A package's layering, read from its import graph (ast, nothing imported), for the layering tests
of the trainer (trainer/tests/test_import_layers.py) and the operator
(operator/tests/test_import_layers.py):

- upward imports: a module of a subpackage (kubecua_trainer.warmup, kubecua_operator.trainingrun,
  ...) imports a module outside it that imports the subpackage back, directly or through others;
- mutual imports: two modules that import each other. Such a pair means one of them holds what
  the other needs, and it belongs in a third;
- tier violations: a package's rooms (its subpackages) stacked in a table of tiers, top first;
  a room's module imports no room of its own tier or one above it, and every room is in the table.
Imports under `if TYPE_CHECKING:` never run: import_graph leaves them out unless types_too.
"""

from __future__ import annotations

import ast
from pathlib import Path

Graph = dict[str, set[str]]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str], types_too: bool) -> set[str]:
    """Modules of `modules` that the tree imports at run time (module or function level), and
    under `if TYPE_CHECKING:` too with types_too."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not types_too:
            for stmt in node.orelse:
                visit(stmt)
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


def import_graph(root: Path, *packages: str, types_too: bool = False) -> Graph:
    """Module -> the modules of `packages` (folders under root) it imports."""
    files = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for pkg in packages
        for p in (root / pkg).rglob("*.py")
    }
    modules = set(files)
    return {
        m: _imports(ast.parse(p.read_text()), modules, types_too) - {m} for m, p in files.items()
    }


def reach(graph: Graph, start: str) -> set[str]:
    """start and every module it imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_imports(graph: Graph) -> list[tuple[str, str]]:
    """(module, import) pairs where a subpackage's module imports a module outside the subpackage
    that reaches back into it."""
    packages = {m.rsplit(".", 1)[0] for m in graph if m.count(".") >= 2}
    bad = []
    for module, imported in graph.items():
        for pkg in (p for p in packages if inside(module, p)):
            for target in imported:
                if not inside(target, pkg) and any(inside(r, pkg) for r in reach(graph, target)):
                    bad.append((module, target))
    return sorted(set(bad))


def mutual_imports(graph: Graph) -> list[tuple[str, str]]:
    """Pairs of modules that import each other (each pair once, in name order)."""
    return sorted({(a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ())})


def tier_violations(
    graph: Graph, package: str, tiers: list[tuple[str, ...]]
) -> list[tuple[str, str]]:
    """(module, import) pairs where a module of one of package's rooms (its subpackages) imports a
    room of the same tier or a tier above (tiers: the rooms' names, the top tier first), and
    (module, "") for a module of a room the table leaves out. The package's own top-level modules
    are no room: upward_imports keeps them out of circles."""
    tier = {room: i for i, rooms in enumerate(tiers) for room in rooms}

    def room(module: str) -> str | None:
        if not inside(module, package) or module == package:
            return None
        parts = module[len(package) + 1 :].split(".")
        return parts[0] if len(parts) > 1 or parts[0] in tier else None

    bad = []
    for module, imported in graph.items():
        own = room(module)
        if own is None:
            continue
        if own not in tier:
            bad.append((module, ""))
            continue
        for target in imported:
            other = room(target)
            if other is not None and other != own and tier.get(other, -1) <= tier[own]:
                bad.append((module, target))
    return sorted(set(bad))
