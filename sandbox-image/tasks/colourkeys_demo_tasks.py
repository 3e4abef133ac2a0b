"""The colourkeys-demo family: `make demo`'s, made with the colourkeys generator
(colourkeys_tasks.py, whose docstring describes the screens and the evaluator;
colourkeys_demonstrator.py the biased demonstrator's habits) with parameters sized for a demo
that must show reinforcement learning adding to the warm-up within minutes on 2 CPU cores.

Why these parameters (measured with bench/learning/offline.py, docs/benchmarks.md, 2026-11-28
session 4):
- the demonstrator quits early (Quits(0.6)): on 60% of its demonstrations, drawn per colour of
  the last square, it presses DONE with one square still on the screen; every key it presses
  is right. Imitating that, the warmed greedy policy reads the squares from the screen but
  stops one square short, while sampling still presses the last key now and then. The fix is
  one behaviour shared by every instance (press the last square too), so each GRPO step that
  rewards it pushes all of them the same way: offline, after the demo's 90-epoch warm-up, 8
  steps took held-out success 3 -> 27, 0 -> 26, 0 -> 6, 6 -> 28 and 4 -> 30 of 30 (seeds 0-4;
  seed 2's warm-up reads few colours); on real desktops (`make demo`, 2026-11-28 13:00 UTC)
  1 -> 16 of 30, 15 instances up and none down (McNemar p = 6.1e-5; the README's demo section).
- the habits tried before it did not let GRPO add outside the noise: a confused colour
  (the demonstrator pressed g for red on 60% of the red squares; four real runs, held-out
  +0 to +4) makes the warm-up treat red and green alike, so rewarding r on red also pressed r on
  green; reading the row from the right end on 60% of the turns (Misread) was not learnt as a
  position by this 2-layer model: its warm-up pressed the middle square's key, never
  demonstrated there, in 17-23% of its replies, and GRPO moved held-out success by -6 to +4
  (offline, 30 and 60 epochs);
- 50 demonstrations of the 95 training instances, so the 45 others give GRPO screens the
  warm-up has not memorised; 30 held-out sequences (the demo evaluates all of them), three
  squares an episode: three actions, the same screens and grid as colourkeys (one image token a
  cell).
The full benchmark (`make bench-learning`, --family .../colourkeys) keeps the larger family and
its colour confusions.
"""

from __future__ import annotations

from dataclasses import replace

from colourkeys_tasks import COLOURKEYS

COLOURKEYS_DEMO = replace(
    COLOURKEYS,
    name="colourkeys-demo",
    summary="colourkeys sized for make demo: 30 held-out, 50 demonstrations that quit early",
    defaults={
        "name": "colourkeys-demo",
        "length": 3,
        "heldout": 30,
        "demos": 50,
        "confusions": [],
        "quits": {"rate": 0.6},  # the demonstrator quits one square early on 60%
    },
)
