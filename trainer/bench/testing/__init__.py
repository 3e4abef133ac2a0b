"""Test harness: synthetic screenshots, the token bandit, the smoke run, multi-rank checks."""
