"""The colourkeys family's biased demonstrator: what it presses on the warm-up's instances
(colourkeys_tasks.py writes it as each demonstrated instance's `demonstration` solution).

The warm-up's demonstrations are not the reference solutions but what a demonstrator with
habits did, as when demonstrations are recorded by a weaker agent or a person: supervised
training converges to the habit, and reinforcement learning against the evaluator (which stays
correct, as do the reference solutions) can turn the right replies that sampling still finds
into greedy ones (pass@k into pass@1). Three habits, each drawn exactly (round(rate x eligible))
with the family's seed:

- a Confusion is per colour: the demonstrator presses another key for one colour. It teaches
  the warm-up that colour's wrong key; undoing it asks the policy to tell that colour from the
  one whose key it presses, which the warm-up had no reason to learn (on `make demo`'s family,
  red pressed g, GRPO's steps rewarding r on red also pressed r on green: docs/benchmarks.md);
- a Misread is per position: the demonstrator reads the row from the wrong end and presses the
  key of the RIGHTMOST square still shown instead of the leftmost (the key press still takes
  the leftmost square away, as the window does). Every colour's key is demonstrated right, so
  the warm-up learns all of them; what is wrong is which cell to read, one behaviour shared by
  every instance (the right answer is always in the row's first cell), so each GRPO step that
  rewards the first cell pushes every instance the same way. Measured: the 2-layer demo model
  did not learn it as a position (its warm-up pressed the middle square's key, never
  demonstrated there, in 17-23% of its replies) and GRPO did not add outside the noise
  (docs/benchmarks.md, 2026-11-28 session 4);
- Quits is per demonstration: the demonstrator presses DONE with one square still on the
  screen. Every key it presses is right, so the warm-up learns to read every colour; what is
  wrong is one behaviour shared by every instance (stopping one square short), which the
  screen shows plainly (a single square left) and which each GRPO step rewarding the last key
  pushes the same way for all instances (`make demo`'s family, colourkeys_demo_tasks.py). It is
  drawn per colour of the last square (round(rate x demonstrations ending in it)), so that no
  colour's share drifts below one half by chance and leaves the greedy policy right on it.

A Misread's eligible turns are those where the leftmost and the rightmost square differ in
colour: where they agree (one square left, or both ends the same colour) reading from either
end presses the same key, so counting them would only dilute the rate the warm-up sees. A
Confusion then applies to the squares the demonstrator read and pressed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol


class HasKey(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def key(self) -> str: ...


@dataclass(frozen=True)
class Confusion:
    symbol: str  # the colour's name (Symbol.name) the demonstrator misreads
    pressed: str  # the key it presses instead
    rate: float  # the share of that colour's demonstrated squares where it does


@dataclass(frozen=True)
class Misread:
    rate: float  # the share of eligible turns (ends of the row differ) read from the right


@dataclass(frozen=True)
class Quits:
    rate: float  # per colour of the last square, the share of demonstrations ended before it


def demonstrator(
    demos: list[tuple[int, ...]],
    symbols: tuple[HasKey, ...],
    confusions: tuple[Confusion, ...],
    seed: int,
    misread: Misread | None = None,
    quits: Quits | None = None,
) -> tuple[list[str], dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The keys the biased demonstrator presses on each demonstrated sequence (then DONE), per
    confused colour how many demonstrated squares of it were read and how many pressed wrong,
    and per other habit ("misread", "quits") how many cases were eligible and how many drawn.

    Example: demos [(0, 1), (0, 0)] over red r / green g with Confusion("red", "g", 0.7): of the
    three red squares round(2.1) = 2, drawn with `seed`, are pressed g, the green one g: the keys
    are e.g. ['gg', 'gr'], the count {"red": {"squares": 3, "confused": 2}}.
    With Misread(1.0) instead on demos [(0, 1, 2)]: turn 1 shows r g b and presses b, turn 2
    shows g b and presses b, turn 3 shows b: 'bbb', {"misread": {"turns": 2, "drawn": 2}}.
    With Quits(0.5) on demos [(0, 1), (1, 1)]: each last colour (green) has two demonstrations,
    one of which, drawn, ends after its first key: e.g. ['rg', 'g'], {"quits": {"demonstrations":
    2, "drawn": 1}}."""
    index = {s.name: i for i, s in enumerate(symbols)}
    habits: dict[str, dict[str, int]] = {}
    # read[d][t]: the position in demos[d] of the square the demonstrator reads at turn t; a
    # demonstration that quits has one turn fewer.
    read = [list(range(len(seq))) for seq in demos]
    if quits is not None:
        if not 0.0 <= quits.rate <= 1.0:
            raise ValueError(f"quits {quits}: needs a rate in 0..1")
        rng = random.Random(f"quits-{seed}")
        quit = []
        for last in sorted({seq[-1] for seq in demos if len(seq) > 1}):
            ending = [d for d, seq in enumerate(demos) if len(seq) > 1 and seq[-1] == last]
            quit += rng.sample(ending, round(quits.rate * len(ending)))
        for d in quit:
            del read[d][-1]
        habits["quits"] = {"demonstrations": sum(len(seq) > 1 for seq in demos), "drawn": len(quit)}
    if misread is not None:
        if not 0.0 <= misread.rate <= 1.0:
            raise ValueError(f"misread {misread}: needs a rate in 0..1")
        turns = [(d, t) for d, seq in enumerate(demos) for t in range(len(read[d]))
                 if seq[t] != seq[-1]]  # fmt: skip
        chosen = random.Random(f"misread-{seed}").sample(turns, round(misread.rate * len(turns)))
        for d, t in chosen:
            read[d][t] = len(demos[d]) - 1
        habits["misread"] = {"turns": len(turns), "drawn": len(chosen)}
    keys = [[symbols[seq[p]].key for p in read[d]] for d, seq in enumerate(demos)]
    counts = {}
    rng = random.Random(f"demonstrator-{seed}")
    for c in confusions:
        if c.symbol not in index or not 0.0 <= c.rate <= 1.0 or len(c.pressed) != 1:
            raise ValueError(f"confusion {c}: needs a known colour, one key and a rate in 0..1")
        if c.pressed == symbols[index[c.symbol]].key:
            raise ValueError(f"confusion {c}: the key pressed instead is the right key")
        cells = [(d, t) for d, seq in enumerate(demos) for t, p in enumerate(read[d])
                 if seq[p] == index[c.symbol]]  # fmt: skip
        confused = rng.sample(cells, round(c.rate * len(cells)))
        for d, t in confused:
            keys[d][t] = c.pressed
        counts[c.symbol] = {"squares": len(cells), "confused": len(confused)}
    return ["".join(k) for k in keys], counts, habits
