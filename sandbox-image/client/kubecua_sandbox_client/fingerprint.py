"""Whether two episodes started from the same screen, from their start fingerprints (the episode
server's StartFingerprint: a 256-bit dHash of the first screenshot, and a hash of the first
accessibility tree when one was asked for). Shared by the trainer (a GRPO group's episodes must
start alike, else their advantages compare different problems) and task verification (a task's
repeats must start alike to be trainable).

Why a Hamming threshold and not equality: dHash compares the brightness of neighbouring cells of
a 17x16 grey thumbnail, so a blinking text cursor, a clock's digits or JPEG-like noise move a few
bits at most, while another window, layout or order of things on the screen moves dozens.
SAME_SCREEN_BITS (8 of 256) sits between the two, measured on the offline suite's screens
(docs/tasks.md)."""

from __future__ import annotations

from collections.abc import Sequence

from kubecua_sandbox_client.models import StartFingerprint

SAME_SCREEN_BITS = 8


def distance(a: str, b: str) -> int:
    """Bits that differ between two hex hashes of the same length."""
    if len(a) != len(b):
        raise ValueError(f"hashes of different lengths: {len(a)} and {len(b)} hex digits")
    return (int(a, 16) ^ int(b, 16)).bit_count()


def same_start(a: StartFingerprint, b: StartFingerprint, bits: int = SAME_SCREEN_BITS) -> bool:
    """Same screen (within `bits`), and the same accessibility tree when both have one."""
    if a.a11y is not None and b.a11y is not None and a.a11y != b.a11y:
        return False
    return distance(a.screen, b.screen) <= bits


def starts_agree(prints: Sequence[StartFingerprint | None], bits: int = SAME_SCREEN_BITS) -> bool:
    """Whether every known fingerprint matches the first known one; unknown ones (null: an old
    server, a failed start) neither agree nor disagree. Example: three equal screens and one
    None -> True; one screen 30 bits off the others -> False."""
    known = [p for p in prints if p is not None]
    return all(same_start(known[0], p, bits) for p in known[1:])
