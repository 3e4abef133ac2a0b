"""Families as plugins: the built-in ones regenerate the repository's files byte for byte
through the entry points, bad parameters are refused naming the parameter, and a family that
another distribution registers is found and run like the built-in ones. No desktops; about 5 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubecua_tasks.builtin import BUILT_IN, TASKS_DIR, built_in_files
from kubecua_tasks.files import stale
from kubecua_tasks.plugin import ParamError, discover

KUBECUA = Path(sys.executable).parent / "kubecua"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECUA), *args], capture_output=True, text=True, env=env)


def test_every_built_in_family_is_an_installed_plugin() -> None:
    assert set(BUILT_IN) <= set(discover())


def test_generate_writes_each_built_in_family_as_the_repository_holds_it(tmp_path: Path) -> None:
    for name in BUILT_IN:
        done = _cli("tasks", "generate", name, "--out", str(tmp_path))
        assert done.returncode == 0, done.stderr
    written = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.json")}
    assert len(written) > 800
    assert all((TASKS_DIR / n).read_text() == text for n, text in written.items())
    assert written == built_in_files()


def test_check_names_a_changed_file_and_one_no_generator_writes(tmp_path: Path) -> None:
    assert _cli("tasks", "generate", "typeword", "--out", str(tmp_path)).returncode == 0
    changed = tmp_path / "typeword/train/typeword-red-apple.json"
    changed.write_text(changed.read_text().replace("red apple", "red apples"))
    (tmp_path / "typeword/train/typeword-extra.json").write_text("{}")
    (tmp_path / "typeword/verified.json").write_text("{}")  # a manifest is no stale task file
    files = discover()["typeword"].generate(discover()["typeword"].parse({}))
    assert stale(files, tmp_path) == [
        "typeword/train/typeword-extra.json",
        "typeword/train/typeword-red-apple.json",
    ]
    done = _cli("tasks", "generate", "typeword", "--out", str(tmp_path), "--check")
    assert done.returncode == 1
    assert "typeword-red-apple.json" in done.stderr


def test_parameters_change_the_family(tmp_path: Path) -> None:
    args = ["--param", "name=ck2", "--param", "length=2", "--param", "heldout=5"]
    done = _cli(
        "tasks", "generate", "colourkeys", *args, "--param", "demos=6", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads((tmp_path / "ck2/family.json").read_text())
    assert (meta["length"], meta["splits"]) == (2, {"train": 20, "heldout": 5})
    assert len(list(tmp_path.glob("ck2/heldout/*.solutions.json"))) == 5
    task = json.loads((tmp_path / "ck2/train" / f"{meta['warmup'][0]}.json").read_text())
    assert len(task["evaluator"]["expected"]["rules"]["expected"]) == 2  # two keys an instance


@pytest.mark.parametrize(
    ("params", "named"),
    [
        (["length=x"], "parameter 'length': Input should be a valid integer"),
        (["lenght=2"], "parameter 'lenght': Extra inputs are not permitted"),
        (["layout.cols=zero"], "parameter 'layout.cols'"),
        (["length=4"], "length 4 does not fit layout.cols 3"),
        (["heldout=200"], "heldout 200 and demos 65"),
        (['quits={"rate": 2}'], "every rate (confusions, misread, quits) must be within 0..1"),
        (["novalue"], "--param 'novalue': write NAME=VALUE"),
    ],
)
def test_bad_parameters_are_refused_naming_them(params: list[str], named: str) -> None:
    args = [a for p in params for a in ("--param", p)]
    done = _cli("tasks", "generate", "colourkeys", *args, "--out", "/nonexistent")
    assert done.returncode == 2
    assert named in done.stderr


def test_an_unknown_family_lists_the_installed_ones() -> None:
    done = _cli("tasks", "generate", "nope", "--out", "/nonexistent")
    assert done.returncode == 2
    assert "no task family 'nope' is installed (installed: colourkeys," in done.stderr


def test_parse_merges_given_values_over_registered_defaults() -> None:
    demo = discover()["colourkeys-demo"]
    params = demo.parse({"seed": 3})
    assert (params.name, params.heldout, params.seed, params.quits.rate) == (
        "colourkeys-demo",
        30,
        3,
        0.6,
    )
    with pytest.raises(ParamError, match="parameter 'seed'"):
        demo.parse({"seed": "three"})


PLUGIN = """
from pydantic import BaseModel
from taskkit import H, check, collect, py, task
from kubecua_tasks.plugin import TaskFamily

class Params(BaseModel):
    count: int = 2

def build(p: Params) -> dict[str, str]:
    def tasks() -> None:
        for i in range(p.count):
            task("mine", f"mine-{i}", f"Write {i} into n.txt.", [],
                 check(f"cat {H}/n.txt", [str(i)]), [py(f"(HOME/'n.txt').write_text('{i}')")], [])
    return collect(tasks)

MINE = TaskFamily("mine", "a family of another package", Params, build)
"""


def test_a_family_registered_by_another_distribution_runs(tmp_path: Path) -> None:
    """A distribution on the path (its dist-info's entry_points.txt), as pip install leaves it."""
    (tmp_path / "site/mine_tasks.py").parent.mkdir()
    (tmp_path / "site/mine_tasks.py").write_text(PLUGIN)
    info = tmp_path / "site/mine_tasks-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-tasks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kubecua.task_families]\nmine = mine_tasks:MINE\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    listed = _cli("tasks", "list", env=env)
    assert "mine               a family of another package" in listed.stdout
    done = _cli(
        "tasks", "generate", "mine", "--param", "count=3", "--out", str(tmp_path / "out"), env=env
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out/mine").glob("*.json")) == [
        f"mine-{i}{s}.json" for i in range(3) for s in ("", ".solutions")
    ]
