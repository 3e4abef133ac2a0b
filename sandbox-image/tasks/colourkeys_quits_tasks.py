"""The colourkeys-quits family: `make bench-learning`'s default, made with the colourkeys
generator (colourkeys_tasks.py, whose docstring describes the screens and the evaluator) with
colourkeys' splits (5 colours, 3 squares, 60 held-out sequences, all 65 training instances
demonstrated, seed 0) and a demonstrator that quits one square early (Quits(0.6),
colourkeys_demonstrator.py) instead of colourkeys' two confused colours.

Why (docs/benchmarks.md, 2026-11-28 sessions 4 and 6, offline with bench/learning/offline.py):
- with the confused colours, GRPO's rise over the warm-up depended on the seed (+1.7 to +31.7
  points on real desktops) because rewarding one colour's right key also moved the colour the
  warm-up had merged with it;
- with a demonstrator that quits, every key it presses is right, so the warm-up learns to read
  the colours, and the one thing wrong (stopping with one square on the screen) is shared by
  every instance, so each GRPO step that rewards the last key pushes all of them the same way;
  held-out instances stay new compositions (no training instance or demonstration shows their
  sequence, trainer/tests/test_learningbench.py), so a rise is generalisation, not recall.
colourkeys keeps the confused demonstrator (make test's learning check,
trainer/tests/test_learning_check.py, corrects a confused colour); colourkeys-demo is the same
idea sized for `make demo`.
"""

from __future__ import annotations

from dataclasses import replace

from colourkeys_tasks import COLOURKEYS

# colourkeys' splits are the generator's defaults (5 symbols, 3 squares, 60 held-out, 65 demos)
COLOURKEYS_QUITS = replace(
    COLOURKEYS,
    name="colourkeys-quits",
    summary="colourkeys with a demonstrator that quits one square early (make bench-learning)",
    defaults={"name": "colourkeys-quits", "confusions": [], "quits": {"rate": 0.6}},
)
