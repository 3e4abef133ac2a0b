"""The package's layering, read from its import graph (kubecua_testkit.import_layers: ast, nothing
imported):

- kubecua_trainer never imports the benchmarks and test harness (trainer/bench/), which the
  image leaves out;
- no upward imports: a module of a subpackage (kubecua_trainer.warmup, .engines, ...) imports no
  module outside it that imports the subpackage back, directly or through others. Imports under
  `if TYPE_CHECKING:` are left out: they never run;
- no two modules import each other, imports for types included: such a pair means one of them
  holds what the other needs and belongs in a third (evaluation/stage.py and loop.py were one,
  until HeldOut moved to evaluation/held_out.py).
"""

from __future__ import annotations

from pathlib import Path

from kubecua_testkit.import_layers import import_graph, inside, mutual_imports, upward_imports

ROOT = Path(__file__).resolve().parents[1]


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
    graph = import_graph(ROOT, "kubecua_trainer")
    assert "kubecua_trainer.train" in graph["kubecua_trainer.cli"]  # imported inside a function
    assert "kubecua_trainer.loop" not in graph["kubecua_trainer.pipeline"]  # TYPE_CHECKING only
    assert "kubecua_trainer.evaluation.stage" in graph["kubecua_trainer.pipeline"]


def test_the_package_has_no_upward_imports() -> None:
    assert upward_imports(import_graph(ROOT, "kubecua_trainer")) == []


def test_the_checker_finds_two_modules_importing_each_other_for_types() -> None:
    graph = {"pkg.loop": {"pkg.sub.stage"}, "pkg.sub.stage": {"pkg.loop"}, "pkg.util": set()}
    assert mutual_imports(graph) == [("pkg.loop", "pkg.sub.stage")]
    types = import_graph(ROOT, "kubecua_trainer", types_too=True)
    assert "kubecua_trainer.loop" in types["kubecua_trainer.pipeline"]  # TYPE_CHECKING only
    assert "kubecua_trainer.evaluation.held_out" in types["kubecua_trainer.loop"]


def test_no_two_modules_import_each_other_even_for_types() -> None:
    assert mutual_imports(import_graph(ROOT, "kubecua_trainer", types_too=True)) == []


def test_the_package_never_imports_the_benchmarks() -> None:
    graph = import_graph(ROOT, "kubecua_trainer", "bench")
    users = {m: sorted(i for i in imp if inside(i, "bench")) for m, imp in graph.items()}
    assert {m: u for m, u in users.items() if inside(m, "kubecua_trainer") and u} == {}
