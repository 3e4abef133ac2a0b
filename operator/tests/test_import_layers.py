"""The operator's layering, read from its import graph (kubecua_testkit.import_layers: ast,
nothing imported), as trainer/tests/test_import_layers.py checks the trainer's:

- no upward imports: a module of a subpackage (kubecua_operator.sandboxpool, .trainingrun, ...)
  imports no module outside it that imports the subpackage back, directly or through others
  (imports under `if TYPE_CHECKING:` left out: they never run). A run's children learn the name
  of its pool's token Secret from the pool_readiness index (main.py), not from the pool's
  backends;
- no two modules import each other, imports for types included.
"""

from __future__ import annotations

from pathlib import Path

from kubecua_testkit.import_layers import import_graph, mutual_imports, upward_imports

ROOT = Path(__file__).resolve().parents[1]


def test_the_operator_has_no_upward_imports() -> None:
    assert upward_imports(import_graph(ROOT, "kubecua_operator")) == []


def test_no_two_operator_modules_import_each_other_even_for_types() -> None:
    assert mutual_imports(import_graph(ROOT, "kubecua_operator", types_too=True)) == []


def test_the_graph_reads_the_controllers_imports() -> None:
    graph = import_graph(ROOT, "kubecua_operator")
    assert "kubecua_operator.sandboxpool.loop" in graph["kubecua_operator.main"]
    assert "kubecua_operator.trainingrun.reconcile" in graph["kubecua_operator.main"]
    assert "kubecua_operator.k8s" in graph["kubecua_operator.trainingrun.reconcile"]
