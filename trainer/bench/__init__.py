"""Benchmarks and test harness of the trainer, outside the installed package (trainer/Dockerfile
copies only kubecua_trainer/): they build models, desktops and workloads that a run never needs.

Import it from trainer/ (the make targets run `cd trainer && python -m bench.<module>`; pytest's
rootdir conftest puts trainer/ on sys.path). It may import kubecua_trainer; kubecua_trainer never
imports it (trainer/tests/test_import_layers.py checks).

- learner_bench, cases, shapes, flops: `make bench-trainer`; generation_bench: `make
  bench-generation`; distributed_bench, fsdp_smoke: the learner on several GPUs; loop_bench,
  replay_desktop, recordings/: `make bench-loop`; rollout_overlap: `make bench-trainer-rollouts`;
  step_bench: one learner step at a real shape.
- learning/: `make bench-learning` and the start of `make demo`.
- testing/: synthetic screenshots, the token bandit, the smoke run and the torchrun checks of the
  distributed learner, for trainer/tests.
"""
