"""The learner and what it learns from: the batch (batch.py: advantages, dynamic sampling, success
replay), the shaped reward (reward.py), the loss (loss.py), log-probs (logprobs.py), the optimizer
step (learner.py) and its set-up with the speed-ups (learner_setup.py), FSDP2 sharding (sharded.py)
and what a checkpoint holds (checkpoint.py)."""
