"""The run's mark in its episode ids (sources/reclaim.py): what the reclaim at a run's start
matches on. The release itself is tested on real desktops in test_distributed_faults.py."""

from __future__ import annotations

import re

from kubecua_sandbox_client.models import EPISODE_ID_PATTERN
from kubecua_trainer.sources.reclaim import episode_id, owner_of


def test_a_runs_mark_is_stable_and_differs_by_name_and_namespace() -> None:
    mark = owner_of("demo-local", None)  # every attempt of the run computes it again
    assert re.fullmatch(r"kc[0-9a-f]{10}", mark), mark
    assert mark == owner_of("demo-local", "default")  # a local run is the default namespace's
    others = {owner_of("demo-local", "team-a"), owner_of("demo-local2", None)}
    assert mark not in others
    assert len(others) == 2


def test_every_id_the_trainer_makes_is_one_the_episode_api_accepts() -> None:
    longest = "x" * 253  # a Kubernetes object name at its longest: the mark is a fixed 12
    for owner in (owner_of(longest, "n" * 63), ""):
        eid = episode_id(owner, "ep", "0123456789abcdef")
        assert re.fullmatch(EPISODE_ID_PATTERN, eid), eid
        assert eid.startswith(f"{owner}-") == bool(owner)
