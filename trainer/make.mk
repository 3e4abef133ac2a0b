# Trainer: multi-turn GRPO for computer-use agents (trainer/kubecua_trainer), and `make demo`.
$(eval $(call python-project,trainer,trainer))
TEST_TARGETS += test-trainer

.PHONY: test-trainer demo
# The end-to-end test needs local sandboxes, the cluster tests the control plane.
test-trainer: trainer-env sandbox-env setup-go
	cd trainer && .venv/bin/pytest -q

# A tiny Qwen2.5-VL built from a config with a locally trained tokenizer (no download); its stamp
# (TINY_MODEL_STAMP, in the top Makefile) is named by its builder's hash.
$(TINY_MODEL_STAMP): | trainer-env
	trainer/.venv/bin/python -m kubecua_trainer.tiny_models $(TINY_MODEL) --family qwen2_5_vl
	rm -f $(TINY_MODEL)/.inputs-* && touch $@

# Each demo starts afresh: a run would otherwise resume from the last demo's checkpoints.
# DEMO_FAMILY is the task family's folder that DEMO_MANIFEST's paths name (its model and
# demonstrations are linked under $(KUBECUA_CACHE) by the family's name).
DEMO_MANIFEST := examples/trainingrun-local.yaml
DEMO_FAMILY := sandbox-image/tasks/colourkeys-demo
DEMO_OUT := out/demo
# One torch thread: the model is tiny, so its ops are too small to share, and with two threads
# on a busy 2-core machine a warm-up forward and backward took 1.1-1.4 s against 0.14-0.20 s
# with one (2026-11-28, load average ~13; 6 of the demo's demonstrations, forward and backward timed).
DEMO_ENV := OMP_NUM_THREADS=1
# SEED=n runs the same recipe with another seed (the manifest's spec.seed otherwise); the run
# prints the seed it uses first, and the report and the last lines show it.
SEED ?=

# It first builds the small model and records the warm-up's demonstrations on real desktops
# (both cached under $(KUBECUA_CACHE) by a hash of their inputs; bench/learning/run.py --prepare),
# runs the TrainingRun, which evaluates the untrained model itself before its warm-up
# (spec.evaluation.beforeWarmup, into $(DEMO_OUT)/untrained: no second trainer process and pair
# of desktops for it), and ends with held-out success untrained, after the warm-up and after
# GRPO, each with its interval, and whether GRPO's change is outside the noise
# (bench/learning/summary.py).
# Its set-up is its own: the Debian packages two local desktops and the CPU trainer need
# (hack/apt/demo/desktops.txt: about 210 packages, 135 MB onto a minimal Debian 12, against about
# 830 and 660 MB for make test's hack/apt/*.txt) installed while uv fills the three venvs (apt
# waits on the disk, uv on the network: they overlap), then the local desktop account. No Chromium,
# so no chrome link (desktop-host): the family's window is a Tk program.
DEMO_APT := hack/apt/demo/desktops.txt
.PHONY: demo-setup
demo-setup:
	$(MAKE) --no-print-directory -j4 APT_LISTS=$(DEMO_APT) setup-apt trainer-env desktop-env episode-env
	$(MAKE) --no-print-directory APT_LISTS=$(DEMO_APT) desktop-account

demo: demo-setup ## the main job: a TrainingRun locally (small model, CPU, 2 Xvfb desktops): warm-up, held-out evaluation, GRPO; metrics on 127.0.0.1:9400 (SEED=n: another seed)
	cd trainer && .venv/bin/python -m bench.learning.run --prepare --family $(CURDIR)/$(DEMO_FAMILY)
	rm -rf $(DEMO_OUT)
	$(DEMO_ENV) trainer/.venv/bin/python -m kubecua_trainer run $(DEMO_MANIFEST) --output-dir $(DEMO_OUT) $(if $(SEED),--seed $(SEED))
	PYTHONPATH=trainer trainer/.venv/bin/python -m bench.learning.summary $(DEMO_OUT)

# Learner speed and memory beside naive transformers (bench/learner_bench.py). Meant for the
# GPU machine, which has torch but no uv venv, so python3 runs it there; with the trainer's venv
# and no GPU it runs a toy-width smoke version and says so in its JSON.
BENCH_TRAINER_PY ?= $(if $(wildcard trainer/.venv/bin/python),$(CURDIR)/trainer/.venv/bin/python,python3)
.PHONY: bench-trainer
bench-trainer: ## learner tokens/s, TFLOP/s, peak GiB vs naive transformers (GPU; CPU: toy smoke)
	cd trainer && PYTHONPATH=. $(BENCH_TRAINER_PY) -m bench.learner_bench $(BENCH_ARGS)

# Embedded generation: plain generate() vs the continuous engine with KV reuse, 8 episodes x 8 turns
# of 720p on the 3B shape (bench/generation_bench.py); CPU: toy smoke.
.PHONY: bench-generation
bench-generation: ## generation tokens/s (prefill, decode apart), peak GiB: plain generate() vs the engine (GPU; CPU: toy smoke)
	cd trainer && PYTHONPATH=. $(BENCH_TRAINER_PY) -m bench.generation_bench $(BENCH_ARGS)

# The distributed learner on the GPUs there are (torchrun; NPROC=2 on a two-GPU machine): weight
# refresh seconds for the 3B and 7B shapes, FSDP2 vs plain learner tokens/s (bench/distributed_bench.py).
NPROC ?= 1
.PHONY: bench-trainer-distributed bench-trainer-rollouts
bench-trainer-distributed: ## weight refresh (3B, 7B) and FSDP2 vs plain learner speed (GPU; CPU: toy smoke)
	cd trainer && PYTHONPATH=. $(BENCH_TRAINER_PY) -m torch.distributed.run --nproc-per-node $(NPROC) -m bench.distributed_bench $(BENCH_ARGS)
# Desktop utilisation with synchronous vs staleness-1 rollouts (CPU, local desktops); the tiny
# model by default, BENCH_ARGS=--learner-bound for an update as long as a step's rollouts.
bench-trainer-rollouts: trainer-env sandbox-env ## fraction of wall time desktops spend in episodes, sync vs maxStaleness 1 (BENCH_ARGS=--learner-bound)
	cd trainer && .venv/bin/python -m bench.rollout_overlap $(BENCH_ARGS)

# Learning on held-out tasks (bench/learning/run.py): a task family's folder (BENCH_ARGS="--family
# ../sandbox-image/tasks/typeword"; colourkeys-quits by default), a model built from a config, a warm-up on
# recorded demonstrations ended by spec.warmup.stopWhen, then per seed three arms from it: GRPO,
# supervised training continued beside GRPO's steps for their wall time, an LR-0 control; a pooled
# McNemar test; real local desktops, the seeds side by side (3 desktops each). Prints JSON;
# out/bench-learning/curves.png. BENCH_ARGS=--smoke: 1 seed, 1 step,
# 4 held-out instances (make test runs it in tests/bench/, and a learning check in trainer/tests/test_learning_check.py).
# The curriculum by pass rate against uniform sampling on the offline suite (no desktops;
# bench/learning/curriculum_ab.py): zero-variance groups and held-out success per arm, one command.
.PHONY: bench-curriculum
bench-curriculum: trainer-env ## curriculum vs uniform task sampling: zero-variance groups, held-out success (CPU, offline suite)
	cd trainer && .venv/bin/python -m bench.learning.curriculum_ab $(BENCH_ARGS)

.PHONY: bench-learning
# Its local desktops are the demo's, so is its set-up (demo-setup: the demo's apt list, not make
# test's whole set; hack/check-apt-targets.py, in make lint, holds every such target to it).
bench-learning: demo-setup ## does held-out success rise? warm-up + GRPO, 3 seeds + LR-0 control, real desktops (BENCH_ARGS=--smoke)
	cd trainer && .venv/bin/python -m bench.learning.run --out $(CURDIR)/out/bench-learning $(BENCH_ARGS)

# How often a recipe's rise holds (bench/learning/robustness.py): make demo's and make
# bench-learning's recipes offline (no desktops), 20 seeds x torch threads 1 and 2 (two float
# orders), the runs side by side on every core; prints the rate outside the noise (McNemar p < 0.01)
# and the worst seed. ROBUST_ARGS="--recipes demo --seeds 0 1 --threads 1" for a part of it.
.PHONY: bench-robustness
bench-robustness: trainer-env ## how often GRPO's held-out rise is outside the noise: 20 seeds x 2 float orders, demo's and bench's recipes (offline, CPU)
	cd trainer && .venv/bin/python -m bench.learning.robustness --out $(CURDIR)/out/bench-robustness $(ROBUST_ARGS)

# The whole loop on one GPU (bench/loop_bench.py): the trainer's own rollouts,
# engine and learner, 3B shape, groups of 8, 8-turn 720p episodes on stand-in desktops replaying
# real recorded ones; sync and maxStaleness 1. CPU: toy smoke (BENCH_ARGS=--smoke forces it).
# LOOP_WORLDS="1 2 4": torchrun at each world (a process a GPU, the step grown with the world), one
# launch a mode (LOOP_MODES; disaggregated: the placement, world 2+), the JSON in out/bench-loop/,
# then the per-GPU loop efficiency and disaggregated vs colocated sync (bench/loop_scaling.py).
LOOP_WORLDS ?=
LOOP_MODES ?= sync,staleness_1,disaggregated
.PHONY: bench-loop
bench-loop: ## whole-loop GPU time split, generation/learner tok/s, trajectories/min, peak GiB; LOOP_WORLDS="1 2 4": per-GPU efficiency (GPU; CPU: toy smoke)
ifeq ($(strip $(LOOP_WORLDS)),)
	cd trainer && PYTHONPATH=.:../sandbox-image/client $(BENCH_TRAINER_PY) -m bench.loop_bench $(BENCH_ARGS)
else
	cd trainer && PYTHONPATH=.:../sandbox-image/client $(BENCH_TRAINER_PY) -m bench.loop_scaling \
	  --worlds $(LOOP_WORLDS) --modes $(LOOP_MODES) --out-dir $(CURDIR)/out/bench-loop -- $(BENCH_ARGS)
endif
