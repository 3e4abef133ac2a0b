"""The order of a run: the loop of steps (train.py), the stages around them (pipeline.py), one
step (step.py), what steps and stages share (loop.py), checkpoints saved and resumed (saver.py)
and stopping early without losing work (stopping.py)."""
