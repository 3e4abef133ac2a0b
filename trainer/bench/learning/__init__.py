"""The learning benchmark (`make bench-learning`): warm-up, GRPO and held-out evaluation of a
small model on the typeword task family, on real local desktops (run.py), and its offline
calibration loop (offline.py)."""
