"""Success replay: grows with successes, caps per task, injects only into all-fail groups, and
round-trips through its state dict."""

from __future__ import annotations

import torch

from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.tokens import Sample


def _s(reward: float, tag: int = 0, group: str = "g") -> Sample:
    ids = torch.tensor([1, 2, tag])
    return Sample(ids, torch.tensor([False, True, True]), torch.tensor([0.0, -1.0, -2.0]), None,
                  None, reward=reward, group_id=group, task_id="t")  # fmt: skip


def test_buffer_keeps_last_successes_per_task() -> None:
    replay = SuccessReplay(max_per_task=2)
    for tag in range(3):
        replay.add("t", [_s(1.0, tag)])
    assert len(replay) == 2
    tags = {int(replay.sample("t")[0].input_ids[2]) for _ in range(20)}  # type: ignore[index]
    assert tags == {1, 2}  # the oldest success (tag 0) was dropped
    assert replay.sample("other") is None


def test_injects_only_into_all_fail_groups() -> None:
    replay = SuccessReplay()
    replay.add("t", [_s(1.0, 7, group="old")])
    mixed = [_s(0.0), _s(1.0)]
    assert not replay.inject(mixed, "t")
    failed = [_s(0.0, group="step3"), _s(0.0, group="step3")]
    assert replay.inject(failed, "t")
    assert [s.reward for s in failed] == [0.0, 1.0]
    assert failed[1].group_id == "step3"
    assert int(failed[1].input_ids[2]) == 7
    assert replay.injections == 1
    assert not SuccessReplay().inject([_s(0.0)], "t")  # nothing stored yet


def test_state_dict_round_trip() -> None:
    replay = SuccessReplay(max_per_task=3, seed=5)
    for tag in range(3):
        replay.add("t", [_s(1.0, tag)])
    replay.sample("t")
    restored = SuccessReplay()
    restored.load_state_dict(replay.state_dict())
    assert len(restored) == 3
    assert restored.injections == 1
    a, b = replay.sample("t"), restored.sample("t")
    assert a is not None
    assert b is not None
    assert torch.equal(a[0].input_ids, b[0].input_ids)
