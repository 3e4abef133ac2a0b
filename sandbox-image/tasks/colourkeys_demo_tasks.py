"""The colourkeys-demo family: `make demo`'s, made with the colourkeys generator
(colourkeys_tasks.py, whose docstring describes the screens, the evaluator and the biased
demonstrator) with parameters sized for a demo that must show reinforcement learning adding to
the warm-up within minutes on 2 CPU cores.

Why these parameters (chosen with bench/learning/offline.py's pieces, seed 0, 2026-11-28):
- one confused colour, not two: the demonstrator presses g for red on 60% of the demonstrated
  red squares (as a red-green colour-blind person might), every other square right. Imitating
  that leaves the greedy policy wrong on red only, while sampling still finds r (about 1 reply
  in 4 after the warm-up): GRPO has one thing to fix, and 13 of the 30 held-out instances, the
  ones with a red square, hang on it. Red and green are far apart on the screen, which was
  meant to keep pushing r up on red from dragging a similar colour's key along (offline, red
  pressed m, magenta's key, lost magenta when GRPO fixed red); but the demonstrator's g for red
  makes the warm-up treat red and green alike, and on real desktops green was then pressed r
  (docs/benchmarks.md, 2026-11-28 session 3);
- 50 demonstrations of the 95 training instances: with every instance of a 4-colour family
  demonstrated (34) the warm-up memorised each screen's label and sampled r on red 8 to 23% of
  the time, read the other colours at 30 to 90% and GRPO moved held-out success by a few
  instances; with 50 of 95, 30 epochs read every other colour right (seed 0, greedy, first
  screen of every held-out instance; seed 1 read blue and yellow at 25 and 40% after 30) and
  the 45 undemonstrated training instances give GRPO screens whose red it has not memorised;
- 30 held-out sequences (the demo evaluates all of them), three squares an episode: three
  actions, the same screens and grid as colourkeys (one image token a cell).
On real desktops (`make demo`, 2026-11-28, three runs) the warm-up reached 17, 16 and 11 of 30
held-out and 8 GRPO steps at 4e-4 did not move it outside the noise (the README's demo section).
The full benchmark (`make bench-learning`, --family .../colourkeys) keeps the larger family.
"""

from __future__ import annotations

from colourkeys_tasks import SYMBOLS, Confusion, family

DEMO_CONFUSIONS = (Confusion("red", "g", 0.6),)

COLOURKEYS_DEMO = family(
    name="colourkeys-demo",
    symbols=SYMBOLS,
    length=3,
    heldout=30,
    demos=50,
    confusions=DEMO_CONFUSIONS,
)
