"""Start fingerprints compared: within SAME_SCREEN_BITS of each other is one screen, beyond is
another; accessibility trees must match where both have one; unknown prints are skipped."""

from __future__ import annotations

import pytest

from kubecua_sandbox_client import SAME_SCREEN_BITS, StartFingerprint, same_start, starts_agree
from kubecua_sandbox_client.fingerprint import distance

A = "0" * 64
NEAR = "0" * 62 + "ff"  # 8 bits off: the threshold, still the same screen
FAR = "0" * 61 + "1ff"  # 9 bits off


def fp(screen: str, a11y: str | None = None) -> StartFingerprint:
    return StartFingerprint(screen=screen, a11y=a11y)


def test_distance_counts_differing_bits() -> None:
    assert (distance(A, A), distance(A, NEAR), distance(A, FAR)) == (0, 8, 9)
    with pytest.raises(ValueError, match="different lengths"):
        distance(A, "00")


def test_same_start_within_the_threshold_and_equal_trees() -> None:
    assert SAME_SCREEN_BITS == 8
    assert same_start(fp(A), fp(NEAR))
    assert not same_start(fp(A), fp(FAR))
    assert same_start(fp(A, "t1"), fp(A))  # one tree unknown: the screens decide
    assert not same_start(fp(A, "t1"), fp(A, "t2"))


def test_starts_agree_skips_unknown_prints() -> None:
    assert starts_agree([fp(A), None, fp(NEAR)])
    assert starts_agree([None, None])
    assert not starts_agree([fp(A), None, fp(NEAR), fp(FAR)])
