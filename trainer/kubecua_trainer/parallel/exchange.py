"""What the ranks of a distributed step send each other, and to whom.

Every rank needs the whole step to build the same batch (rewards, advantages, dynamic sampling,
replay), but not its images: pixel values are what is big (about 50 MB of fp32 patch values for
one 1080p screenshot, and a sample carries every screenshot of its context). So each rank takes
the images out of the episodes it played (`strip`), keeps them, and all ranks exchange the light
episodes; then
- the screenshots go to rank 0 alone, which writes the report (`gather_screens`);
- each sample's pixel values go only to the ranks whose passes use it: the rank that trains it,
  a rank that pads its share with it, and every rank for a success the replay buffer keeps
  (the buffer is the same on every rank, so a checkpoint by rank 0 holds it whole)
  (`deliver_pixels`).
A stripped sample has pixel_values None and pixels_key "<owner rank>/<step>/<n>".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kubecua_trainer.parallel.distributed import Dist

if TYPE_CHECKING:
    from kubecua_trainer.rollout.groups import Group
    from kubecua_trainer.tokens import Sample


@dataclass
class Held:
    """What one rank took out of its own episodes of a step."""

    pixels: dict[str, torch.Tensor] = field(default_factory=dict)
    screens: dict[str, tuple[list[Any], Any]] = field(default_factory=dict)  # key -> turns, final


def strip(groups: list[Group], rank: int, step: int) -> Held:
    """Take pixel values and screenshots out of this rank's episodes (in place)."""
    held, n = Held(), 0
    for g in groups:
        for ep in g.episodes:
            held.screens[ep.key] = (
                [(t.screenshot, t.screen) for t in ep.turns],
                (ep.final_screenshot, ep.final_screen),
            )
            for t in ep.turns:
                t.screenshot, t.screen = None, None
            ep.final_screenshot, ep.final_screen = None, None
            for s in ep.samples:
                if s.pixel_values is not None:
                    s.pixels_key = f"{rank}/{step}/{n}"
                    held.pixels[s.pixels_key], s.pixel_values = s.pixel_values, None
                    n += 1
    return held


def gather_screens(d: Dist, groups: list[Group], held: Held) -> None:
    """Every rank's screenshots back into rank 0's episodes (collective; the others send)."""
    per_rank = d.gather_to_main(held.screens)
    if per_rank is None:
        return
    screens = {k: v for r in per_rank for k, v in r.items()}
    for g in groups:
        for ep in g.episodes:
            if ep.key in screens:
                turns, (ep.final_screenshot, ep.final_screen) = screens[ep.key]
                for t, (shot, encoded) in zip(ep.turns, turns, strict=True):
                    t.screenshot, t.screen = shot, encoded


def deliver_pixels(
    d: Dist, held: Held, need: list[list[Sample]], keys: list[list[str]] | None = None
) -> int:
    """Fill pixel_values of need[r] on rank r from the ranks that hold them (need is the same on
    every rank; samples that carry their pixels already, e.g. replayed ones, are skipped). One
    scatter per source rank: a rank receives only what it needs, its own included. keys: the
    pixels_key of each need[r]'s samples, where a sender's own view of need may differ (rank 0's
    broadcast; the disaggregated placement). Returns the number of pixel tensors received."""
    wanted = keys if keys is not None else [[s.pixels_key for s in share] for share in need]
    got: dict[str, torch.Tensor] = {}
    for src in range(d.world):
        payload: list[dict[str, torch.Tensor]] | None = None
        if d.rank == src:
            payload = [{k: held.pixels[k] for k in share if k in held.pixels} for share in wanted]
        mine: dict[str, torch.Tensor] = d.scatter_from(payload, src)
        got.update(mine)
    for s in need[d.rank]:
        if s.pixel_values is None and s.pixels_key in got:
            s.pixel_values = got[s.pixels_key]
    return len(got)
