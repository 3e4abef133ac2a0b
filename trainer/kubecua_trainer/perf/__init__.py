"""Learner performance on the GPU: varlen vision attention, selective checkpointing, offloaded
AdamW master weights, FLOP counting and the `make bench-trainer` benchmark (perf.bench)."""
