"""Learner speed-ups that production runs use: varlen vision attention, selective activation
checkpointing, the patch embedding as a matmul, torch.compile of the layers and offloaded AdamW
master weights. Their measurements live in trainer/bench/ (docs/benchmarks.md)."""
