"""Supervised warm-up: fine-tuning on demonstrations (trajectories.py format) before GRPO."""
