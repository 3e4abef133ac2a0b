"""Condition helpers keep lastTransitionTime unless the status flips."""

from kubecua_operator import conditions as c


def test_merge_keeps_transition_time_when_status_is_unchanged():
    old = [{"type": "Ready", "status": "False", "lastTransitionTime": "T0"}]
    new = c.merge(old, [c.make("Ready", False, "NotEnoughReady", "1/2", 3)], now="T1")
    assert new[0]["lastTransitionTime"] == "T0"
    assert new[0]["reason"] == "NotEnoughReady"
    assert new[0]["observedGeneration"] == 3


def test_merge_stamps_now_on_a_flip_and_on_a_new_condition():
    old = [{"type": "Ready", "status": "False", "lastTransitionTime": "T0"}]
    new = c.merge(
        old, [c.make("Ready", True, "AllReady", "", 1), c.make("Degraded", False, "X", "", 1)], "T1"
    )
    assert [x["lastTransitionTime"] for x in new] == ["T1", "T1"]


def test_transitions_lists_only_flipped_conditions():
    old = [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}]
    new = [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "True"}]
    assert [x["type"] for x in c.transitions(old, new)] == ["Degraded"]
    assert c.is_true(new, "Degraded")
    assert not c.is_true(new, "Missing")
