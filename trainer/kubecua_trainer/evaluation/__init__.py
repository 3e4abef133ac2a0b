"""Held-out evaluation: success rate and pass@k of a policy on tasks it never trains on."""
