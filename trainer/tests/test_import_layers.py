"""The package's layering, read from its import graph (kubecua_testkit.import_layers: ast, nothing
imported):

- the rooms (kubecua_trainer's subpackages) stand in the tiers of ROOMS, top first: a room's
  module imports only rooms of the tiers below its own (run time; docs/architecture.md's map);
- the top level holds only the modules of TOP_LEVEL: the entry points and what every room reads
  (the spec, the policy, its tokens). A new module goes into the room of its concern;
- kubecua_trainer never imports the benchmarks and test harness (trainer/bench/), which the
  image leaves out;
- no upward imports: a module of a subpackage (kubecua_trainer.warmup, .engines, ...) imports no
  module outside it that imports the subpackage back, directly or through others. Imports under
  `if TYPE_CHECKING:` are left out: they never run;
- no two modules import each other, imports for types included: such a pair means one of them
  holds what the other needs and belongs in a third (evaluation/stage.py and run/loop.py were
  one, until HeldOut moved to evaluation/held_out.py).
"""

from __future__ import annotations

from pathlib import Path

from kubecua_testkit.import_layers import (
    import_graph,
    inside,
    mutual_imports,
    tier_violations,
    upward_imports,
)

ROOT = Path(__file__).resolve().parents[1]

# The rooms, top tier first. A room imports rooms of lower tiers only.
ROOMS = [
    ("run",),  # the order of a run: train, pipeline, step, loop, saver, stopping
    ("warmup", "placement", "weights", "report"),  # stages, process roles, weight moves, report
    ("evaluation", "learning"),  # held-out evaluation; the learner, batch, loss, checkpoints
    ("rollout",),  # episodes, groups, curriculum
    ("sources", "engines", "speedups"),  # sandboxes; generation; the learner's speed-ups
    ("parallel", "telemetry"),  # ranks, threads, one GPU shared; metrics, status, cost, console
]
# The top level: entry points (cli, launch, __main__) and what the rooms share.
TOP_LEVEL = {
    "__init__",
    "__main__",
    "cli",
    "launch",
    "config",
    "model",
    "weights_lock",
    "lora",
    "tokens",
    "trajectories",
    "tiny_models",
}


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
    assert "kubecua_trainer.run.train" in graph["kubecua_trainer.cli"]  # inside a function
    assert "kubecua_trainer.run.loop" not in graph["kubecua_trainer.run.pipeline"]  # for types
    assert "kubecua_trainer.evaluation.stage" in graph["kubecua_trainer.run.pipeline"]


def test_the_package_has_no_upward_imports() -> None:
    assert upward_imports(import_graph(ROOT, "kubecua_trainer")) == []


def test_the_rooms_import_only_the_tiers_below_them() -> None:
    assert tier_violations(import_graph(ROOT, "kubecua_trainer"), "kubecua_trainer", ROOMS) == []


def test_every_room_is_in_the_table_and_the_top_level_holds_only_its_modules() -> None:
    package = ROOT / "kubecua_trainer"
    rooms = {p.name for p in package.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert rooms == {room for tier in ROOMS for room in tier}
    assert {p.stem for p in package.glob("*.py")} == TOP_LEVEL


def test_a_planted_upward_import_fails_both_checks() -> None:
    graph = import_graph(ROOT, "kubecua_trainer")
    # telemetry/status.py importing run/train.py, which reaches telemetry/status.py back
    graph["kubecua_trainer.telemetry.status"].add("kubecua_trainer.run.train")
    # learning/loss.py importing weights/weight_sync.py, a room of a higher tier
    graph["kubecua_trainer.learning.loss"].add("kubecua_trainer.weights.weight_sync")
    planted = [
        ("kubecua_trainer.learning.loss", "kubecua_trainer.weights.weight_sync"),
        ("kubecua_trainer.telemetry.status", "kubecua_trainer.run.train"),
    ]
    assert set(planted) <= set(upward_imports(graph))  # and what now reaches status in a circle
    assert tier_violations(graph, "kubecua_trainer", ROOMS) == planted


def test_the_table_finds_a_sideways_import_and_a_room_it_leaves_out() -> None:
    graph = {
        "pkg.top": {"pkg.a.x"},
        "pkg.a.x": {"pkg.b.y", "pkg.top"},  # a and b share a tier: sideways
        "pkg.b.y": set(),
        "pkg.c.z": {"pkg.b.y"},  # c is in no tier
    }
    assert tier_violations(graph, "pkg", [("a", "b")]) == [("pkg.a.x", "pkg.b.y"), ("pkg.c.z", "")]
    assert tier_violations(graph, "pkg", [("c",), ("a",), ("b",)]) == []


def test_the_checker_finds_two_modules_importing_each_other_for_types() -> None:
    graph = {"pkg.loop": {"pkg.sub.stage"}, "pkg.sub.stage": {"pkg.loop"}, "pkg.util": set()}
    assert mutual_imports(graph) == [("pkg.loop", "pkg.sub.stage")]
    types = import_graph(ROOT, "kubecua_trainer", types_too=True)
    assert "kubecua_trainer.run.loop" in types["kubecua_trainer.run.pipeline"]  # TYPE_CHECKING only
    assert "kubecua_trainer.evaluation.held_out" in types["kubecua_trainer.run.loop"]


def test_no_two_modules_import_each_other_even_for_types() -> None:
    assert mutual_imports(import_graph(ROOT, "kubecua_trainer", types_too=True)) == []


def test_the_package_never_imports_the_benchmarks() -> None:
    graph = import_graph(ROOT, "kubecua_trainer", "bench")
    users = {m: sorted(i for i in imp if inside(i, "bench")) for m, imp in graph.items()}
    assert {m: u for m, u in users.items() if inside(m, "kubecua_trainer") and u} == {}
