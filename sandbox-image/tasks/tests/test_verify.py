"""`kubecua tasks verify` on real local desktops (Xvfb + episode servers, as `make demo` starts
them): a representative, fast part of the offline suite's families (two files tasks, a typeword
and a colourkeys-demo instance) must come out verified with a reproducible start, and each
known-bad task (tests/known_bad.py) with its own verdict: 0 false verdicts. Two desktops, two
repeats of each solution: 42 episodes, about 90 s on the shared 2-core machine. The judging
rules alone are checked on recorded episodes (no desktops)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from known_bad import EXPECTED, known_bad_files
from kubecua_tasks.builtin import TASKS_DIR
from kubecua_tasks.desktops import LAUNCHER
from kubecua_tasks.files import write
from kubecua_tasks.verify import Task, judge, load_folder

from kubecua_api.taskmanifest import EpisodeRecord, Solution, VerifiedManifest, task_digest

KUBECUA = Path(sys.executable).parent / "kubecua"
GOOD = [
    "files/create-hello-file.json",
    "files/rename-notes.json",
    "typeword/train/typeword-red-apple.json",
    "colourkeys-demo/heldout/colourkeys-demo-brg.json",
]
SCREEN_A = "0" * 64
SCREEN_B = "f" * 8 + "0" * 56  # 32 bits off A: another screen


def _sample(folder: Path) -> None:
    for rel in GOOD:
        for name in (rel, rel.replace(".json", ".solutions.json")):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(TASKS_DIR / name, folder / name)
    write(known_bad_files(), folder)


@pytest.mark.skipif(not LAUNCHER.exists(), reason="no local sandbox launcher: make sandbox-env")
def test_verify_gives_every_sample_and_known_bad_task_its_verdict(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    _sample(folder)
    manifest_path = tmp_path / "verified.json"
    done = subprocess.run(
        [str(KUBECUA), "tasks", "verify", str(folder), "--desktops", "2",
         "--manifest", str(manifest_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = VerifiedManifest.model_validate_json(manifest_path.read_text())
    got = {t.id: (t.verdict, t.reproducible_start) for t in manifest.tasks}
    want = {Path(r).stem: ("verified", True) for r in GOOD} | EXPECTED
    assert got == want, {
        t.id: (t.scores, t.episodes) for t in manifest.tasks if got[t.id] != want[t.id]
    }
    assert manifest.content_hash == load_folder(folder)[1]
    assert len(manifest.sandboxes) == 2
    for t in manifest.tasks:
        assert len(t.episodes) == 2 * len(t.scores)  # two repeats of each solution
        assert all(e.screen and len(e.screen) == 64 for e in t.episodes)
        assert t.digest == task_digest(json.loads((folder / t.path).read_text()))
    scores = manifest.by_id()["known-bad-broken-reference"].scores
    assert scores == {"reference": [0.0, 0.0], "noop": [0.0, 0.0], "wrong": [0.0, 0.0]}
    assert manifest.summary["usable"] == len(GOOD)
    assert manifest.summary["unreproducible-start"] == 1


def _task(wrong: bool = True) -> Task:
    sols = {"reference": [{"action": "DONE"}], "wrong": [{"action": "DONE"}] if wrong else []}
    return Task("a/t.json", {"id": "t", "instruction": "i", "evaluator": {}}, sols)


def _eps(
    ref: list[float | None],
    noop: list[float | None],
    wrong: list[float | None],
    screens: list[str] | None = None,
    setup_failed: bool = False,
) -> list[EpisodeRecord]:
    plays: list[tuple[Solution, list[float | None]]] = [
        ("reference", ref),
        ("noop", noop),
        ("wrong", wrong),
    ]
    out = [
        EpisodeRecord(
            solution=s,
            attempt=i,
            sandbox="u",
            score=v,
            seconds=1.0,
            setup_failed=setup_failed and v is None,
            screen=SCREEN_A,
        )
        for s, vs in plays
        for i, v in enumerate(vs)
    ]
    for e, screen in zip(out, screens or [], strict=False):
        e.screen = screen
    return out


@pytest.mark.parametrize(
    ("episodes", "verdict"),
    [
        (_eps([1, 1], [0, 0], [0, 0]), "verified"),
        (_eps([1, 1], [0, 0], [0.5, 0.5]), "verified"),  # partial credit is not a pass
        (_eps([1, None], [0, 0], [0, 0], setup_failed=True), "setup-fails"),
        (_eps([1, 0], [0, 0], [0, 0]), "flaky"),
        (_eps([1, 1], [0, 1], [0, 0]), "flaky"),
        (_eps([0, 0], [0, 0], [0, 0]), "reference-fails"),
        (_eps([1, 1], [1, 1], [0, 0]), "noop-passes"),
        (_eps([1, 1], [0, 0], [1, 1]), "wrong-passes"),
        (_eps([0.99, 0.99], [0, 0], [0, 0]), "reference-fails"),
    ],
)
def test_judge_rules(episodes: list[EpisodeRecord], verdict: str) -> None:
    assert judge(_task(), episodes).verdict == verdict


def test_a_task_without_a_wrong_solution_plays_none() -> None:
    record = judge(_task(wrong=False), _eps([1, 1], [0, 0], []))
    assert (record.verdict, list(record.scores)) == ("verified", ["reference", "noop"])


def test_start_reproducible_within_a_few_bits_not_beyond() -> None:
    near = "0" * 63 + "7"  # 3 bits off A: a cursor's blink
    assert judge(_task(), _eps([1, 1], [0, 0], [0, 0], [SCREEN_A, near])).reproducible_start
    record = judge(_task(), _eps([1, 1], [0, 0], [0, 0], [SCREEN_A, SCREEN_B]))
    assert (record.verdict, record.reproducible_start, record.usable) == ("verified", False, False)
